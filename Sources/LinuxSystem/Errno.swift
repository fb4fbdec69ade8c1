#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An `errno` value from a failed system call, with the C library's text.
package struct Errno: Error, Sendable, Hashable, CustomStringConvertible {
    /// The raw `errno`.
    package let rawValue: Int32

    package init(_ rawValue: Int32) { self.rawValue = rawValue }

    /// The current thread's `errno`.
    static var current: Errno { Errno(errno) }

    /// `strerror` text, e.g. "No such file or directory".
    package var description: String { String(cString: strerror(rawValue)) }

    package static let noSuchFile = Errno(ENOENT)
    package static let exists = Errno(EEXIST)
    package static let interrupted = Errno(EINTR)
    package static let wouldBlock = Errno(EWOULDBLOCK)
    package static let tooManySymbolicLinks = Errno(ELOOP)
    package static let notDirectory = Errno(ENOTDIR)
    package static let invalidArgument = Errno(EINVAL)
    package static let notSupported = Errno(EOPNOTSUPP)
    package static let noSystemCall = Errno(ENOSYS)
    package static let crossDevice = Errno(EXDEV)
    package static let noSpace = Errno(ENOSPC)
    package static let quotaExceeded = Errno(EDQUOT)
    package static let permissionDenied = Errno(EACCES)
    package static let ioError = Errno(EIO)
    package static let inProgress = Errno(EINPROGRESS)
    package static let connectionRefused = Errno(ECONNREFUSED)
    package static let connectionReset = Errno(ECONNRESET)
    package static let networkUnreachable = Errno(ENETUNREACH)
    package static let hostUnreachable = Errno(EHOSTUNREACH)
    package static let noBufferSpace = Errno(ENOBUFS)
    package static let messageTooLong = Errno(EMSGSIZE)
    package static let operationNotPermitted = Errno(EPERM)
    package static let tooManyOpenFiles = Errno(EMFILE)
    package static let tooManyOpenFilesInSystem = Errno(ENFILE)
    package static let outOfMemory = Errno(ENOMEM)
}
