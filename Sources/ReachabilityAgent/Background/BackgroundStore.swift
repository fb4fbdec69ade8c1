import FoundationEssentials
import LinuxSystem
import ResumableDownloads

/// The background sessions' files in the agent's state directory, reached only through checked
/// directory descriptors (no links followed, files of this user only):
///
/// ```
/// STATE_DIR/background/                  0700
///   sessions/HASH.json                   one record per session (uid + identifier, SHA-256 named)
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

    /// Every valid session record; a file that cannot be read, fails its checks or is not named
    /// after its key is moved aside to `NAME.bad` (reported through `warn`) and never acted on.
    package func load(warn: (String) -> Void) -> [BackgroundSessionRecord] {
        sessionsDirectory.loadRecords("background session", limit: 64 << 20, problem: { (record: BackgroundSessionRecord, name) in
            record.problem ?? (Self.fileName(for: record.key) == name ? nil : "not named after its session")
        }, warn: warn)
    }

    /// Writes a session's record durably (atomic replace).
    package func save(_ record: BackgroundSessionRecord) throws(FileTrustError) {
        try sessionsDirectory.writeAtomically(ControlCodec.encode(record), to: Self.fileName(for: record.key), mode: 0o600)
    }

    /// Removes a session's record.
    package func remove(_ key: BackgroundSessionKey) {
        try? sessionsDirectory.remove(Self.fileName(for: key))
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
}
