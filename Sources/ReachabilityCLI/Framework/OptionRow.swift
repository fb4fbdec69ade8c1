import ReachabilityBase

/// One row of an option table: the option as the parser and the help read it (name, value and
/// help text), and where its parsed value goes in `Target` (a command, or an option group that
/// commands include).
///
/// A table is the single declaration of a command's options: `options` (parser, help, man page,
/// completions) are the rows' options and `init(arguments:)` runs the rows in order, so an option
/// cannot be listed without being read, nor read without being listed.
struct OptionRow<Target>: Sendable {
    /// The option; nil for a row that only reads what the rows above it left (positionals, or a
    /// rule between two options).
    let option: Option?
    /// Reads the option's value from the parsed arguments into the target.
    let store: @Sendable (ParsedArguments, inout Target) throws -> Void

    /// A row whose value `read` makes from the arguments and the option (for the checks a
    /// `TextValueKind` cannot say, such as one value against another).
    static func custom<Value>(_ option: Option, into path: WritableKeyPath<Target, Value> & Sendable,
                              read: @escaping @Sendable (ParsedArguments, Option) throws -> Value) -> OptionRow {
        OptionRow(option: option) { arguments, target in target[keyPath: path] = try read(arguments, option) }
    }

    /// A row that reads its option into the target as `body` says (a value that depends on another).
    static func reading(_ option: Option, _ body: @escaping @Sendable (ParsedArguments, Option, inout Target) throws -> Void) -> OptionRow {
        OptionRow(option: option) { arguments, target in try body(arguments, option, &target) }
    }

    /// A switch: `path` is true when it is given.
    static func flag(_ name: String, short: Character? = nil, help: String,
                     sets path: WritableKeyPath<Target, Bool> & Sendable) -> OptionRow {
        custom(.flag(name, short: short, help: help), into: path) { $0.isSet($1) }
    }

    /// A switch that says no: `path` is false when it is given (`--no-roaming`, `allowsRoaming`).
    static func flag(_ name: String, short: Character? = nil, help: String,
                     clears path: WritableKeyPath<Target, Bool> & Sendable) -> OptionRow {
        custom(.flag(name, short: short, help: help), into: path) { !$0.isSet($1) }
    }

    /// An option whose text is kept as given (the last one when repeated); nil when absent.
    static func value(_ name: String, short: Character? = nil, valueName: String, help: String,
                      into path: WritableKeyPath<Target, String?> & Sendable) -> OptionRow {
        custom(.value(name, short: short, valueName: valueName, help: help), into: path) { $0.value($1) }
    }

    /// An option read by `kind`, which holds its bounds and says what it expects; nil when absent.
    static func value<Kind: TextValueKind>(_ name: String, short: Character? = nil, valueName: String, help: String,
                                           as kind: Kind, into path: WritableKeyPath<Target, Kind.Value?> & Sendable) -> OptionRow {
        custom(.value(name, short: short, valueName: valueName, help: help), into: path) { try $0.value($1, as: kind) }
    }

    /// An option that names a file or directory: '' names nothing and is refused ("expected `what`").
    static func path(_ name: String, short: Character? = nil, valueName: String, expected what: String, help: String,
                     into path: WritableKeyPath<Target, String?> & Sendable) -> OptionRow {
        custom(.value(name, short: short, valueName: valueName, help: help), into: path) {
            try $0.nonEmptyValue($1, expected: what)
        }
    }

    /// A row with no option of its own, run after the rows above it: reads positionals, or a rule
    /// between options ("--a and --b cannot be used together").
    static func then(_ body: @escaping @Sendable (ParsedArguments, inout Target) throws -> Void) -> OptionRow {
        OptionRow(option: nil, store: body)
    }

    /// An option listed here (in help order) but read by a `then` row with the values it
    /// depends on (`download`'s `--mirror`, read with the URLs).
    static func listed(_ option: Option) -> OptionRow {
        OptionRow(option: option) { _, _ in }
    }

    /// The same reading, storing into the `Target` a command keeps at `path` (an included group).
    func lifted<Outer>(to path: WritableKeyPath<Outer, Target> & Sendable) -> OptionRow<Outer> {
        let store = store
        return OptionRow<Outer>(option: option) { arguments, outer in try store(arguments, &outer[keyPath: path]) }
    }

    /// The same reading under another help text: a command saying what a shared option means there.
    func described(as help: String) -> OptionRow {
        var option = option
        option?.help = help
        return OptionRow(option: option, store: store)
    }
}

/// A type whose options are one table of rows: every command that reads options, and the groups
/// of options several commands share (transport, event output, the path monitor, metrics).
protocol OptionTable: Sendable {
    /// The rows, in help order.
    static var table: [OptionRow<Self>] { get }
    /// Every value at its default (each option absent).
    init()
}

extension OptionTable {
    /// The options of the table, for the parser and the help.
    static var options: [Option] { table.compactMap(\.option) }

    /// Reads every row, in table order; throws `UsageError` for the first value that makes no sense.
    init(arguments: ParsedArguments) throws {
        self.init()
        for row in Self.table { try row.store(arguments, &self) }
    }

    /// The rows storing into the group a command keeps at `path`, for the command's table.
    static func rows<Outer>(at path: WritableKeyPath<Outer, Self> & Sendable) -> [OptionRow<Outer>] {
        table.map { $0.lifted(to: path) }
    }

    /// The option of the table named `name` (`--name`), for messages and refused options; a name
    /// the table lacks gives a bare switch of that name (tests check every name used exists).
    static func option(_ name: String) -> Option {
        options.first { $0.name == name } ?? .flag(name, help: "")
    }
}
