import FoundationEssentials
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization
import ReachabilityEvents

/// Where `download` keeps resume data.
enum DownloadStateDirectory {
    /// The state directory from the one resolver (see `StateDirectoryLocation`).
    static func resolve(override: String?, environment: [String: String],
                        system: StateDirectoryLocation.System = .current) throws -> URL {
        URL(fileURLWithPath: try StateDirectoryLocation.resolve(explicit: override, environment: environment, system: system),
            isDirectory: true)
    }

    /// Creates (0700) and checks the directory: exit 78 when it is unsafe, 73 when it cannot be made.
    @discardableResult
    static func create(_ directory: URL) throws -> CheckedDirectory {
        try StateDirectoryLocation.open(directory.path)
    }

    /// The per-download subdirectory: a stable name from the destination alone, so running the
    /// same command again finds the same resume record, a rerun with a new URL for the same file
    /// (an expired link replaced) finds the stored bytes, and downloads to other files (possibly
    /// run by another `reachability download` at the same time) are never restored by this one.
    static func jobDirectory(for job: DownloadCommand.Job, in root: URL) -> URL {
        root.appendingPathComponent("downloads", isDirectory: true)
            .appendingPathComponent(stableName(job.destination.path), isDirectory: true)
    }

    /// 16 hex digits naming `key` the same in every run.
    static func stableName(_ key: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325   // FNV-1a 64: stable across runs, unlike Hasher
        for byte in key.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// Thrown by `DownloadSession.open` when the destination already holds the wanted file: it
/// matches `--sha256`, or an earlier run of the same command completed it (`CompletionMarker`).
struct AlreadyComplete: Error {
    var reason: String
}

/// One download of the command: its own agent (so `restoreDownloads()` sees only this job's
/// record), the lock that keeps a second process off the same partial file, and the `Download`.
final class DownloadSession: Sendable {
    let job: DownloadCommand.Job
    let agent: DownloadAgent
    /// The job's download; a new one (same record) when the job moves to another mirror.
    var download: Download { current.withLock { $0 } }
    private let current: Mutex<Download>
    /// The URL the stored bytes came from when it was not this job's (a replaced link), else nil.
    let previousURL: URL?
    private let directory: URL
    private let lockDescriptor: FileDescriptor

    private init(job: DownloadCommand.Job, agent: DownloadAgent, download: Download, directory: URL,
                 lockDescriptor: FileDescriptor, previousURL: URL? = nil) {
        self.job = job
        self.previousURL = previousURL
        self.directory = directory
        self.agent = agent
        current = Mutex(download)
        self.lockDescriptor = lockDescriptor
    }

    /// Moves the job to `url`, another source of the same file: the download stops
    /// (checkpointed) if it still runs, and a new one continues its record from `url`, where the
    /// resume rules keep the stored bytes only if `url` serves the same length and validator.
    /// After a failure that discarded them (a file failing --sha256) it starts from zero.
    func changeSource(to url: URL, options: DownloadOptions) async throws {
        let previous = download
        await agent.pause(previous)
        await agent.forget(previous)
        let next: Download
        if let moved = await agent.restoreDownload(to: job.destination, replacingURLWith: url, options: options) {
            next = moved.download
        } else {
            next = try await agent.download(from: url, to: job.destination, options: options)
        }
        current.withLock { $0 = next }
    }

    /// Restores the job's resume record if there is one, else starts a new download.
    /// Throws `CommandFailure` when the destination exists, the job is locked, or the agent fails.
    static func open(_ job: DownloadCommand.Job, stateRoot: URL, paths: AsyncStream<NetworkPath>,
                     hostPaths: @escaping @Sendable (String) -> AsyncStream<HostPath>,
                     configuration: (URL) -> DownloadAgent.Configuration,
                     options: DownloadOptions) async throws -> DownloadSession {
        let directory = DownloadStateDirectory.jobDirectory(for: job, in: stateRoot)
        let descriptor = try lock(job, directory: directory, stateRoot: stateRoot)
        do {
            let finished = try checkExistingDestination(job, options: options, directory: directory)
            let agent: DownloadAgent
            do {
                agent = try DownloadAgent(configuration: configuration(directory), paths: paths, hostPaths: hostPaths)
            } catch {
                throw CommandFailure(message: "cannot start the download engine: \(error)", exitCode: .failure)
            }
            if let finished { try await refuseExisting(finished, job: job, agent: agent) }
            // Only this job's record is acted on; a --sha256 given now is adopted.
            if let match = await agent.restoreDownload(from: job.url, to: job.destination, options: options) {
                return DownloadSession(job: job, agent: agent, download: match, directory: directory, lockDescriptor: descriptor)
            }
            // Bytes stored from another URL for this file (an expired link): continued from this
            // one; the engine's resume rules (length, validator in If-Range) decide if they fit.
            if let moved = await agent.restoreDownload(to: job.destination, replacingURLWith: job.url, options: options) {
                return DownloadSession(job: job, agent: agent, download: moved.download, directory: directory,
                                       lockDescriptor: descriptor, previousURL: moved.previousURL)
            }
            do {
                let download = try await agent.download(from: job.url, to: job.destination, options: options)
                return DownloadSession(job: job, agent: agent, download: download, directory: directory, lockDescriptor: descriptor)
            } catch {
                await agent.shutdown()
                throw CommandFailure(message: "\(error)", exitCode: .failure)
            }
        } catch {
            // A job that never started leaves nothing behind (its lock file and empty directory
            // go while the lock is still held); an already complete one keeps its marker until
            // the batch is done.
            if !(error is AlreadyComplete) { removeIfEmpty(directory) }
            descriptor.close()
            throw error
        }
    }

    /// Creates and locks the job's directory under `stateRoot` (checked: ours, 0700, no links,
    /// before anything in it is read or locked); the returned descriptor holds the lock.
    private static func lock(_ job: DownloadCommand.Job, directory: URL, stateRoot: URL) throws -> FileDescriptor {
        let root = try StateDirectoryLocation.open(stateRoot.path)
        let descriptor: FileDescriptor
        do throws(FileTrustError) {
            descriptor = try root.subdirectory("downloads", creating: true)
                .subdirectory(directory.lastPathComponent, creating: true)
                .openOwnedFile("lock", creating: .openOrCreate, mode: 0o600).descriptor
        } catch {
            throw StateDirectoryLocation.failure(error)
        }
        guard (try? descriptor.tryLockExclusive()) == true else {
            descriptor.close()
            throw CommandFailure(message: "another 'reachability download' is writing \(job.destination.path)", exitCode: .temporaryFailure)
        }
        return descriptor
    }

    /// Ends the job when its destination already exists: `AlreadyComplete` when the server's
    /// file is provably the same, else a failure that says to delete it. Shuts the agent down.
    private static func refuseExisting(_ finished: CompletionMarker, job: DownloadCommand.Job, agent: DownloadAgent) async throws -> Never {
        let comparison: ResumeValidator.Comparison
        do {
            comparison = try await compareWithServer(finished, job: job, agent: agent)
        } catch {
            await agent.shutdown()
            throw error
        }
        await agent.shutdown()
        switch comparison {
        case .same(let reason):
            throw AlreadyComplete(reason: "already complete (\(reason)); nothing downloaded")
        case .different(let reason):
            throw CommandFailure(message: "\(job.destination.path) already exists and may not be the server's file: \(reason); "
                                 + "delete it to download again", exitCode: .cannotCreate)
        }
    }

    /// Like `wget -nc`, an existing destination is never clobbered; but a file that provably is
    /// the wanted one counts as done (`AlreadyComplete`), so re-running a finished command with
    /// --sha256, or an interrupted batch, succeeds. A directory, FIFO or device there is named as
    /// such, and nothing at the destination is ever opened in a way that could wait (a FIFO's
    /// writer); hashing a large file stops when the command is interrupted. Returns the marker
    /// of a file an earlier, finished run completed: done if the server still serves it
    /// (`compareWithServer`); nil when there is no file.
    static func checkExistingDestination(_ job: DownloadCommand.Job, options: DownloadOptions,
                                         directory: URL) throws -> CompletionMarker? {
        let path = job.destination.path
        guard let status = (try? FileSystem.status(ofPath: path, followingLinks: false)) ?? nil else { return nil }
        switch status.kind {
        case .directory:
            throw CommandFailure(message: "\(path) is a directory; to download into it use -d \(path), or name a file in it with -o \(path)/NAME",
                                 exitCode: .cannotCreate)
        case .regular:
            break
        case .symbolicLink:
            throw CommandFailure(message: "\(path) already exists (a symbolic link, never followed); delete it to download again",
                                 exitCode: .cannotCreate)
        case .fifo, .socket, .characterDevice, .blockDevice, .unknown:
            let kind = switch status.kind {
            case .fifo: "a FIFO"
            case .socket: "a socket"
            case .characterDevice, .blockDevice: "a device"
            default: "not a regular file"
            }
            throw CommandFailure(message: "\(path) already exists and is \(kind), not a file; delete it or choose another -o",
                                 exitCode: .cannotCreate)
        }
        if let expected = options.expectedSHA256 {
            let digest = SHA256.hex(ofFileAt: path, isCancelled: { Task.isCancelled })
            if Task.isCancelled { throw CancellationError() }
            if digest == expected.lowercased() {
                throw AlreadyComplete(reason: "already complete (matches --sha256)")
            }
        } else if job.isStandardOutput {
            // Completed and renamed by a run that stopped before writing it out: only this
            // command writes in its 0700 state directory.
            throw AlreadyComplete(reason: "already complete (kept by an earlier run)")
        } else if let marker = CompletionMarker.read(in: directory, destination: job.destination) {
            if marker.isFinal == true { return marker }
            if marker.url == job.url.absoluteString {
                throw AlreadyComplete(reason: "already complete (downloaded by an earlier run of this command)")
            }
        }
        let hint = options.expectedSHA256 == nil ? "delete it to download again" : "its SHA-256 differs from --sha256; delete it to download again"
        throw CommandFailure(message: "\(path) already exists; \(hint)", exitCode: .cannotCreate)
    }

    /// How long a rerun waits for a path and the server's answer before giving up for now.
    static let serverCheckLimit = Duration.seconds(30)

    /// Asks the server (HEAD, through the job's agent: its headers, proxy, path) for the file's
    /// length and validators now, and compares them with the ones recorded at completion. A
    /// server that cannot be asked (no path or no answer within `serverCheckLimit`) is a failure
    /// for now (75): nothing is decided about the file.
    static func compareWithServer(_ marker: CompletionMarker, job: DownloadCommand.Job,
                                  agent: DownloadAgent) async throws -> ResumeValidator.Comparison {
        let request = ExchangeRequest(method: .head, url: job.url, idleTimeout: serverCheckLimit, responseBodyLimit: 0)
        let answer = await withTaskGroup(of: Result<ExchangeResponse, DownloadError>?.self) { group in
            group.addTask {
                do throws(DownloadError) {
                    return .success(try await agent.exchange(request, waitsForConnectivity: true))
                } catch {
                    return .failure(error)
                }
            }
            group.addTask {
                try? await Task.sleep(for: serverCheckLimit)
                return nil
            }
            let first: Result<ExchangeResponse, DownloadError>? = await group.next().flatMap { $0 }
            group.cancelAll()
            return first
        }
        if Task.isCancelled { throw CancellationError() }
        let failure: String
        switch answer {
        case .success(let response)?:
            guard response.head.statusCode == 200 else {
                return .different("the server answered HTTP \(response.head.statusCode) when asked for its length and validator")
            }
            return ResumeValidator.compare(stored: marker.entity, server: ResumeValidator.Entity(head: response.head))
        case .failure(let error)?:
            failure = error.description
        case nil:
            failure = "no usable network path or no answer within \(Int(serverCheckLimit.components.seconds)) s"
        }
        throw CommandFailure(message: "\(job.destination.path) already exists, and the server could not be asked whether it is still "
                             + "its file (\(failure)); run the same command again when it can be reached", exitCode: .temporaryFailure)
    }

    /// The job's state directory.
    var jobDirectory: URL { directory }

    /// Releases the lock. A completed download leaves a `CompletionMarker` with the server's
    /// validators, `isFinal` when the batch is finished (else the same command counts the file
    /// as done without asking); the job directory is removed when nothing is left in it (a resume
    /// record or a marker keeps it; `-o -` leaves no file, so no marker).
    func close(batchIsFinished: Bool) async {
        if download.state == .completed,
           let marker = CompletionMarker(url: job.url, destination: job.destination,
                                         entity: await agent.completedEntity(of: download), isFinal: batchIsFinished) {
            try? marker.write(in: directory)
        }
        Self.removeIfEmpty(directory)
        lockDescriptor.close()
    }

    /// Removes the lock file and the directory, which succeeds only when nothing else is in it.
    static func removeIfEmpty(_ directory: URL) {
        try? FileSystem.remove(directory.appendingPathComponent("lock").path)
        FileSystem.removeDirectory(directory.path)
    }
}

