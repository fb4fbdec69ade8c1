/// Why a file or directory was not used: it failed a trust check (`isUnsafe`: owned by someone
/// else, writable by others, a symbolic link, a FIFO, a hard link...) or a system call failed.
package struct FileTrustError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The path concerned.
    package var path: String
    /// What is wrong, e.g. "is a symbolic link owned by uid 1000".
    package var problem: String
    /// What the user can do about it, when there is something.
    package var fix: String?
    /// The failed call's errno, for system errors.
    package var errno: Errno?

    /// A failed trust check (as opposed to a system call that failed).
    package var isUnsafe: Bool { errno == nil }

    /// The name was taken (an exclusive create, or a rename that must not replace).
    package var isAlreadyExisting: Bool { errno == .exists }

    package var description: String {
        "\(path) \(problem)" + (fix.map { "; \($0)" } ?? "")
    }

    package static func unsafe(_ path: String, _ problem: String, fix: String? = nil) -> FileTrustError {
        FileTrustError(path: path, problem: problem, fix: fix, errno: nil)
    }

    package static func system(_ path: String, _ operation: String, _ errno: Errno) -> FileTrustError {
        FileTrustError(path: path, problem: "\(operation): \(errno)", fix: nil, errno: errno)
    }
}
