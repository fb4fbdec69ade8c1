import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A file-system failure in the session's state directory; tasks complete with
/// `URLError.cannotCreateFile` carrying this description.
struct SessionStorageError: Error, Sendable, Hashable, CustomStringConvertible {
    var description: String
    var osErrorCode: Int32?

    init(_ operation: String, _ path: String, errno number: Int32) {
        description = "\(operation) \(path): \(String(cString: strerror(number)))"
        osErrorCode = number
    }

    init(_ description: String) {
        self.description = description
        osErrorCode = nil
    }
}

/// The session's own files, and the only place in this module that makes system calls.
///
///     STATE/                    0700, owned by the process's user, not writable by others
///       resume-data.key         0600, 32 random bytes: the HMAC key of this directory's resume data
///       records/ID.json         the resume engine's records
///       downloads/ID.download.part   partial data; ID.download once complete (the file handed to
///                                    didFinishDownloadingTo); ID.lock while a task uses the ID
///
/// The directories are opened once without following a final symlink and checked (owner, mode);
/// later opens are relative to those descriptors with `O_NOFOLLOW`, so a link planted inside
/// cannot redirect them. Names always derive from a download id; nothing read from resume data
/// becomes a path.
final class SessionDirectory: Sendable {
    /// The identity of a partial file. Device and inode alone are not enough: a file deleted
    /// and created again often gets the same inode number back, so the modification time (in
    /// nanoseconds) is part of it; nothing writes a partial file between the moment resume data
    /// is made and the moment it is used.
    struct FileIdentity: Sendable, Hashable {
        var device: UInt64
        var inode: UInt64
        var modified: Int64
        var size: Int64
    }

    let root: URL
    let downloads: URL
    let records: URL
    /// The HMAC key for this directory's resume data.
    let key: [UInt8]
    private let downloadsDescriptor: Int32
    private let recordsDescriptor: Int32

    static let keyName = "resume-data.key"
    static let keyLength = 32

    /// Creates (0700) or opens `root` and its subdirectories, checks them, and loads or creates
    /// the key.
    init(root: URL) throws(SessionStorageError) {
        let root = root.standardizedFileURL
        self.root = root
        downloads = root.appendingPathComponent("downloads", isDirectory: true)
        records = root.appendingPathComponent("records", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw SessionStorageError("cannot create the state directory \(root.path): \(error.localizedDescription)")
        }
        let rootDescriptor = try Self.openDirectory(AT_FDCWD, root.path, display: root.path)
        defer { Glibc.close(rootDescriptor) }
        let downloadsDescriptor = try Self.openDirectory(rootDescriptor, "downloads", display: downloads.path, create: true)
        let recordsDescriptor: Int32
        do {
            recordsDescriptor = try Self.openDirectory(rootDescriptor, "records", display: records.path, create: true)
        } catch {
            Glibc.close(downloadsDescriptor)
            throw error
        }
        self.downloadsDescriptor = downloadsDescriptor
        self.recordsDescriptor = recordsDescriptor
        do {
            key = try Self.loadOrCreateKey(in: rootDescriptor, display: root.appendingPathComponent(Self.keyName).path)
        } catch {
            Glibc.close(downloadsDescriptor)
            Glibc.close(recordsDescriptor)
            throw error
        }
    }

    deinit {
        Glibc.close(downloadsDescriptor)
        Glibc.close(recordsDescriptor)
    }

    /// Where the engine puts download `id` (its partial file is this path plus `.part`).
    func destination(for id: UUID) -> URL {
        downloads.appendingPathComponent(id.uuidString + ".download")
    }

    /// The partial file of download `id`: nil when there is none; throws `ResumeDataError.unsafeFile`
    /// when the name holds anything but a regular file of this user with one link.
    func partialFile(for id: UUID) throws -> FileIdentity? {
        let name = ResumeData.partialFileName(for: id)
        let fd = Self.retrying { openat(downloadsDescriptor, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        if fd < 0 {
            let number = errno
            if number == ENOENT { return nil }
            if number == ELOOP { throw ResumeDataError.unsafeFile.with("the partial file \(name) is a symbolic link") }
            throw SessionStorageError("open", downloads.appendingPathComponent(name).path, errno: number)
        }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SessionStorageError("stat", name, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw ResumeDataError.unsafeFile.with("the partial file \(name) is not a regular file")
        }
        guard info.st_uid == geteuid() else {
            throw ResumeDataError.unsafeFile.with("the partial file \(name) belongs to uid \(info.st_uid), not \(geteuid())")
        }
        guard info.st_nlink == 1 else {
            throw ResumeDataError.unsafeFile.with("the partial file \(name) has \(info.st_nlink) hard links")
        }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino),
                            modified: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
                            size: Int64(info.st_size))
    }

    /// Takes the exclusive lock on download `id` (any process, any session); throws
    /// `ResumeDataError.inUse` when another task holds it.
    func lock(_ id: UUID) throws -> DownloadLock {
        let name = id.uuidString + ".lock"
        for _ in 0..<8 {
            let fd = Self.retrying { openat(downloadsDescriptor, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
            guard fd >= 0 else { throw SessionStorageError("open", downloads.appendingPathComponent(name).path, errno: errno) }
            if Self.retrying({ flock(fd, LOCK_EX | LOCK_NB) }) != 0 {
                let number = errno
                Glibc.close(fd)
                if number == EWOULDBLOCK { throw ResumeDataError.inUse }
                throw SessionStorageError("lock", name, errno: number)
            }
            // The holder before us may have unlinked the file between our open and our flock:
            // the lock counts only if the name still leads to the file we locked.
            var locked = stat(), named = stat()
            if fstat(fd, &locked) == 0, fstatat(downloadsDescriptor, name, &named, AT_SYMLINK_NOFOLLOW) == 0,
               locked.st_dev == named.st_dev, locked.st_ino == named.st_ino {
                return DownloadLock(directory: self, descriptor: fd, name: name)
            }
            Glibc.close(fd)
        }
        throw SessionStorageError("could not lock \(name): it keeps being replaced")
    }

    /// Removes download `id`'s files (partial, finished file, record); missing ones are fine.
    func removeFiles(of id: UUID) {
        unlinkat(downloadsDescriptor, ResumeData.partialFileName(for: id), 0)
        unlinkat(downloadsDescriptor, id.uuidString + ".download", 0)
        unlinkat(recordsDescriptor, id.uuidString + ".json", 0)
        unlinkat(recordsDescriptor, id.uuidString + ".json.tmp", 0)
    }

    /// Removes the finished file handed to the delegate, if it is still there.
    func removeFinishedFile(of id: UUID) {
        unlinkat(downloadsDescriptor, id.uuidString + ".download", 0)
    }

    fileprivate func unlock(_ lock: DownloadLock) {
        unlinkat(downloadsDescriptor, lock.name, 0)
        Glibc.close(lock.descriptor)
    }

    // MARK: private

    private static func retrying(_ call: () -> Int32) -> Int32 {
        while true {
            let result = call()
            if result < 0, errno == EINTR { continue }
            return result
        }
    }

    /// Opens (creating with 0700 when asked) a directory without following a final symlink, and
    /// checks that it belongs to this user and that nobody else can write to it.
    private static func openDirectory(_ parent: Int32, _ name: String, display: String,
                                      create: Bool = false) throws(SessionStorageError) -> Int32 {
        if create, mkdirat(parent, name, 0o700) != 0, errno != EEXIST {
            throw SessionStorageError("create", display, errno: errno)
        }
        let fd = retrying { openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else {
            let number = errno
            if number == ELOOP || number == ENOTDIR {
                throw SessionStorageError("\(display) is not a directory (a symbolic link or a file is in its place)")
            }
            throw SessionStorageError("open", display, errno: number)
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let number = errno
            Glibc.close(fd)
            throw SessionStorageError("stat", display, errno: number)
        }
        if info.st_uid != geteuid() {
            Glibc.close(fd)
            throw SessionStorageError("the state directory \(display) belongs to uid \(info.st_uid), not to this user (\(geteuid()))")
        }
        if info.st_mode & 0o022 != 0 {
            Glibc.close(fd)
            throw SessionStorageError("the state directory \(display) is writable by other users (mode \(String(info.st_mode & 0o777, radix: 8))); use chmod 700")
        }
        return fd
    }

    /// Reads the key, or creates it atomically: written to a private temporary name, synced,
    /// then linked into place (`linkat` fails if another process won the race; its key is used).
    private static func loadOrCreateKey(in directory: Int32, display: String) throws(SessionStorageError) -> [UInt8] {
        if let key = try readKey(in: directory, display: display) { return key }
        var generator = SystemRandomNumberGenerator()
        let key = (0..<keyLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let temporary = keyName + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max, using: &generator))"
        let fd = retrying { openat(directory, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw SessionStorageError("create", display, errno: errno) }
        let written = key.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        Glibc.close(fd)
        defer { unlinkat(directory, temporary, 0) }
        guard written == keyLength, synced else { throw SessionStorageError("write", display, errno: errno) }
        if linkat(directory, temporary, directory, keyName, 0) != 0, errno != EEXIST {
            throw SessionStorageError("link", display, errno: errno)
        }
        _ = fsync(directory)
        guard let stored = try readKey(in: directory, display: display) else {
            throw SessionStorageError("the key \(display) vanished while it was being created")
        }
        return stored
    }

    private static func readKey(in directory: Int32, display: String) throws(SessionStorageError) -> [UInt8]? {
        let fd = retrying { openat(directory, keyName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw SessionStorageError("open", display, errno: errno)
        }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SessionStorageError("stat", display, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o077 == 0,
              info.st_size == keyLength else {
            throw SessionStorageError("the key \(display) is not a \(keyLength)-byte file readable only by this user; remove it (resume data made with it will no longer be accepted)")
        }
        var key = [UInt8](repeating: 0, count: keyLength)
        let count = key.withUnsafeMutableBytes { pread(fd, $0.baseAddress, keyLength, 0) }
        guard count == keyLength else { throw SessionStorageError("read", display, errno: errno) }
        return key
    }
}

/// An exclusive claim on one download id, held while a task uses its files.
final class DownloadLock: Sendable {
    private let directory: SessionDirectory
    fileprivate let descriptor: Int32
    fileprivate let name: String
    private let isReleased = Mutex(false)

    fileprivate init(directory: SessionDirectory, descriptor: Int32, name: String) {
        self.directory = directory
        self.descriptor = descriptor
        self.name = name
    }

    /// Removes the lock file and releases the lock (once).
    func release() {
        guard !isReleased.withLock({ released in defer { released = true }; return released }) else { return }
        directory.unlock(self)
    }

    deinit { release() }
}
