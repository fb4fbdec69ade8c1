import FoundationEssentials
import LinuxSystem
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

    /// Set for a 401/403/410 after bytes were stored: the link expired, and the bytes wait for a new one.
    var expiredLinkStatus: Int?

    /// Appended to the error line.
    var suffix: String {
        if let status = expiredLinkStatus {
            return ": the link expired (HTTP \(status)): rerun with the new URL and the same -o to continue (resume data kept)"
        }
        return keepsResumeData ? " (resume data kept; run the same command again to continue)" : ""
    }

    /// A 401/403/410 keeps the class of any 4xx (permanent, exit 1: the same URL gets the same
    /// answer), but when bytes are stored it keeps them, as the engine does (`isExpiredLink`).
    init(_ error: DownloadError, storedBytes: Int64) {
        failureClass = Self.classify(error)
        expiredLinkStatus = error.isExpiredLink && storedBytes > 0 ? error.httpStatusCode : nil
        keepsResumeData = (failureClass != .permanent && error.isResumable || expiredLinkStatus != nil) && storedBytes > 0
    }

    /// The class of an engine error.
    static func classify(_ error: DownloadError) -> Class {
        if error == .connectivityTimeout || error == .destinationInUse { return .temporary }
        // A file that appeared at the destination, or a NAME.part that is not ours: 73.
        if error == .destinationExists || error == .untrustedFile { return .destination }
        if error == .diskFull { return .localStorage }
        if error == .fileSystem {
            guard let code = error.osErrorCode else { return .destination }
            return [Errno.ioError, .noSpace, .quotaExceeded].contains(Errno(code)) ? .localStorage : .destination
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

/// Proof, kept in a job's state directory, that a run of `download` completed this destination.
/// It names the file's device, inode, size and modification time (a file changed since is not
/// trusted) and the validators the server gave it. Written when a batch ends unfinished
/// (interrupted, or another URL failed): the same command run again counts the file as done
/// without asking. Kept, `isFinal`, once the batch is finished: a rerun then asks the server
/// (HEAD) and the file is done when its length and validator still match
/// (`ResumeValidator.compare`), as `wget -c` and `curl -C -` finish at once.
struct CompletionMarker: Codable, Sendable, Equatable {
    var version = 1
    var url: String
    var destination: String
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modifiedNanoseconds: Int64
    /// The server's strong ETag for the file (absent in older markers).
    var entityTag: String?
    /// The server's strong Last-Modified for the file (absent in older markers).
    var lastModified: String?
    /// The batch that made it is finished: a rerun compares with the server (absent in older
    /// markers, which were all written by unfinished batches).
    var isFinal: Bool?

    static let fileName = "completed.json"

    /// The marker for the regular file now at `destination` (nil when it is not one).
    init?(url: URL, destination: URL, entity: ResumeValidator.Entity? = nil, isFinal: Bool = false) {
        guard let status = Self.status(of: destination), status.kind == .regular else { return nil }
        self.url = url.absoluteString
        self.destination = destination.path
        (device, inode, size, modifiedNanoseconds) = (status.device, status.inode, status.size, status.modified)
        (entityTag, lastModified) = (entity?.entityTag, entity?.lastModified)
        self.isFinal = isFinal ? true : nil
    }

    /// The length and validators recorded for the file.
    var entity: ResumeValidator.Entity { .init(length: size, entityTag: entityTag, lastModified: lastModified) }

    /// The marker in `directory` when it describes the file now at `destination` (same device,
    /// inode, size and modification time), else nil.
    static func read(in directory: URL, destination: URL) -> CompletionMarker? {
        guard let job = try? CheckedDirectory.open(directory.path, policy: .privateState),
              let bytes = try? job.readOwnedFile(fileName, limit: 64 << 10),
              let marker = try? JSONDecoder().decode(CompletionMarker.self, from: Data(bytes)),
              marker.version == 1, marker.destination == destination.path,
              let status = Self.status(of: destination), status.kind == .regular,
              (marker.device, marker.inode, marker.size, marker.modifiedNanoseconds)
                == (status.device, status.inode, status.size, status.modified) else { return nil }
        return marker
    }

    /// Whether an unfinished batch's marker in `directory` describes the file now at
    /// `destination` for `url` (the same command, run again, counts it as done).
    static func matches(in directory: URL, url: URL, destination: URL) -> Bool {
        guard let marker = read(in: directory, destination: destination) else { return false }
        return marker.isFinal != true && marker.url == url.absoluteString
    }

    /// Marks the marker in `directory`, if any, as the finished batch's (a rerun asks the server).
    static func finalize(in directory: URL) {
        guard let job = try? CheckedDirectory.open(directory.path, policy: .privateState),
              let bytes = try? job.readOwnedFile(fileName, limit: 64 << 10),
              var marker = try? JSONDecoder().decode(CompletionMarker.self, from: Data(bytes)),
              marker.isFinal != true else { return }
        marker.isFinal = true
        try? marker.write(in: directory)
    }

    /// Writes the marker into `directory` atomically (`CheckedDirectory.writeAtomically`).
    func write(in directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(self)
        do {
            try CheckedDirectory.open(directory.path, policy: .privateState).writeAtomically(Array(data), to: Self.fileName)
        } catch {
            throw CommandFailure(message: "\(error)", exitCode: .cannotCreate)
        }
    }

    /// The status of `file` itself (a link is not followed), reached from / without untrusted
    /// links; nil when it cannot be seen.
    private static func status(of file: URL) -> FileStatus? {
        let folder = file.deletingLastPathComponent().path
        guard let directory = try? CheckedDirectory.open(folder, policy: .shared) else { return nil }
        return (try? directory.status(of: file.lastPathComponent)) ?? nil
    }
}
