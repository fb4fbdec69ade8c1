/// Why the agent refused a request, as its reply says; an unknown code from a newer agent decodes
/// as `failed`.
public enum ControlErrorCode: String, Codable, Sendable, CaseIterable {
    /// The request was not a JSON object of the protocol.
    case malformed
    /// The request line was longer than the agent reads.
    case tooLarge
    /// The request spoke another protocol version.
    case unsupportedVersion
    /// The agent does not know the command.
    case unknownCommand
    /// A field was missing or wrong (a URL that is not http or https, a destination outside the
    /// agent's download directories, a file that exists).
    case invalidArgument
    /// No download has that ID.
    case notFound
    /// The ID prefix matches more than one download.
    case ambiguous
    /// The caller may not control this agent (only its own user and root may).
    case permissionDenied
    /// The background session is attached by another process, or the download is being resumed
    /// by another task.
    case sessionInUse
    /// The agent could not do it (the message says why).
    case failed

    public init(from decoder: any Decoder) throws {
        self = ControlErrorCode(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .failed
    }
}

/// A protocol-level failure, sent as `{"code":..., "message":...}`.
package struct ControlError: Error, Codable, Sendable, Equatable, CustomStringConvertible {
    /// Stable, machine-readable kind.
    package var code: ControlErrorCode
    /// For people.
    package var message: String

    package var description: String { message }

    package static func malformed(_ detail: String) -> ControlError { ControlError(code: .malformed, message: "malformed request: \(detail)") }
    package static func tooLarge() -> ControlError {
        ControlError(code: .tooLarge, message: "request longer than \(ControlProtocol.maximumRequestSize) bytes")
    }
    package static func unsupportedVersion(_ version: Int) -> ControlError {
        ControlError(code: .unsupportedVersion, message: "unsupported protocol version \(version) (this agent speaks \(ControlProtocol.version))")
    }
    package static func unknownCommand(_ command: String) -> ControlError {
        let names = ControlCommandName.allCases.map(\.rawValue).joined(separator: ", ")
        return ControlError(code: .unknownCommand, message: "unknown command '\(command)' (expected \(names))")
    }
    package static func invalidArgument(_ detail: String) -> ControlError { ControlError(code: .invalidArgument, message: detail) }
    package static func notFound(_ id: String) -> ControlError { ControlError(code: .notFound, message: "no download with ID '\(id)'") }
    package static func ambiguous(_ id: String) -> ControlError { ControlError(code: .ambiguous, message: "'\(id)' matches more than one download; give more of the ID") }
    package static func refused(uid: UInt32) -> ControlError {
        ControlError(code: .permissionDenied, message: "uid \(uid) may not control this agent (only its own user or root)")
    }
    package static func failed(_ detail: String) -> ControlError { ControlError(code: .failed, message: detail) }
    package static func sessionInUse(_ detail: String) -> ControlError { ControlError(code: .sessionInUse, message: detail) }
}

/// A request that gets an error reply instead of being handled.
package struct ControlRejection: Error, Sendable, Equatable {
    package var id: ControlRequestID?
    package var error: ControlError
}
