import FoundationEssentials
import LinuxReachability
import ResumableDownloads
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where `download` keeps resume data.
enum DownloadStateDirectory {
    /// `--state-dir`, else `$XDG_STATE_HOME/reachability` (only if absolute, per the XDG spec),
    /// else `/var/lib/reachability` for root, else `~/.local/state/reachability`.
    static func resolve(override: String?, environment: [String: String], isRoot: Bool) throws -> URL {
        if let override { return URL(fileURLWithPath: override, isDirectory: true).standardizedFileURL }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return URL(fileURLWithPath: state, isDirectory: true).appendingPathComponent("reachability")
        }
        if isRoot { return URL(fileURLWithPath: "/var/lib/reachability", isDirectory: true) }
        guard let home = environment["HOME"], home.hasPrefix("/") else {
            throw CommandFailure(message: "cannot find a state directory: HOME is not set; use --state-dir", exitCode: .cannotCreate)
        }
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".local/state/reachability")
    }

    /// Creates the directory (and parents) with mode 0700: resume records name URLs and files.
    static func create(_ directory: URL) throws {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw CommandFailure(message: "cannot create state directory \(directory.path): \(TextFormat.reason(error))",
                                 exitCode: .cannotCreate)
        }
    }

    /// The per-download subdirectory: a stable name from URL and destination, so running the same
    /// command again finds the same resume record, and unrelated downloads (possibly run by another
    /// `reachability download` at the same time) are never restored by this one.
    static func jobDirectory(for job: DownloadCommand.Job, in root: URL) -> URL {
        let key = job.url.absoluteString + "\n" + job.destination.path
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325   // FNV-1a 64: stable across runs, unlike Hasher
        for byte in key.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return root.appendingPathComponent("downloads", isDirectory: true)
            .appendingPathComponent(String(repeating: "0", count: 16 - hex.count) + hex, isDirectory: true)
    }
}

/// Thrown by `DownloadSession.open` when the destination already holds the file `--sha256` names.
struct AlreadyComplete: Error {}

/// One download of the command: its own agent (so `restoreDownloads()` sees only this job's
/// record), the lock that keeps a second process off the same partial file, and the `Download`.
final class DownloadSession: Sendable {
    let job: DownloadCommand.Job
    let agent: DownloadAgent
    let download: Download
    private let directory: URL
    private let lockDescriptor: Int32

    private init(job: DownloadCommand.Job, agent: DownloadAgent, download: Download, directory: URL, lockDescriptor: Int32) {
        self.job = job
        self.directory = directory
        self.agent = agent
        self.download = download
        self.lockDescriptor = lockDescriptor
    }

    /// Restores the job's resume record if there is one, else starts a new download.
    /// Throws `CommandFailure` when the destination exists, the job is locked, or the agent fails.
    static func open(_ job: DownloadCommand.Job, stateRoot: URL, paths: AsyncStream<NetworkPath>,
                     configuration: (URL) -> DownloadAgent.Configuration,
                     options: DownloadOptions) async throws -> DownloadSession {
        let directory = DownloadStateDirectory.jobDirectory(for: job, in: stateRoot)
        try DownloadStateDirectory.create(directory)
        let lockPath = directory.appendingPathComponent("lock").path
        let descriptor = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CommandFailure(message: "cannot open \(lockPath): \(String(cString: strerror(errno)))", exitCode: .cannotCreate)
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            Glibc.close(descriptor)
            throw CommandFailure(message: "another 'reachability download' is writing \(job.destination.path)", exitCode: .failure)
        }
        do {
            if FileManager.default.fileExists(atPath: job.destination.path) {
                // Like `wget -nc`, never clobber; but a file that provably is the wanted one counts as done,
                // so re-running a finished command with --sha256 succeeds.
                if let expected = options.expectedSHA256, SHA256.hex(ofFileAt: job.destination.path) == expected.lowercased() {
                    throw AlreadyComplete()
                }
                let hint = options.expectedSHA256 == nil ? "delete it to download again" : "its SHA-256 differs from --sha256; delete it to download again"
                throw CommandFailure(message: "\(job.destination.path) already exists; \(hint)", exitCode: .cannotCreate)
            }
            let agent: DownloadAgent
            do {
                agent = try DownloadAgent(configuration: configuration(directory), paths: paths)
            } catch {
                throw CommandFailure(message: "cannot start the download engine: \(error)", exitCode: .failure)
            }
            let restored = await agent.restoreDownloads()
            if let match = restored.first(where: { $0.url == job.url && $0.destination == job.destination }) {
                return DownloadSession(job: job, agent: agent, download: match, directory: directory, lockDescriptor: descriptor)
            }
            do {
                let download = try await agent.download(from: job.url, to: job.destination, options: options)
                return DownloadSession(job: job, agent: agent, download: download, directory: directory, lockDescriptor: descriptor)
            } catch {
                await agent.shutdown()
                throw CommandFailure(message: "\(error)", exitCode: .failure)
            }
        } catch {
            Glibc.close(descriptor)
            throw error
        }
    }

    /// Releases the lock; removes the job directory when nothing is left to resume.
    func close() {
        if download.state == .completed || {
            if case .failed(let error) = download.state { return !error.isResumable }
            return false
        }() {
            unlink(directory.appendingPathComponent("lock").path)
            rmdir(directory.path)   // only when empty: a record left behind stays
        }
        Glibc.close(lockDescriptor)
    }
}

