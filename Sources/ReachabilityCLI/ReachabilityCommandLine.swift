import FoundationEssentials
import Glibc
import LinuxReachability
import ReachabilityAgent
import LinuxSystem
import ReachabilityEvents

/// The `reachability` command-line tool: parses arguments, runs a subcommand, returns the exit status.
public enum ReachabilityCommandLine {
    /// Runs the tool with the process's arguments and environment and exits with its status.
    /// Call it from a synchronous `main.swift`: it must start on the main thread (see
    /// `InterruptSignals`).
    ///
    /// The main thread parks in pause(2) while the command runs on the cooperative pool, rather
    /// than serving the main queue: an `async` top level ends in dispatch_main, which leaves the
    /// main thread through pthread_exit, and that forced unwind reads the binary's unwind tables
    /// (0.7 MB that stay resident for the life of `watch`). Nothing in the tool runs on the main
    /// actor or the main queue.
    public static func main() -> Never {
        InterruptSignals.unblockOnCurrentThread()
        // The Swift runtime takes the arguments from /proc/self/cmdline here: without /proc (a
        // bare chroot) even the program's name is missing, and every command would read as none.
        guard !CommandLine.arguments.isEmpty else {
            let message = "Error: cannot read the command line from /proc/self/cmdline: mount /proc first (mount -t proc proc /proc)\n"
            try? FileDescriptor(rawValue: STDERR_FILENO).writeAll(Array(message.utf8))
            CurrentProcess.exit(71)   // EX_OSERR
        }
        let arguments = Array(CommandLine.arguments.dropFirst())
        Task.detached {
            CurrentProcess.exit(await run(arguments: arguments, context: .live()))
        }
        CurrentProcess.parkForever()
    }

    /// Dispatches to a subcommand; every error is reported here, in one place, with its exit status.
    static func run(arguments: [String], context: CommandContext) async -> Int32 {
        guard let first = arguments.first else {
            return reportUsage(UsageError("Missing expected subcommand"), command: nil, context: context)
        }
        switch first {
        case "--help", "-h":
            context.output.text(HelpFormatter.rootHelp())
            return ExitCode.success.rawValue
        case "--version":
            context.output.line(CommandRegistry.version)
            return ExitCode.success.rawValue
        case "help":
            return help(topic: Array(arguments.dropFirst()), context: context)
        default:
            break
        }
        if first.hasPrefix("-") {
            let error = UsageError("Unknown option '\(first)'" + Suggestion.clause(for: first, among: ["--help", "--version"]))
            return reportUsage(error, command: nil, context: context)
        }
        switch CommandRegistry.resolve(arguments) {
        case .command(let command, let rest):
            return await run(command, arguments: rest, context: context)
        case .group(let group, let members):
            let rest = arguments.dropFirst(group.split(separator: " ").count)
            // A bare group, `queue --help` and `queue -h` print the group's help, as
            // swift-argument-parser does for a command that only has subcommands.
            if rest.isEmpty || rest.first == "--help" || rest.first == "-h" {
                context.output.text(HelpFormatter.groupHelp(group, members: members))
                return ExitCode.success.rawValue
            }
            return reportUsage(missingMember(of: group, members, after: arguments), group: group, context: context)
        case .unknown(let word):
            return reportUsage(unknownSubcommand(word), command: nil, context: context)
        }
    }

    /// The command the leading words name, and the arguments after them; nil for a group
    /// (`help queue` prints the group's help).
    static func lookUp(_ words: [String]) throws(UsageError) -> (any Command.Type, [String])? {
        switch CommandRegistry.resolve(words) {
        case .command(let command, let rest):
            return (command, rest)
        case .group(let group, let members):
            if words.count == group.split(separator: " ").count { return nil }
            throw missingMember(of: group, members, after: words)
        case .unknown(let word):
            throw unknownSubcommand(word)
        }
    }

    /// `Unknown subcommand 'stauts'. Did you mean 'status'?`
    static func unknownSubcommand(_ word: String) -> UsageError {
        let firstWords = Set(CommandRegistry.commands.compactMap { $0.name.split(separator: " ").first.map(String.init) })
        return UsageError("Unknown subcommand '\(word)'" + Suggestion.clause(for: word, among: firstWords.sorted() + ["help"]))
    }

    /// `reachability queue frobnicate`, when only `queue add`/`queue list` exist.
    static func missingMember(of group: String, _ members: [any Command.Type], after arguments: [String]) -> UsageError {
        let depth = group.split(separator: " ").count
        let names = members.map { $0.name.split(separator: " ").dropFirst(depth).joined(separator: " ") }
        let expected = "expected one of: \(names.joined(separator: ", "))"
        if arguments.count > depth {
            let word = arguments[depth]
            if let guess = Suggestion.closest(to: word, among: names) {
                return UsageError("Unknown subcommand '\(group) \(word)'. Did you mean '\(group) \(guess)'?")
            }
            return UsageError("Unknown subcommand '\(group) \(word)' (\(expected))")
        }
        return UsageError("Missing subcommand after '\(group)' (\(expected))")
    }

    static func run(_ command: any Command.Type, arguments: [String], context: CommandContext) async -> Int32 {
        let instance: any Command
        do {
            for argument in arguments.prefix(while: { $0 != "--" }) {
                if let refused = command.refusedOptions.first(where: { $0.matches(argument) }),
                   !arguments.contains("--help"), !arguments.contains("-h") {
                    throw UsageError("'\(command.name)' does not take '\(refused.option.helpLabel)': \(refused.reason)")
                }
            }
            let parsed = try ParsedArguments.parse(arguments, options: command.options, positionals: command.positionals)
            if parsed.wantsHelp {
                context.output.text(HelpFormatter.help(for: command))
                return ExitCode.success.rawValue
            }
            instance = try command.init(arguments: parsed)
        } catch let error as UsageError {
            return reportUsage(error, command: command, context: context)
        } catch {
            return report(error, context: context)
        }

        do {
            return try await instance.run(in: context).rawValue
        } catch let error as UsageError {
            return reportUsage(error, command: command, context: context)
        } catch {
            return report(error, context: context)
        }
    }

    /// `reachability help [<subcommand>]`.
    static func help(topic: [String], context: CommandContext) -> Int32 {
        guard let first = topic.first, first != "--help", first != "-h" else {
            context.output.text(HelpFormatter.rootHelp())
            return ExitCode.success.rawValue
        }
        let topic = topic.filter { $0 != "--help" && $0 != "-h" }
        do throws(UsageError) {
            if topic.first == "help" {
                if topic.count > 1 { throw UsageError("Unexpected argument '\(topic[1])'") }
                context.output.text(HelpFormatter.helpCommandHelp())
                return ExitCode.success.rawValue
            }
            guard let (command, rest) = try lookUp(topic) else {
                let members = CommandRegistry.commands.filter { $0.name.split(separator: " ").map(String.init).starts(with: topic) }
                context.output.text(HelpFormatter.groupHelp(topic.joined(separator: " "), members: members))
                return ExitCode.success.rawValue
            }
            if let extra = rest.first { throw UsageError("Unexpected argument '\(extra)'") }
            context.output.text(HelpFormatter.help(for: command))
            return ExitCode.success.rawValue
        } catch {
            return reportUsage(error, command: nil, context: context)
        }
    }

    static func reportUsage(_ error: UsageError, command: (any Command.Type)?, context: CommandContext) -> Int32 {
        context.errorOutput.text(HelpFormatter.usageErrorText(error.escaped, command: command))
        return ExitCode.usage.rawValue
    }

    /// A usage error inside a group: its usage line and `reachability GROUP --help`.
    static func reportUsage(_ error: UsageError, group: String, context: CommandContext) -> Int32 {
        context.errorOutput.text(HelpFormatter.usageErrorText(error.escaped, usage: HelpFormatter.groupUsage(group),
                                                              helpCommand: "\(CommandRegistry.toolName) \(group) --help"))
        return ExitCode.usage.rawValue
    }

    /// Runtime failures: `Error: <description>` on stderr; 77 for missing privilege, 1 otherwise.
    static func report(_ error: any Error, context: CommandContext) -> Int32 {
        let (message, code): (String, ExitCode)
        switch error {
        case let failure as CommandFailure:
            (message, code) = (failure.message, failure.exitCode)
        case let failure as AgentFailure:
            (message, code) = (failure.message, ExitCode(failure.kind))
        case let failure as AgentClientError:
            (message, code) = (failure.message, failure == .permissionDenied ? .noPermission
                                                : failure == .noStateDirectory ? .configuration : .failure)
        case let failure as ReachabilityError:
            let status: ExitCode = switch failure {
            case .permissionDenied: .noPermission
            case .namespaceNotFound: .noSuchNamespace
            default: .failure
            }
            (message, code) = (failure.description, status)
        default:
            (message, code) = (String(describing: error), .failure)
        }
        // Messages carry arguments, paths, URLs and server text: no raw control characters.
        context.errorOutput.line("Error: \(TerminalText.escaped(message))")
        return code.rawValue
    }
}
