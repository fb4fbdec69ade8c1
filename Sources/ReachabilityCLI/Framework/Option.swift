/// One entry of a command's option table, used by both the parser and the help generator.
struct Option: Sendable, Hashable {
    /// Whether the option is a switch or carries a value.
    enum Kind: Sendable, Hashable {
        /// `--json`: present or absent.
        case flag
        /// `--netns NAME`: takes one value; when repeated, the last one wins.
        case value
        /// `--classify RULE`: takes a value, may be repeated, every value is kept.
        case repeatingValue
    }

    /// Long name without the dashes, e.g. `timeout`.
    var name: String
    /// Optional single-letter name, e.g. `o` for `-o`.
    var shortName: Character?
    /// Switch or value.
    var kind: Kind
    /// Placeholder shown in help and errors, e.g. `seconds` for `--timeout <seconds>`.
    var valueName: String
    /// One or two sentences for OPTIONS.
    var help: String

    /// A switch.
    static func flag(_ name: String, short: Character? = nil, help: String) -> Option {
        Option(name: name, shortName: short, kind: .flag, valueName: "", help: help)
    }

    /// An option taking one value (last one wins when repeated, like swift-argument-parser).
    static func value(_ name: String, short: Character? = nil, valueName: String, help: String) -> Option {
        Option(name: name, shortName: short, kind: .value, valueName: valueName, help: help)
    }

    /// An option that may be given many times, keeping every value.
    static func repeating(_ name: String, short: Character? = nil, valueName: String, help: String) -> Option {
        Option(name: name, shortName: short, kind: .repeatingValue, valueName: valueName, help: help)
    }

    /// Whether the option consumes a value.
    var takesValue: Bool { kind != .flag }

    /// `--timeout <seconds>` or `--json`, as used in usage lines and error messages.
    var synopsis: String {
        takesValue ? "--\(name) <\(valueName)>" : "--\(name)"
    }

    /// `-o, --output <file>`, as listed under OPTIONS.
    var helpLabel: String {
        let short = shortName.map { "-\($0), " } ?? ""
        return short + synopsis
    }

    /// The implicit `-h, --help` every command accepts.
    static let help = Option.flag("help", short: "h", help: "Show help information.")
}

/// An option another command has that this one refuses on purpose (see `Command.refusedOptions`).
struct RefusedOption: Sendable, Hashable {
    /// The option as another command spells it (`download`'s `-H, --header`).
    var option: Option
    /// Why not, and what to use instead; follows "'queue add' does not take '-H, --header <name: value>': ".
    var reason: String

    /// Whether `argument` spells this option: `--name`, `--name=value`, `-x` or `-xvalue`.
    func matches(_ argument: String) -> Bool {
        if argument == "--\(option.name)" || argument.hasPrefix("--\(option.name)=") { return true }
        guard let short = option.shortName, argument.hasPrefix("-\(short)"), !argument.hasPrefix("--") else { return false }
        return argument.count == 2 || option.takesValue
    }
}

/// A positional argument of a command, e.g. the URLs of `download`.
struct Positional: Sendable, Hashable {
    /// Placeholder shown in help, e.g. `url`.
    var name: String
    /// Help text listed under ARGUMENTS.
    var help: String
    /// Whether it may be left out.
    var isOptional: Bool = false
    /// Whether it absorbs every remaining argument.
    var isRepeating: Bool = false

    /// `<url> ...` or `[<file>]`.
    var synopsis: String {
        let core = "<\(name)>" + (isRepeating ? " ..." : "")
        return isOptional ? "[\(core)]" : core
    }
}
