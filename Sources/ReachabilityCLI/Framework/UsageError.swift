import ReachabilityEvents

/// A mistake on the command line: printed as `Error: ...` with the usage line, exit 64.
struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, without the `Error: ` prefix.
    var message: String

    init(_ message: String) { self.message = message }

    /// `The value 'abc' is invalid for '--timeout <seconds>': expected ...`, the argument-parser wording.
    static func invalidValue(_ value: String, for option: Option, _ detail: String) -> UsageError {
        UsageError("The value '\(value)' is invalid for '\(option.synopsis)': \(detail)")
    }

    var description: String { message }

    /// The message with control characters written out (it echoes what the user typed).
    var escaped: UsageError { UsageError(TerminalText.escaped(message)) }
}

/// A failure while running a command, with the exit status it maps to.
struct CommandFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Printed after `Error: `.
    var message: String
    /// The process exit status.
    var exitCode: ExitCode

    var description: String { message }
}

/// Process exit statuses; the sysexits(3) values where one fits.
struct ExitCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    var rawValue: Int32
    init(rawValue: Int32) { self.rawValue = rawValue }

    /// The answer is yes: reachable, qualified, or help printed.
    static let success = ExitCode(rawValue: 0)
    /// The answer is no (unreachable, timed out), or the monitor failed.
    static let failure = ExitCode(rawValue: 1)
    /// EX_USAGE: bad command line.
    static let usage = ExitCode(rawValue: 64)
    /// EX_NOINPUT: `--netns NAME` names no namespace (not the same as "unreachable").
    static let noSuchNamespace = ExitCode(rawValue: 66)
    /// EX_NOINPUT too: an input file (`--cacert`) cannot be read.
    static let noInput = ExitCode(rawValue: 66)
    /// EX_NOPERM: `--netns` (or netlink) needs privileges the process lacks.
    static let noPermission = ExitCode(rawValue: 77)
    /// EX_CONFIG: a classify.conf file has a bad line.
    static let configuration = ExitCode(rawValue: 78)

    var description: String { String(rawValue) }

    /// The status for an agent failure of this kind.
    init(_ kind: AgentFailure.Kind) {
        self = switch kind {
        case .unavailable: .failure
        case .configuration: .configuration
        case .cannotCreate: .cannotCreate
        }
    }
}
