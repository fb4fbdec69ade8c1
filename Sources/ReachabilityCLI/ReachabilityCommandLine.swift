import Foundation
import LinuxReachability

/// The `reachability` command-line tool: parses arguments, runs a subcommand, returns the exit status.
public enum ReachabilityCommandLine {
    /// Runs the tool with the process's arguments and environment and exits with its status.
    public static func main() async -> Never {
        let status = await run(arguments: Array(CommandLine.arguments.dropFirst()), context: .live())
        exit(status)
    }

    /// Runs the tool with `arguments` (without the executable name) and returns the exit status.
    public static func run(arguments: [String]) async -> Int32 {
        await run(arguments: arguments, context: .live())
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
        guard let command = CommandRegistry.command(named: first) else {
            let message = first.hasPrefix("-") ? "Unknown option '\(first)'" : "Unknown subcommand '\(first)'"
            return reportUsage(UsageError(message), command: nil, context: context)
        }
        return await run(command, arguments: Array(arguments.dropFirst()), context: context)
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
        guard let name = topic.first else {
            context.output.text(HelpFormatter.rootHelp())
            return ExitCode.success.rawValue
        }
        guard topic.count == 1 else {
            return reportUsage(UsageError("Unexpected argument '\(topic[1])'"), command: nil, context: context)
        }
        guard let command = CommandRegistry.command(named: name) else {
            return reportUsage(UsageError("Unknown subcommand '\(name)'"), command: nil, context: context)
        }
        context.output.text(HelpFormatter.help(for: command))
        return ExitCode.success.rawValue
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
