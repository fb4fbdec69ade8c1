import Foundation
import LinuxSystem
import ReachabilityBase
import Synchronization

/// A file-system failure in the session's state directory; tasks complete with
/// `URLError.cannotCreateFile` carrying this description.
struct SessionStorageError: Error, Sendable, Hashable, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }

    init(_ error: FileTrustError) {
        description = error.description
    }
}

/// The session's own files, reached only through `LinuxSystem`'s checked directories (the trust
/// rules the resume engine uses for its own files).
///
///     STATE/                    private: owned by this user (or root), nobody else may write
///                               to it or to a directory above it (sticky ones like /tmp aside)
///       resume-data.key         0600, 32 random bytes: the HMAC key of this directory's resume data
///       records/ID.json         the resume engine's records
///       downloads/ID.download.part   partial data; ID.download once complete (the file handed to
///                                    didFinishDownloadingTo); ID.lock while a task uses the ID
///
/// Everything inside is reached relative to the checked directories' descriptors and never
/// through a symbolic link. Names always derive from a download id; nothing read from resume
/// data becomes a path.
final class SessionDirectory: Sendable {
    let root: URL
    let downloads: URL
    let records: URL
    /// The HMAC key for this directory's resume data.
    let key: [UInt8]
    private let downloadsDirectory: CheckedDirectory
    private let recordsDirectory: CheckedDirectory

    static let keyName = "resume-data.key"
    static let keyLength = 32

    /// Creates (0700) or opens `root` and its subdirectories, checks them, and loads or creates
    /// the key. A background session's directory (`STATE/background`, the agent's) has no
    /// `records/`: the agent keeps its engine's records in its own.
    init(root: URL, hasRecords: Bool = true) throws(SessionStorageError) {
        let root = root.standardizedFileURL
        self.root = root
        downloads = root.appendingPathComponent("downloads", isDirectory: true)
        records = root.appendingPathComponent("records", isDirectory: true)
        do throws(FileTrustError) {
            let directory = try CheckedDirectory.open(root.path, policy: .privateState, creating: true)
            downloadsDirectory = try directory.subdirectory("downloads", creating: true)
            recordsDirectory = hasRecords ? try directory.subdirectory("records", creating: true) : downloadsDirectory
            key = try Self.loadOrCreateKey(in: directory)
        } catch {
            throw SessionStorageError("the state directory cannot be used: \(error)")
        }
    }

    /// Where the engine puts download `id` (its partial file is this path plus `.part`).
    func destination(for id: UUID) -> URL {
        downloads.appendingPathComponent(id.uuidString + ".download")
    }

    /// The partial file of download `id`: nil when there is none; throws `ResumeDataError.unsafeFile`
    /// when the name holds anything but a regular file of this user with one link. Its identity
    /// is what resume data seals: nothing writes a partial file between the moment resume data
    /// is made and the moment it is used.
    func partialFile(for id: UUID) throws -> FileIdentity? {
        let name = ResumeData.partialFileName(for: id)
        let found: FileStatus?
        do { found = try downloadsDirectory.status(of: name) } catch { throw SessionStorageError(error) }
        guard let status = found else { return nil }
        guard status.kind == .regular else {
            throw ResumeDataError.unsafeFile.with("the partial file \(name) is \(status.kindDescription), not a regular file")
        }
        guard status.ownerID == CurrentProcess.effectiveUserID else {
            throw ResumeDataError.unsafeFile.with("the partial file \(name) belongs to uid \(status.ownerID), not \(CurrentProcess.effectiveUserID)")
        }
        guard status.linkCount == 1 else {
            throw ResumeDataError.unsafeFile.with("the partial file \(name) has \(status.linkCount) hard links")
        }
        return FileIdentity(status)
    }

    /// Takes the exclusive lock on download `id` (any process, any session); throws
    /// `ResumeDataError.inUse` when another task holds it.
    func lock(_ id: UUID) throws -> DownloadLock {
        let name = id.uuidString + ".lock"
        for _ in 0..<8 {
            let file: CheckedDirectory.OpenedFile
            do { file = try downloadsDirectory.openOwnedFile(name, creating: .openOrCreate, mode: 0o600) }
            catch { throw SessionStorageError(error) }
            let isLocked: Bool
            do { isLocked = try file.descriptor.tryLockExclusive() } catch {
                file.descriptor.close()
                throw SessionStorageError("lock \(downloads.appendingPathComponent(name).path): \(error)")
            }
            guard isLocked else {
                file.descriptor.close()
                throw ResumeDataError.inUse
            }
            // The holder before us may have removed the file between our open and our flock:
            // the lock counts only if the name still leads to the file we locked.
            if let current = try? downloadsDirectory.status(of: name), current.isSameFile(as: file.status) {
                return DownloadLock(directory: downloadsDirectory, file: file, name: name)
            }
            file.descriptor.close()
        }
        throw SessionStorageError("could not lock \(name): it keeps being replaced")
    }

    /// Keeps the body of an upload task from `Data` as a private file (`downloads/ID.upload-body`,
    /// never replacing one), so a resumable upload can send its rest again after a drop, also
    /// from resume data in a later process. Removed when the task no longer needs it, or with
    /// the leftovers after the resume data lifetime.
    func writeUploadBody(_ data: Data) throws(FileTrustError) -> URL {
        let name = UUID().uuidString + Self.uploadBodySuffix
        try downloadsDirectory.writeAtomically([UInt8](data), to: name, mode: 0o600, replacing: false,
                                               temporaryName: CheckedDirectory.uniqueTemporaryName(for: name))
        return downloads.appendingPathComponent(name)
    }

    /// Removes `file` when it is an upload body `writeUploadBody` kept (any other file is left alone).
    func removeUploadBody(_ file: URL) {
        let name = file.lastPathComponent
        guard file.deletingLastPathComponent().standardizedFileURL.path == downloads.standardizedFileURL.path,
              name.hasSuffix(Self.uploadBodySuffix), UUID(uuidString: String(name.prefix(36))) != nil else { return }
        try? downloadsDirectory.remove(name)
    }

    static let uploadBodySuffix = ".upload-body"

    /// Removes download `id`'s files (partial, finished file, record, a kept upload body);
    /// missing ones are fine.
    func removeFiles(of id: UUID) {
        try? downloadsDirectory.remove(id.uuidString + Self.uploadBodySuffix)
        try? downloadsDirectory.remove(ResumeData.partialFileName(for: id))
        try? downloadsDirectory.remove(id.uuidString + ".download")
        try? recordsDirectory.remove(id.uuidString + ".json")
        try? recordsDirectory.remove(id.uuidString + ".json.tmp")
    }

    /// Removes the files of downloads untouched for `age` seconds (partial files whose resume
    /// data was never used, files a crashed process left), skipping any a task holds now;
    /// returns the ids removed. Resume data for them restarts from zero afterwards.
    @discardableResult
    func removeLeftovers(olderThan age: TimeInterval, now: Date = Date()) -> [UUID] {
        // Held to 0...100 years (an infinite lifetime is the longest), so the cutoff fits.
        let cutoff = Int64((now.timeIntervalSince1970 - Duration(clampingTimeInterval: age).timeInterval) * 1_000_000_000)
        var newest: [UUID: Int64] = [:]
        let names = ((try? downloadsDirectory.entries()) ?? []).map { ($0, downloadsDirectory) }
            + ((try? recordsDirectory.entries()) ?? []).map { ($0, recordsDirectory) }
        for (name, directory) in names {
            guard let id = UUID(uuidString: String(name.prefix(36))), name.count > 36, name.dropFirst(36).hasPrefix("."),
                  !name.hasSuffix(".lock"), let status = try? directory.status(of: name) else { continue }
            newest[id] = max(newest[id] ?? .min, status.modified)
        }
        var removed: [UUID] = []
        for (id, modified) in newest where modified < cutoff {
            guard let lock = try? lock(id) else { continue }   // in use (or unlockable): leave it
            removeFiles(of: id)
            lock.release()
            removed.append(id)
        }
        return removed
    }

    /// Removes the finished file handed to the delegate, if it is still there.
    func removeFinishedFile(of id: UUID) {
        try? downloadsDirectory.remove(id.uuidString + ".download")
    }

    /// Reads the key, or creates it: written under a private temporary name with `O_EXCL`,
    /// synced, then renamed into place without replacing (another process that won the race
    /// keeps its key, and this one reads it).
    private static func loadOrCreateKey(in directory: CheckedDirectory) throws(FileTrustError) -> [UInt8] {
        if let key = try readKey(in: directory) { return key }
        var generator = SystemRandomNumberGenerator()
        let key = (0..<keyLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
        do {
            try directory.writeAtomically(key, to: keyName, mode: 0o600, replacing: false,
                                          temporaryName: CheckedDirectory.uniqueTemporaryName(for: keyName))
        } catch where error.isAlreadyExisting {
            // Another process won the race: its key is read below.
        }
        guard let stored = try readKey(in: directory) else {
            throw .unsafe(directory.child(keyName), "vanished while it was being created")
        }
        return stored
    }

    private static func readKey(in directory: CheckedDirectory) throws(FileTrustError) -> [UInt8]? {
        guard let status = try directory.status(of: keyName) else { return nil }
        let path = directory.child(keyName)
        let fix = "remove it (resume data made with it will no longer be accepted)"
        guard status.kind == .regular, status.ownerID == CurrentProcess.effectiveUserID, status.linkCount == 1 else {
            throw .unsafe(path, "is \(status.kindDescription) owned by uid \(status.ownerID) with \(status.linkCount) links", fix: fix)
        }
        guard status.permissions & 0o077 == 0 else {
            throw .unsafe(path, "can be read by other users (mode \(String(status.permissions, radix: 8)))", fix: fix)
        }
        let key = try directory.readOwnedFile(keyName, limit: keyLength)
        guard key.count == keyLength else { throw .unsafe(path, "is not \(keyLength) bytes long", fix: fix) }
        return key
    }
}

/// An exclusive claim on one download id, held while a task uses its files.
final class DownloadLock: Sendable {
    private let directory: CheckedDirectory
    private let file: CheckedDirectory.OpenedFile
    private let name: String
    private let isReleased = Mutex(false)

    fileprivate init(directory: CheckedDirectory, file: CheckedDirectory.OpenedFile, name: String) {
        self.directory = directory
        self.file = file
        self.name = name
    }

    /// Removes the lock file and releases the lock (once).
    func release() {
        guard !isReleased.withLock({ released in defer { released = true }; return released }) else { return }
        try? directory.remove(name, ifSameAs: file.status)
        file.descriptor.close()
    }

    deinit { release() }
}
