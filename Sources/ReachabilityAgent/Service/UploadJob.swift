import FoundationEssentials
import LinuxSystem
import ResumableDownloads
import Synchronization

/// An upload job as the agent keeps it on disk (`STATE_DIR/uploads/ID.json`, 0600), written
/// before the job starts and whenever the server's hold on it changes, so an agent that is
/// killed continues it from the server's offset at its next start instead of sending it again.
package struct UploadJobRecord: Codable, Sendable, Equatable {
    package static let currentVersion = 1

    package var version = Self.currentVersion
    package var id: UUID
    /// Where the file goes.
    package var url: URL
    /// The file's absolute path as the caller named it (reports; reopening after a restart).
    package var filePath: String
    /// The file as the agent saw it through the caller's descriptor: another file at the path, or
    /// this one changed, ends the job.
    package var file: UploadFileIdentity
    package var protocolChoice: UploadProtocol
    package var method: String
    package var allowsPlainRetry: Bool
    /// The uid that queued it (its `queue list` and `pause|resume|cancel`; root sees all).
    package var owner: UInt32
    /// Paused by a user: it stays paused across restarts.
    package var isPaused = false
    /// Why it failed while the server still holds what it received: `queue resume` continues it.
    package var failure: String?
    /// The protocol in use once chosen (before anything of the file is sent).
    package var protocolInUse: UploadProtocol?
    /// Where the server holds the upload and what it acknowledged, once it holds it.
    package var resume: UploadResumeState?

    package init(id: UUID, url: URL, filePath: String, file: UploadFileIdentity, protocolChoice: UploadProtocol,
                 method: String, allowsPlainRetry: Bool, owner: UInt32) {
        self.id = id
        self.url = url
        self.filePath = filePath
        self.file = file
        self.protocolChoice = protocolChoice
        self.method = method
        self.allowsPlainRetry = allowsPlainRetry
        self.owner = owner
    }

    /// Why the record cannot be acted on (it is input: a file in the state directory), or nil.
    package var problem: String? {
        guard version == Self.currentVersion else { return "version \(version); this agent reads \(Self.currentVersion)" }
        guard filePath.hasPrefix("/"), !filePath.utf8.contains(0) else { return "the file path is not absolute" }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            return "the URL is not http(s)"
        }
        guard HTTPMethod(method) != nil else { return "the method is not an HTTP token" }
        if let resume {
            do { try resume.validate() } catch { return error.description }
            guard resume.file == file, resume.filePath == filePath else { return "its resume state names another file" }
        }
        return nil
    }
}

/// The upload jobs' records: `STATE_DIR/uploads/`, reached through a checked directory (no
/// links followed, files of this user only).
package final class UploadJobStore: Sendable {
    private let directory: CheckedDirectory

    /// Opens (creating, 0700) `uploads/` under the state directory.
    package init(stateDirectory: String) throws(FileTrustError) {
        directory = try CheckedDirectory.open(stateDirectory, policy: .privateState).subdirectory("uploads", creating: true)
    }

    private static func name(_ id: UUID) -> String { id.uuidString.lowercased() + ".json" }

    /// Writes a record durably (atomic replace).
    package func save(_ record: UploadJobRecord) throws(FileTrustError) {
        try directory.writeAtomically(ControlCodec.encode(record), to: Self.name(record.id), mode: 0o600)
    }

    package func remove(_ id: UUID) { try? directory.remove(Self.name(id)) }

    /// Every valid record; an invalid one is moved aside to `NAME.bad` (reported through `warn`).
    package func load(warn: (String) -> Void) -> [UploadJobRecord] {
        directory.loadRecords("upload job", limit: 1 << 20, problem: { (record: UploadJobRecord, name) in
            record.problem ?? (Self.name(record.id) == name ? nil : "not named after its id")
        }, warn: warn)
    }
}

/// One upload job while the agent runs: its record and what is live (state, bytes sent, the
/// open file, the task sending it). Shared by the service's actor and the upload's handlers,
/// which run on the engine's thread: everything is under one lock, and the record is written
/// under it too, so two writers never race on its file.
package final class UploadJob: Sendable {
    /// Why the job's task is being stopped.
    enum Stop: Sendable { case pause, cancel, shutdown }

    struct Live: Sendable {
        var record: UploadJobRecord
        var state: AgentDownload.State = .queued
        /// File bytes handed to the connection, counted from the file's start.
        var position: Int64 = 0
        var protocolInUse: UploadProtocol?
        var error: String?
        var stop: Stop?
        var task: Task<Void, Never>?
        /// The caller's open file (closed when the job ends); nil after a restart until reopened.
        var descriptor: FileDescriptor?
        var lastProgressLine: ContinuousClock.Instant?
    }

    package let id: UUID
    let live: Mutex<Live>

    init(record: UploadJobRecord, descriptor: FileDescriptor?) {
        id = record.id
        live = Mutex(Live(record: record, descriptor: descriptor))
    }

    var record: UploadJobRecord { live.withLock { $0.record } }
    var state: AgentDownload.State { live.withLock { $0.state } }

    /// Changes the record and writes it, under the lock.
    func updateRecord(in store: UploadJobStore?, _ change: (inout UploadJobRecord) -> Void) -> FileTrustError? {
        live.withLock { live in
            change(&live.record)
            do throws(FileTrustError) { try store?.save(live.record) } catch { return error }
            return nil
        }
    }

    /// Closes the open file (the job ended).
    func closeFile() {
        live.withLock { live in
            live.descriptor?.close()
            live.descriptor = nil
        }
    }

    /// The job as `queue list` shows it.
    func report() -> AgentDownload {
        live.withLock { live in
            AgentDownload(id: id.uuidString.lowercased(), url: URLRedaction.redacted(live.record.url), destination: live.record.filePath,
                          state: live.state, bytesReceived: 0, totalBytes: live.record.file.size, bytesPerSecond: 0,
                          error: live.error, direction: "upload", bytesSent: live.position,
                          uploadProtocol: (live.protocolInUse ?? live.record.resume?.protocolInUse)?.rawValue)
        }
    }
}

/// Every upload job of the agent, and the counters its metrics report.
package final class UploadJobTable: Sendable {
    struct Counters: Sendable {
        var sentBytes: Int64 = 0
        var completed = 0
        var failed = 0
    }

    let jobs = Mutex<[UUID: UploadJob]>([:])
    let store = Mutex<UploadJobStore?>(nil)
    let counters = Mutex(Counters())

    package init() {}

    var all: [UploadJob] { jobs.withLock { Array($0.values) } }
}
