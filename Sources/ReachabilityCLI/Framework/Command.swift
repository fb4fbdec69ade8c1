/// One subcommand of `reachability`: its name, help, option table, and behaviour.
///
/// The option table is the single source of truth: the parser accepts exactly these options and
/// the help text is generated from them, so the two cannot drift. Adding a subcommand is a new
/// type conforming to `Command` (in its own file) plus one line in `CommandRegistry.commands`.
protocol Command: Sendable {
    /// The words after `reachability`, e.g. `status`; a group member is named `queue add`
    /// (words separated by one space), and `reachability queue` then lists the group.
    static var name: String { get }
    /// One sentence for OVERVIEW and the SUBCOMMANDS list.
    static var abstract: String { get }
    /// Extra paragraphs printed after OPTIONS in `--help`; exit codes belong here.
    static var discussion: String? { get }
    /// Options accepted after the subcommand name; `-h/--help` is implicit.
    static var options: [Option] { get }
    /// Positional arguments, in order.
    static var positionals: [Positional] { get }
    /// Options a user may expect here (from a sibling command) that this command refuses on
    /// purpose, with the reason and what to do instead; they get that usage error rather than
    /// "Unknown option". Not listed in help or completions.
    static var refusedOptions: [RefusedOption] { get }

    /// Validates parsed arguments; throws `UsageError` for values that make no sense.
    init(arguments: ParsedArguments) throws

    /// Does the work and returns the process exit status.
    func run(in context: CommandContext) async throws -> ExitCode
}

extension Command {
    static var discussion: String? { nil }
    static var positionals: [Positional] { [] }
    static var refusedOptions: [RefusedOption] { [] }

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

    /// Every subcommand, in help order; a new one is a `Command` type plus one line here.
    static let commands: [any Command.Type] = [
        StatusCommand.self,
        WatchCommand.self,
        WaitCommand.self,
        DownloadCommand.self,
        UploadCommand.self,
        AgentCommand.self,
        AgentStatusCommand.self,
        AgentMetricsCommand.self,
        AgentLimitCommand.self,
        QueueAddCommand.self,
        QueueListCommand.self,
        QueuePauseCommand.self,
        QueueResumeCommand.self,
        QueueCancelCommand.self,
        QueueSetURLCommand.self,
        ManpageCommand.self,
        CompletionsCommand.self,
    ]

    /// OVERVIEW lines of the groups (first words shared by several commands that are no command themselves).
    static let groupAbstracts: [String: String] = [
        "queue": "Queue downloads in the running agent, and list, pause, resume or cancel them, or give one a new URL.",
    ]

    /// The commands one word longer than `name` that start with it (`agent status` for `agent`).
    static func members(of name: String, in commands: [any Command.Type] = commands) -> [any Command.Type] {
        let words = name.split(separator: " ").map(String.init)
        return commands.filter {
            let other = $0.name.split(separator: " ").map(String.init)
            return other.count == words.count + 1 && other.starts(with: words)
        }
    }

    /// What the leading arguments name.
    enum Resolution {
        /// A command, and the arguments after its name.
        case command(any Command.Type, arguments: [String])
        /// The first words of group members (`queue` for `queue add`, `queue list`), but no member.
        case group(String, members: [any Command.Type])
        /// Nothing known starts with this word.
        case unknown(String)
    }

    /// Finds the command whose name words start `arguments`, preferring the longest name.
    static func resolve(_ arguments: [String], in commands: [any Command.Type] = commands) -> Resolution {
        let matches = commands
            .map { command in (command, command.name.split(separator: " ").map(String.init)) }
            .filter { _, words in arguments.starts(with: words) }
            .sorted { $0.1.count > $1.1.count }
        if let (command, words) = matches.first {
            return .command(command, arguments: Array(arguments.dropFirst(words.count)))
        }
        // The longest run of leading words that some names extend: `queue` in `queue frobnicate`.
        for length in stride(from: arguments.count, to: 0, by: -1) {
            let prefix = Array(arguments.prefix(length))
            let members = commands.filter { $0.name.split(separator: " ").map(String.init).starts(with: prefix) }
            if !members.isEmpty { return .group(prefix.joined(separator: " "), members: members) }
        }
        return .unknown(arguments.first ?? "")
    }
}
