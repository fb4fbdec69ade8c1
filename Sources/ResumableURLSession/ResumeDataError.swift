import Foundation
import ReachabilityBase

/// Why resume data was refused. Delivered as the underlying error (`NSUnderlyingErrorKey`) of
/// the `URLError` a task created with `downloadTask(withResumeData:)` completes with; that
/// error's code is `.cannotWriteToFile` (-3003), as Apple's URLSession reports resume data it
/// cannot use.
///
/// Errors compare by kind, so `error == .notAuthentic` works whatever the message.
public struct ResumeDataError: Error, Sendable, Hashable, CustomStringConvertible {
    enum Code: Hashable, Sendable {
        case malformed, unsupportedVersion, notAuthentic, stale, inUse, unsafeFile
    }

    /// The kind, and what was wrong for people; the error compares and hashes as its kind.
    let kind: ErrorKind<Code>
    /// What was wrong, for people.
    public var description: String { kind.description }
    var code: Code { kind.code }

    init(_ code: Code, _ description: String) {
        kind = ErrorKind(code, description)
    }

    /// Not resume data made by `ResumableURLSession`, or damaged (truncated, wrong fields).
    public static let malformed = ResumeDataError(.malformed, "the data is not resume data from ResumableURLSession")
    /// Made by a newer version of this library.
    public static let unsupportedVersion = ResumeDataError(.unsupportedVersion, "unsupported resume data version")
    /// Its authentication code does not match: it was altered, or made with another state
    /// directory (whose key signed it).
    public static let notAuthentic = ResumeDataError(.notAuthentic,
        "the resume data was altered, or was made by a session with another state directory")
    /// Its partial file was replaced or lost bytes since the data was made.
    public static let stale = ResumeDataError(.stale, "the resume data no longer matches its partial file")
    /// Another task (in this or another process) is using the same resume data right now.
    public static let inUse = ResumeDataError(.inUse, "another task is already resuming this download")
    /// The partial file is not a plain file of this user with a single link (a symlink or hard
    /// link planted in the state directory, say).
    public static let unsafeFile = ResumeDataError(.unsafeFile, "the partial file is not a regular file owned by this user")

    /// A copy with a more specific message.
    func with(_ detail: String) -> ResumeDataError { ResumeDataError(code, detail) }
}
