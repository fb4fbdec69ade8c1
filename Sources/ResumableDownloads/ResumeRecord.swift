import FoundationEssentials
import Glibc

/// Everything needed to continue a download after a crash or relaunch, stored as versioned JSON
/// in the agent's state directory next to the `NAME.part` data file.
///
/// Invariant: `verifiedOffset` bytes of the partial file were fsynced before this record was
/// written, and they all come from the entity identified by `entityTag` / `lastModified`.
struct ResumeRecord: Codable, Sendable, Hashable {
    /// The format version this code writes; older versions are migrated on load, newer rejected.
    static let currentVersion = 1

    var version: Int = ResumeRecord.currentVersion
    var id: UUID
    var url: URL
    var destination: URL
    var partialPath: String
    /// A strong ETag (weak ones are never stored: they cannot validate byte ranges).
    var entityTag: String?
    /// The Last-Modified value, used as validator when there is no strong ETag.
    var lastModified: String?
    var totalLength: Int64?
    var verifiedOffset: Int64
    var expectedSHA256: String?
    /// The length the caller expects, checked at completion (optional; absent in older records).
    var expectedLength: Int64?
    var allowsExpensive: Bool
    /// Transfer attempts made so far (all attempts, for diagnostics).
    var attempts: Int
    var createdAt: Date
    var updatedAt: Date

    init(id: UUID, url: URL, destination: URL, partialPath: String, expectedSHA256: String?,
         totalLength: Int64?, allowsExpensive: Bool, now: Date = Date()) {
        self.id = id
        self.url = url
        self.destination = destination
        self.partialPath = partialPath
        self.expectedSHA256 = expectedSHA256
        self.totalLength = totalLength
        self.allowsExpensive = allowsExpensive
        verifiedOffset = 0
        attempts = 0
        createdAt = now
        updatedAt = now
    }

    /// The `If-Range` value: the strong ETag, else Last-Modified, else nil (then a resume is unsafe
    /// and the download restarts from zero).
    var validator: String? { entityTag ?? lastModified }

    /// Forgets the entity: used when the server sent a new version.
    mutating func resetEntity(entityTag: String?, lastModified: String?, totalLength: Int64?) {
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.totalLength = totalLength
        verifiedOffset = 0
    }

    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    /// Decodes a record, rejecting unknown future versions.
    static func decode(_ data: Data) throws -> ResumeRecord {
        struct Versioned: Decodable { var version: Int }
        let version = try decoder().decode(Versioned.self, from: data).version
        guard version >= 1, version <= currentVersion else {
            throw DownloadError.fileSystem.with(description: "unsupported resume record version \(version)")
        }
        return try decoder().decode(ResumeRecord.self, from: data)
    }

    /// Writes the record atomically and durably: temp file, fsync, rename over `path`, fsync the
    /// directory. A crash at any point leaves either the old or the new record, never a torn one.
    func write(to path: String) throws {
        let data = try Self.encoder().encode(self)
        try FileIO.atomicWrite(data, to: path)
    }

    /// Reads the record at `path`.
    static func read(from path: String) throws -> ResumeRecord {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DownloadError.fileSystem("read", path: path, errno: errno == 0 ? ENOENT : errno)
        }
        return try decode(data)
    }
}

/// Small POSIX file helpers with EINTR retry in one place; failures become `DownloadError`.
enum FileIO {
    /// Writes `data` to `path` via `path.tmp`, fsync, rename, fsync of the directory.
    static func atomicWrite(_ data: Data, to path: String) throws {
        let temporary = path + ".tmp"
        let fd = try open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o644)
        do {
            try data.withUnsafeBytes { bytes in
                var written = 0
                while written < bytes.count {
                    let result = Glibc.write(fd, bytes.baseAddress! + written, bytes.count - written)
                    if result < 0 {
                        if errno == EINTR { continue }
                        throw DownloadError.fileSystem("write", path: temporary, errno: errno)
                    }
                    written += result
                }
            }
            try fsync(fd, path: temporary)
        } catch {
            Glibc.close(fd)
            Glibc.unlink(temporary)
            throw error
        }
        Glibc.close(fd)
        guard Glibc.rename(temporary, path) == 0 else {
            let number = errno
            Glibc.unlink(temporary)
            throw DownloadError.fileSystem("rename", path: path, errno: number)
        }
        try fsyncDirectory(containing: path)
    }

    static func open(_ path: String, flags: Int32, mode: mode_t = 0o644) throws -> Int32 {
        while true {
            let fd = Glibc.open(path, flags, mode)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw DownloadError.fileSystem("open", path: path, errno: errno)
        }
    }

    static func fsync(_ fd: Int32, path: String) throws {
        while Glibc.fsync(fd) != 0 {
            if errno == EINTR { continue }
            throw DownloadError.fileSystem("fsync", path: path, errno: errno)
        }
    }

    /// Makes a rename or unlink in the directory durable.
    static func fsyncDirectory(containing path: String) throws {
        let directory = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? ""
        let fd = try open(directory.isEmpty ? "." : directory, flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { Glibc.close(fd) }
        try fsync(fd, path: directory)
    }

    static func truncate(_ fd: Int32, to length: Int64, path: String) throws {
        while Glibc.ftruncate(fd, off_t(length)) != 0 {
            if errno == EINTR { continue }
            throw DownloadError.fileSystem("truncate", path: path, errno: errno)
        }
    }

    /// The size of the open file.
    static func size(_ fd: Int32, path: String) throws -> Int64 {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw DownloadError.fileSystem("stat", path: path, errno: errno) }
        return Int64(info.st_size)
    }

    /// Writes all of `bytes` at `offset`; returns the count written before an error, and the errno.
    static func pwriteAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> (written: Int, errno: Int32) {
        var written = 0
        while written < bytes.count {
            let result = Glibc.pwrite(fd, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if result < 0 {
                if errno == EINTR { continue }
                return (written, errno)
            }
            if result == 0 { return (written, EIO) }
            written += result
        }
        return (written, 0)
    }

    /// Removes a file, ignoring "does not exist".
    static func removeIfPresent(_ path: String) {
        _ = Glibc.unlink(path)
    }
}
