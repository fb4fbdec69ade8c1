import FoundationEssentials
import Glibc
import LinuxReachability

/// The `reachability` command-line tool: parses arguments, runs a subcommand, returns the exit status.
public enum ReachabilityCommandLine {
    /// Runs the tool with the process's arguments and environment and exits with its status.
    /// Call it from `main.swift`: it must start on the main thread (see `InterruptSignals`).
    @MainActor
    public static func main() async -> Never {
        InterruptSignals.unblockOnCurrentThread()
        let status = await run(arguments: Array(CommandLine.arguments.dropFirst()), context: .live())
        exit(status)
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
            return reportUsage(UsageError("Unknown option '\(first)'"), command: nil, context: context)
        }
        do {
            let (command, rest) = try lookUp(arguments)
            return await run(command, arguments: rest, context: context)
        } catch {
            return reportUsage(error, command: nil, context: context)
        }
    }

    /// The command the leading words name, and the arguments after them.
    static func lookUp(_ words: [String]) throws(UsageError) -> (any Command.Type, [String]) {
        switch CommandRegistry.resolve(words) {
        case .command(let command, let rest):
            return (command, rest)
        case .group(let group, let members):
            throw missingMember(of: group, members, after: words)
        case .unknown(let word):
            throw UsageError("Unknown subcommand '\(word)'")
        }
    }

    /// `reachability queue` or `reachability queue frobnicate`, when only `queue add`/`queue list` exist.
    static func missingMember(of group: String, _ members: [any Command.Type], after arguments: [String]) -> UsageError {
        let depth = group.split(separator: " ").count
        let names = members.map { $0.name.split(separator: " ").dropFirst(depth).joined(separator: " ") }
        let expected = "expected one of: \(names.joined(separator: ", "))"
        if arguments.count > depth {
            return UsageError("Unknown subcommand '\(group) \(arguments[depth])' (\(expected))")
        }
        return UsageError("Missing subcommand after '\(group)' (\(expected))")
    }

    static func run(_ command: any Command.Type, arguments: [String], context: CommandContext) async -> Int32 {
        let instance: any Command
        do {
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
        do throws(UsageError) {
            let (command, rest) = try lookUp(topic)
            if let extra = rest.first { throw UsageError("Unexpected argument '\(extra)'") }
            context.output.text(HelpFormatter.help(for: command))
            return ExitCode.success.rawValue
        } catch {
            return reportUsage(error, command: nil, context: context)
        }
    }

    static func reportUsage(_ error: UsageError, command: (any Command.Type)?, context: CommandContext) -> Int32 {
        context.errorOutput.text(HelpFormatter.usageErrorText(error, command: command))
        return ExitCode.usage.rawValue
    }

    /// Runtime failures: `Error: <description>` on stderr; 77 for missing privilege, 1 otherwise.
    static func report(_ error: any Error, context: CommandContext) -> Int32 {
        let (message, code): (String, ExitCode)
        switch error {
        case let failure as CommandFailure:
            (message, code) = (failure.message, failure.exitCode)
        case let failure as ReachabilityError:
            (message, code) = (failure.description, failure == .permissionDenied ? .noPermission : .failure)
        default:
            (message, code) = (String(describing: error), .failure)
        }
        context.errorOutput.line("Error: \(message)")
        return code.rawValue
    }
}
