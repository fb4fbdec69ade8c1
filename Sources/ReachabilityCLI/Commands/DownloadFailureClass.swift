import FoundationEssentials
import Glibc
import ResumableDownloads

/// How `reachability download` reports a download that failed: its exit status, and whether
/// its resume data is kept (and the message says so).
///
/// Only a failure that can heal by itself or once the user fixes something local keeps resume
/// data, and only when there are stored bytes to resume; the rest leave nothing behind.
struct DownloadFailureVerdict: Sendable, Equatable {
    /// The failure classes, each with its documented exit status.
    enum Class: Sendable, Equatable {
        /// The server or the content said no (HTTP 4xx, bad reply, checksum, untrusted
        /// certificate, redirect loop): 1. Running again gives the same answer.
        case permanent
        /// The destination cannot be created or written (permissions, read-only, not a
        /// directory, a path under /proc): 73, EX_CANTCREAT.
        case destination
        /// The local disk filled up or failed: 74, EX_IOERR.
        case localStorage
        /// The network stayed down past --max-outage, or the server kept failing (5xx, 408, 429,
        /// refused, unresolvable): 75, EX_TEMPFAIL. Running again later can succeed.
        case temporary
    }

    var failureClass: Class
    /// Whether the partial file and resume record stay for the next run.
    var keepsResumeData: Bool

    /// The exit status for the class.
    var exitCode: ExitCode {
        switch failureClass {
        case .permanent: .failure
        case .destination: .cannotCreate
        case .localStorage: .ioError
        case .temporary: .temporaryFailure
        }
    }

    /// Appended to the error line.
    var suffix: String {
        keepsResumeData ? " (resume data kept; run the same command again to continue)" : ""
    }

    init(_ error: DownloadError, storedBytes: Int64) {
        failureClass = Self.classify(error)
        keepsResumeData = failureClass != .permanent && error.isResumable && storedBytes > 0
    }

    /// The class of an engine error.
    static func classify(_ error: DownloadError) -> Class {
        if error == .connectivityTimeout || error == .destinationInUse { return .temporary }
        // A file that appeared at the destination, or a NAME.part that is not ours: 73.
        if error == .destinationExists || error == .untrustedFile { return .destination }
        if error == .diskFull { return .localStorage }
        if error == .fileSystem {
            guard let code = error.osErrorCode else { return .destination }
            return [EIO, ENOSPC, EDQUOT].contains(code) ? .localStorage : .destination
        }
        if let status = error.httpStatusCode {
            return status == 408 || status == 429 || (500...599).contains(status) ? .temporary : .permanent
        }
        if error == .httpStatus || error == .badServerResponse || error == .checksumMismatch
            || error == .lengthMismatch || error == .invalidRequest || error == .cancelled {
            return .permanent
        }
        switch error.urlCode {
        case .networkConnectionLost, .notConnectedToInternet, .timedOut, .cannotConnectToHost, .cannotFindHost,
             .dnsLookupFailed:
            return .temporary
        case .cannotWriteToFile:
            return .localStorage
        default:
            // Untrusted certificates, TLS handshake failures, bad or unsupported URLs, redirect
            // loops, undecodable content: the same request gets the same answer.
            return .permanent
        }
    }

    /// With several failures, a permanent one decides the status, then the highest.
    static func combinedExitCode(_ codes: [ExitCode]) -> ExitCode {
        if codes.isEmpty { return .success }
        if codes.contains(.failure) { return .failure }
        return codes.max { $0.rawValue < $1.rawValue }!
    }
}

/// Proof, kept in a job's state directory, that a run of `download` completed this destination:
/// written when a batch ends unfinished (interrupted, or another URL failed), so the same
/// command run again counts the file as done instead of refusing to overwrite it. It names the
/// file's device, inode, size and modification time; a file changed since is not trusted.
struct CompletionMarker: Codable, Sendable, Equatable {
    var version = 1
    var url: String
    var destination: String
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modifiedNanoseconds: Int64

    static let fileName = "completed.json"

    /// The marker for the regular file now at `destination` (nil when it is not one).
    init?(url: URL, destination: URL) {
        guard let identity = Self.identity(of: destination.path) else { return nil }
        self.url = url.absoluteString
        self.destination = destination.path
        (device, inode, size, modifiedNanoseconds) = identity
    }

    /// Whether the marker in `directory` describes the file now at `destination` for `url`.
    static func matches(in directory: URL, url: URL, destination: URL) -> Bool {
        guard let data = readSmallFile(directory.appendingPathComponent(fileName).path),
              let marker = try? JSONDecoder().decode(CompletionMarker.self, from: data),
              marker.version == 1, marker.url == url.absoluteString, marker.destination == destination.path,
              let current = CompletionMarker(url: url, destination: destination) else { return false }
        return marker == current
    }

    /// Writes the marker into `directory` atomically: a new file (never through a symlink),
    /// fsynced, renamed over the old one.
    func write(in directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(self)
        try AtomicFile.write(data, to: directory.appendingPathComponent(Self.fileName).path)
    }

    /// Removes the marker from `directory`, if any.
    static func remove(in directory: URL) {
        unlink(directory.appendingPathComponent(fileName).path)
    }

    /// lstat of a regular file: device, inode, size, mtime in ns; nil for anything else.
    private static func identity(of path: String) -> (UInt64, UInt64, Int64, Int64)? {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino), Int64(info.st_size),
                Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
    }

    /// At most 64 KiB of a regular file, opened without following a symlink.
    private static func readSmallFile(_ path: String) -> Data? {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= 64 << 10 else { return nil }
        var buffer = [UInt8](repeating: 0, count: Int(info.st_size))
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count == buffer.count else { return nil }
        return Data(buffer)
    }
}

/// Small files written so a crash leaves either the old or the new contents: a fresh temporary
/// file next to the target (O_EXCL, O_NOFOLLOW: never someone else's file or link), fsync,
/// rename over the target, fsync of the directory.
enum AtomicFile {
    static func write(_ data: Data, to path: String, mode: mode_t = 0o600) throws {
        let directory = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let temporary = "\(path).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw Self.error("cannot create \(temporary)") }
        var isWritten = false
        defer {
            close(descriptor)
            if !isWritten { unlink(temporary) }
        }
        try data.withUnsafeBytes { bytes in
            if bytes.count > 0 { try writeAll(to: descriptor, bytes) }
        }
        guard fchmod(descriptor, mode) == 0, fsync(descriptor) == 0 else { throw Self.error("cannot write \(temporary)") }
        guard rename(temporary, path) == 0 else { throw Self.error("cannot rename \(temporary) to \(path)") }
        isWritten = true
        let directoryDescriptor = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }

    private static func error(_ what: String) -> CommandFailure {
        CommandFailure(message: "\(what): \(String(cString: strerror(errno)))", exitCode: .cannotCreate)
    }
}
