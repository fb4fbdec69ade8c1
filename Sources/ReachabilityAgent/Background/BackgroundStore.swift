import FoundationEssentials
import LinuxSystem
import ResumableDownloads
import Synchronization

/// The background sessions' files in the agent's state directory, reached only through checked
/// directory descriptors (no links followed, files of this user only):
///
/// ```
/// STATE_DIR/background/                  0700
///   sessions/HASH.json                   one record per session (uid + identifier, SHA-256 named)
///   sessions/HASH.log                    its changes since (one `BackgroundSessionChange` a line)
///   downloads/TRANSFER.download.part     the engine's partial files (resume data names them)
///   downloads/TRANSFER.download          a finished file, the agent's until every event handing
///                                        it out is acknowledged
///   downloads/TRANSFER-SEQ.delivery      the hard link one event hands out (didFinishDownloadingTo)
///   resume-data.key                      the key background resume data is signed with
///                                        (written by ResumableURLSession, never read here)
/// ```
///
/// Every file is made by the agent, as its own user, inside its own state directory: it never
/// writes anywhere its client could not.
package final class BackgroundStore: Sendable {
    package let directory: CheckedDirectory
    private let sessionsDirectory: CheckedDirectory
    package let downloads: CheckedDirectory
    /// Per session, the record as the files give it back, with where its log stands.
    private let written = Mutex<[BackgroundSessionKey: Written]>([:])

    private struct Written: Sendable {
        var record: BackgroundSessionRecord
        /// The serial of the log's last line (or the whole record's `journalSerial`).
        var serial: UInt64
        var logBytes: Int
        var recordBytes: Int
    }

    /// A log is folded into its record once it is larger than the record and than this.
    static let foldingThreshold = 64 << 10

    /// Opens (creating) `background/`, `sessions/` and `downloads/` under the checked state directory.
    package init(stateDirectory: CheckedDirectory) throws(FileTrustError) {
        directory = try stateDirectory.subdirectory("background", creating: true)
        sessionsDirectory = try directory.subdirectory("sessions", creating: true)
        downloads = try directory.subdirectory("downloads", creating: true)
    }

    /// `STATE_DIR/background/downloads` (where the engine puts background transfers).
    package var downloadsPath: String { downloads.path }

    /// Where the engine puts transfer `id` (its partial file is this plus `.part`).
    package func destination(of id: UUID) -> URL {
        URL(fileURLWithPath: downloads.child(BackgroundRegistry.finishedFileName(id)))
    }

    /// A session record's file name: the SHA-256 of uid and identifier (any identifier, one safe name).
    package static func fileName(for key: BackgroundSessionKey) -> String {
        SHA256.hex(Array("\(key.uid)\u{0}\(key.identifier)".utf8)) + ".json"
    }

    /// The name of the log of changes that follows the record `name` (`HASH.json`: `HASH.log`).
    static func logName(for name: String) -> String { String(name.dropLast(".json".count)) + ".log" }

    /// Every valid session record; a file that cannot be read, fails its checks or is not named
    /// after its key is moved aside to `NAME.bad` (reported through `warn`) and never acted on.
    package func load(warn: (String) -> Void) -> [BackgroundSessionRecord] {
        var records: [BackgroundSessionRecord] = []
        for name in ((try? sessionsDirectory.entries()) ?? []).sorted() where name.hasSuffix(".json") {
            do {
                let bytes = try sessionsDirectory.readOwnedFile(name, limit: 64 << 20)
                var record = try JSONDecoder().decode(BackgroundSessionRecord.self, from: Data(bytes))
                if let problem = record.problem { throw StoreProblem(problem) }
                guard Self.fileName(for: record.key) == name else { throw StoreProblem("not named after its session") }
                let hadLog = try replayLog(of: name, onto: &record)
                if let problem = record.problem { throw StoreProblem("after its log: \(problem)") }
                written.withLock { $0[record.key] = Written(record: record, serial: record.journalSerial ?? 0, logBytes: 0,
                                                             recordBytes: bytes.count) }
                // Folded at once: a log ending in a torn line (a crash while appending) must not
                // have lines appended after it.
                if hadLog { try writeWhole(record) }
                records.append(record)
            } catch {
                try? sessionsDirectory.rename(name, to: name + ".bad", replacing: true)
                try? sessionsDirectory.rename(Self.logName(for: name), to: Self.logName(for: name) + ".bad", replacing: true)
                warn("moved the invalid background session record \(sessionsDirectory.child(name)) aside: \(error)")
            }
        }
        return records
    }

    /// Writes a session's record durably: what changed since the last write, as one line
    /// appended to its log (fdatasync), or the whole record (atomic replace) the first time,
    /// when the log cannot say the change, or once the log is larger than the record.
    package func save(_ record: BackgroundSessionRecord) throws(FileTrustError) {
        let last = written.withLock { $0[record.key] }
        // Written already (a run's commit wrote it before the action that asks again).
        if let last, last.record == record { return }
        if let last, let change = BackgroundSessionChange(from: last.record, to: record, serial: last.serial + 1) {
            let line = ControlCodec.encode(change) + [UInt8(ascii: "\n")]
            if last.logBytes + line.count <= max(Self.foldingThreshold, last.recordBytes) {
                try append(line, toLogOf: Self.fileName(for: record.key), creating: last.logBytes == 0)
                written.withLock {
                    $0[record.key] = Written(record: record, serial: change.serial, logBytes: last.logBytes + line.count,
                                             recordBytes: last.recordBytes)
                }
                return
            }
        }
        try writeWhole(record)
    }

    /// Writes the record whole with the serial its log goes on from, then drops the log (a
    /// crash between the two leaves old lines the record's serial says to skip).
    private func writeWhole(_ record: BackgroundSessionRecord) throws(FileTrustError) {
        let name = Self.fileName(for: record.key)
        let serial = (written.withLock { $0[record.key]?.serial } ?? record.journalSerial ?? 0) + 1
        var stored = record
        stored.journalSerial = serial
        let bytes = ControlCodec.encode(stored)
        try sessionsDirectory.writeAtomically(bytes, to: name, mode: 0o600)
        try? sessionsDirectory.remove(Self.logName(for: name))
        written.withLock { $0[record.key] = Written(record: record, serial: serial, logBytes: 0, recordBytes: bytes.count) }
    }

    private func append(_ line: [UInt8], toLogOf name: String, creating: Bool) throws(FileTrustError) {
        let logName = Self.logName(for: name)
        let file = try sessionsDirectory.openOwnedFile(logName, creating: creating ? .openOrCreate : .existing, mode: 0o600,
                                                       appending: true).descriptor
        do throws(Errno) {
            defer { file.close() }
            if creating { try file.truncate(to: 0) }   // a log left by a crash before its record was written whole
            try file.writeAll(line)
            try file.syncData()
        } catch {
            throw .system(sessionsDirectory.child(logName), "append", error)
        }
        if creating { try sessionsDirectory.sync() }   // the new name itself
    }

    /// Applies the lines of the record `name`'s log that follow it; false when it has none. A
    /// line that does not parse (the end of a log torn by a crash) ends the log; lines the
    /// record's serial already covers are skipped.
    private func replayLog(of name: String, onto record: inout BackgroundSessionRecord) throws(FileTrustError) -> Bool {
        let logName = Self.logName(for: name)
        guard (try sessionsDirectory.status(of: logName)) != nil else { return false }
        let bytes = try sessionsDirectory.readOwnedFile(logName, limit: 64 << 20)
        var serial = record.journalSerial ?? 0
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        lines.removeLast()   // after the last newline: empty, or a torn line
        for line in lines {
            guard let change = try? JSONDecoder().decode(BackgroundSessionChange.self, from: Data(line)) else { break }
            guard change.serial > serial else { continue }
            guard change.serial == serial + 1 else { break }
            record = change.applied(to: record)
            serial = change.serial
        }
        record.journalSerial = serial
        return true
    }

    /// Removes a session's record and its log.
    package func remove(_ key: BackgroundSessionKey) {
        let name = Self.fileName(for: key)
        try? sessionsDirectory.remove(name)
        try? sessionsDirectory.remove(Self.logName(for: name))
        written.withLock { $0[key] = nil }
    }

    /// Hands out the finished file of `transfer` under `name` (a new hard link; an old one of the
    /// same name is replaced). Returns its path.
    package func link(finished transfer: UUID, as name: String) throws(FileTrustError) -> String {
        try? downloads.remove(name)
        try downloads.link(BackgroundRegistry.finishedFileName(transfer), to: name)
        return downloads.child(name)
    }

    /// Whether `name` exists in the downloads directory.
    package func exists(_ name: String) -> Bool { ((try? downloads.status(of: name)) ?? nil) != nil }

    /// Removes names from the downloads directory (missing ones are fine).
    package func remove(files names: [String]) {
        for name in names { try? downloads.remove(name) }
    }

    /// Free bytes on the downloads directory's file system.
    package func availableBytes() -> Int64? { try? downloads.availableBytes() }

    /// Removes what no session needs any more: delivery links and finished files no pending
    /// event hands out, and partial files (with their engine records) of transfers nobody owns
    /// that were not touched for `lifetime` (resume data handed out and never used). `owned`:
    /// transfers the sessions still know; `keep`: names pending events hand out.
    package func purge(owned: Set<UUID>, keep: Set<String>, records: CheckedDirectory?, lifetime: TimeInterval, now: Date) -> Int {
        var removed = 0
        let cutoff = Int64((now.timeIntervalSince1970 - lifetime) * 1_000_000_000)
        for name in (try? downloads.entries()) ?? [] where !keep.contains(name) {
            guard let id = UUID(uuidString: String(name.prefix(36))) else { continue }
            if name.hasSuffix(".delivery") || (name.hasSuffix(".download") && !owned.contains(id)) {
                try? downloads.remove(name)
                removed += 1
            } else if name.hasSuffix(".download.part"), !owned.contains(id),
                      let status = try? downloads.status(of: name), status.modified < cutoff {
                try? downloads.remove(name)
                try? records?.remove(id.uuidString + ".json")
                removed += 1
            }
        }
        return removed
    }

    /// Why a stored record was refused (moved aside with this message).
    private struct StoreProblem: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
