/// One subcommand of `reachability`: its name, help, option table, and behaviour.
///
/// The option table is the single source of truth: the parser accepts exactly these options and
/// the help text is generated from them, so the two cannot drift. Adding a subcommand is a new
/// type conforming to `Command` (in its own file) plus one line in `CommandRegistry.commands`.
protocol Command: Sendable {
    /// The word after `reachability`, e.g. `status`.
    static var name: String { get }
    /// One sentence for OVERVIEW and the SUBCOMMANDS list.
    static var abstract: String { get }
    /// Extra paragraphs printed after OPTIONS in `--help`; exit codes belong here.
    static var discussion: String? { get }
    /// Options accepted after the subcommand name; `-h/--help` is implicit.
    static var options: [Option] { get }
    /// Positional arguments, in order.
    static var positionals: [Positional] { get }

    /// Validates parsed arguments; throws `UsageError` for values that make no sense.
    init(arguments: ParsedArguments) throws

    /// Does the work and returns the process exit status.
    func run(in context: CommandContext) async throws -> ExitCode
}

extension Command {
    static var discussion: String? { nil }
    static var positionals: [Positional] { [] }

    /// The command line used in messages, e.g. `reachability status`.
    static var commandPath: String { "\(CommandRegistry.toolName) \(name)" }
}

/// Every subcommand the tool knows, in the order `--help` lists them.
enum CommandRegistry {
    /// The executable's name as printed in help and errors.
    static let toolName = "reachability"
    /// Printed by `--version`.
    static let version = "0.1.0"
    /// One sentence for the top-level OVERVIEW.
    static let abstract = "Report and watch network reachability on Linux, from rtnetlink."

    /// Add new subcommands here (`download`, `agent`, `queue` are planned).
    static let commands: [any Command.Type] = [
        StatusCommand.self,
        WatchCommand.self,
        WaitCommand.self,
    ]

    /// The command called `name`, if any.
    static func command(named name: String) -> (any Command.Type)? {
        commands.first { $0.name == name }
    }
}
