import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization

/// A download task of a `ResumableURLSession`, shaped like `URLSessionDownloadTask`: created
/// suspended, started with `resume()`, observed through the session's delegate, `progress` and
/// the byte counts.
public final class ResumableDownloadTask: Sendable, Hashable, CustomStringConvertible {
    /// URLSessionTask.State's cases and raw values.
    public enum State: Int, Sendable {
        /// Transferring, waiting for a path (with `waitsForConnectivity`), or delivering its file.
        case running = 0
        /// Created and not resumed yet, or suspended.
        case suspended = 1
        /// `cancel()` was called; the delegate hears about it soon.
        case canceling = 2
        /// Finished, failed or cancelled; the delegate has been (or is being) told.
        case completed = 3
    }

    /// The request a task was made for: on Linux only its URL (so `originalRequest?.url` ports).
    public struct Request: Sendable, Hashable {
        /// The URL downloaded.
        public let url: URL?
    }

    /// Unique within its session.
    public let taskIdentifier: Int
    /// What the task was created for (for a task from resume data, the URL recorded in it; nil
    /// when the data could not be read).
    public let originalRequest: Request?
    /// The same as `originalRequest` (redirects are followed inside the engine).
    public var currentRequest: Request? { originalRequest }
    /// Progress in bytes: `completedUnitCount` is `countOfBytesReceived`, `totalUnitCount` the
    /// expected length (-1 while unknown).
    public let progress: Progress

    let session: ResumableURLSession

    enum Source: Sendable {
        case url(URL)
        case resumeData(Result<ResumeData, ResumeDataError>, original: Data)
    }

    private enum Command: Sendable {
        case start, pause, resume, cancel, stop
        case release(keepFiles: Bool)
    }

    private struct Core {
        var machine: DownloadTaskStateMachine
        var downloadID: UUID?
        var download: Download?
        var lock: DownloadLock?
        var resumeDataCallbacks: [@Sendable (Data?) -> Void] = []
        var error: URLError?
        var taskDescription: String?
    }

    private let source: Source
    private let core: Mutex<Core>
    private let commands: AsyncStream<Command>.Continuation

    init(session: ResumableURLSession, identifier: Int, source: Source) {
        self.session = session
        taskIdentifier = identifier
        self.source = source
        var machine = DownloadTaskStateMachine(options: .init(waitsForConnectivity: session.configuration.waitsForConnectivity))
        switch source {
        case .url(let url):
            originalRequest = Request(url: url)
        case .resumeData(.success(let data), let original):
            originalRequest = Request(url: data.url)
            machine = DownloadTaskStateMachine(options: .init(waitsForConnectivity: session.configuration.waitsForConnectivity,
                                                              originalResumeData: original),
                                               storedBytes: data.offset, expectedBytes: data.expectedLength)
        case .resumeData(.failure, _):
            originalRequest = nil
        }
        progress = Progress(totalUnitCount: machine.expectedBytes ?? -1)
        progress.completedUnitCount = machine.bytesWritten
        core = Mutex(Core(machine: machine))
        let (stream, continuation) = AsyncStream.makeStream(of: Command.self)
        commands = continuation
        // One executor per task applies the engine commands in order (a suspend then a resume
        // must reach the engine in that order); it ends with the task.
        Task { [weak self] in
            for await command in stream {
                guard let self else { return }
                await self.run(command)
            }
        }
    }

    // MARK: URLSessionTask's surface

    /// running, suspended, canceling or completed.
    public var state: State {
        switch core.withLock({ $0.machine.publicState }) {
        case .running: .running
        case .suspended: .suspended
        case .canceling: .canceling
        case .completed: .completed
        }
    }

    /// Bytes of the file received so far, resumed bytes included.
    public var countOfBytesReceived: Int64 { core.withLock { $0.machine.bytesWritten } }
    /// The file's length, or -1 (`NSURLSessionTransferSizeUnknown`) while unknown.
    public var countOfBytesExpectedToReceive: Int64 { core.withLock { $0.machine.expectedBytes ?? -1 } }
    /// Always 0: download tasks send no body.
    public var countOfBytesSent: Int64 { 0 }
    /// Always 0: download tasks send no body.
    public var countOfBytesExpectedToSend: Int64 { 0 }
    /// The error the task completed with, once it has (what `didCompleteWithError` got).
    public var error: (any Error)? { core.withLock { $0.error } }

    /// A label of your choosing.
    public var taskDescription: String? {
        get { core.withLock { $0.taskDescription } }
        set { core.withLock { $0.taskDescription = newValue } }
    }

    /// Starts the task, or continues it after `suspend()`.
    public func resume() { handle(.resume) }

    /// Pauses the transfer, keeping what arrived; `resume()` continues it.
    public func suspend() { handle(.suspend) }

    /// Stops the task for good and deletes what arrived; the delegate hears
    /// `didCompleteWithError` with `URLError.cancelled`.
    public func cancel() { handle(.cancel) }

    /// Stops the task and hands `completionHandler` resume data (nil when the download cannot be
    /// continued: no bytes yet, or no ETag/Last-Modified from the server). The handler runs on
    /// the delegate queue, before `didCompleteWithError` (whose `URLError.cancelled` carries the
    /// same data).
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        handle(.cancelByProducingResumeData, resumeDataCallback: completionHandler)
    }

    /// Stops the task and returns resume data, or nil when it cannot be continued.
    public func cancelByProducingResumeData() async -> Data? {
        await withCheckedContinuation { continuation in
            cancel { continuation.resume(returning: $0) }
        }
    }

    /// The identifier, URL and state.
    public var description: String {
        "ResumableDownloadTask(\(taskIdentifier) \(originalRequest?.url.map { URLRedaction.redacted($0) } ?? "-") \(state))"
    }

    /// Identity: two handles are equal only when they are the same object.
    public static func == (lhs: ResumableDownloadTask, rhs: ResumableDownloadTask) -> Bool { lhs === rhs }
    /// Hashes the object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    // MARK: inputs

    /// Feeds the state machine and applies its actions. Delegate calls are queued and engine
    /// commands yielded while the lock is held, so both keep the machine's order; nothing here
    /// blocks or calls out.
    private func handle(_ input: DownloadTaskStateMachine.Input, resumeDataCallback: (@Sendable (Data?) -> Void)? = nil) {
        core.withLock { core in
            if let resumeDataCallback { core.resumeDataCallbacks.append(resumeDataCallback) }
            for action in core.machine.handle(input) { apply(action, &core) }
        }
    }

    private func apply(_ action: DownloadTaskStateMachine.Action, _ core: inout Core) {
        let session = session
        switch action {
        case .start:
            session.register(self)
            commands.yield(.start)
        case .pauseTransfer: commands.yield(.pause)
        case .resumeTransfer: commands.yield(.resume)
        case .cancelTransfer: commands.yield(.cancel)
        case .stopTransfer: commands.yield(.stop)
        case .release(let keepFiles): commands.yield(.release(keepFiles: keepFiles))

        case .startConnectivityGrace:
            Task { [weak self] in
                try? await Task.sleep(for: DownloadTaskStateMachine.connectivityGrace)
                self?.handle(.connectivityGraceExpired)
            }
        case .notifyWaitingForConnectivity:
            session.deliver { $0.urlSession(session, taskIsWaitingForConnectivity: self) }
        case .notifyResumed(let offset, let expected):
            progress.totalUnitCount = expected
            progress.completedUnitCount = offset
            session.deliver { $0.urlSession(session, downloadTask: self, didResumeAtOffset: offset, expectedTotalBytes: expected) }
        case .notifyWrote(let bytes, let total, let expected):
            progress.totalUnitCount = expected
            progress.completedUnitCount = total
            session.deliver {
                $0.urlSession(session, downloadTask: self, didWriteData: bytes, totalBytesWritten: total,
                              totalBytesExpectedToWrite: expected)
            }
        case .deliverFile(let location):
            let id = core.downloadID
            session.enqueue { [self] in
                if let delegate = session.delegate {
                    delegate.urlSession(session, downloadTask: self, didFinishDownloadingTo: location)
                }
                // As on Apple platforms, the file is gone once the delegate returns.
                if let id { session.directory?.removeFinishedFile(of: id) }
                handle(.fileDelivered)
            }
        case .answerResumeData(let data):
            let callbacks = core.resumeDataCallbacks
            core.resumeDataCallbacks = []
            session.enqueue { for callback in callbacks { callback(data) } }
        case .complete(let completion):
            let error = completion.map(urlError)
            core.error = error
            session.deliver { $0.urlSession(session, task: self, didCompleteWithError: error) }
        }
    }

    private func urlError(_ completion: DownloadTaskStateMachine.Completion) -> URLError {
        let failure = completion.failure
        var info: [String: Any] = [NSLocalizedDescriptionKey: failure.description]
        if let url = originalRequest?.url { info[NSURLErrorFailingURLErrorKey] = url }
        if let data = completion.resumeData { info[NSURLSessionDownloadTaskResumeData] = data }
        if let reason = failure.networkUnavailableReason { info[NSURLErrorNetworkUnavailableReasonKey] = reason.rawValue }
        switch failure.underlying {
        case .download(let error): info[NSUnderlyingErrorKey] = error
        case .resumeData(let error): info[NSUnderlyingErrorKey] = error
        case .storage(let error): info[NSUnderlyingErrorKey] = error
        case nil: break
        }
        return URLError(failure.code, userInfo: info)
    }

    // MARK: engine

    private func engineEvent(_ event: DownloadEvent) {
        if case .waitingForConnectivity = event {
            handle(.waitingForConnectivity(reason: session.networkUnavailableReason()))
        } else {
            handle(.event(event))
        }
    }

    private func run(_ command: Command) async {
        let download = core.withLock { $0.download }
        switch command {
        case .start: await start()
        case .pause: await download?.pause()
        case .resume: await download?.resume()
        case .cancel: await download?.cancel()
        case .stop:
            guard let download else { return }
            await stop(download)
        case .release(let keepFiles):
            await release(keepFiles: keepFiles)
        }
    }

    private func start() async {
        if session.isInvalidating {
            return handle(.startFailed(.init(code: .cancelled, description: "the session was invalidated")))
        }
        let (directory, agent): (SessionDirectory, DownloadAgent)
        switch session.engine {
        case .success(let engine): (directory, agent) = (engine.directory, engine.agent)
        case .failure(let failure): return handle(.startFailed(failure))
        }
        let url: URL
        let id: UUID
        var resumeState: ResumeState?
        switch source {
        case .url(let requested):
            url = requested
            id = UUID()
            // A fresh state under our id, so the engine's files carry the id we lock.
            resumeState = ResumeState(id: id, url: url, entityTag: nil, lastModified: nil, totalLength: nil, verifiedOffset: 0)
        case .resumeData(.failure(let error), _):
            return handle(.startFailed(.init(code: .cannotWriteToFile, description: error.description, underlying: .resumeData(error))))
        case .resumeData(.success(let data), _):
            url = data.url
            id = data.id
        }
        do {
            let lock = try directory.lock(id)
            core.withLock { $0.lock = lock; $0.downloadID = id }
            if case .resumeData(.success(let data), _) = source {
                resumeState = try Self.resumeState(for: data, in: directory)
            }
        } catch let error as ResumeDataError {
            return handle(.startFailed(.init(code: .cannotWriteToFile, description: error.description, underlying: .resumeData(error))))
        } catch {
            return handle(.startFailed(Self.storageFailure(error)))
        }
        do {
            let options = DownloadOptions(allowsExpensive: session.allowsExpensive)
            let download = try await agent.makeDownload(from: url, to: directory.destination(for: id), options: options,
                                                        resuming: resumeState) { download in
                // Set before the download is scheduled: no event or progress can be missed.
                download.onEvent = { [weak self] event in self?.engineEvent(event) }
                download.onProgress = { [weak self] progress in
                    self?.handle(.progress(bytesReceived: progress.bytesReceived, totalBytes: progress.totalBytes))
                }
            }
            core.withLock { $0.download = download }
        } catch let error as DownloadError {
            handle(.startFailed(.init(error)))
        } catch {
            handle(.startFailed(Self.storageFailure(error)))
        }
    }

    /// What the engine continues from, checked against the partial file on disk: gone means a
    /// clean restart at zero; replaced or shorter than promised means the data is stale.
    static func resumeState(for data: ResumeData, in directory: SessionDirectory) throws -> ResumeState {
        guard let file = try directory.partialFile(for: data.id) else {
            return ResumeState(id: data.id, url: data.url, entityTag: nil, lastModified: nil, totalLength: nil, verifiedOffset: 0)
        }
        guard file.device == data.partialFile.device, file.inode == data.partialFile.inode else {
            throw ResumeDataError.stale.with("the partial file of this resume data was replaced since it was made")
        }
        guard file.modified == data.partialFile.modified else {
            throw ResumeDataError.stale.with("the partial file was written since this resume data was made (newer resume data supersedes it)")
        }
        let promised = max(data.offset, data.ranges?.last?.last ?? 0)
        guard file.size >= promised else {
            throw ResumeDataError.stale.with("the partial file holds \(file.size) bytes; the resume data promises \(promised)")
        }
        return ResumeState(id: data.id, url: data.url, entityTag: data.entityTag, lastModified: data.lastModified,
                           totalLength: data.expectedLength, verifiedOffset: data.offset, ranges: data.ranges, seams: data.seams)
    }

    private static func storageFailure(_ error: any Error) -> DownloadTaskStateMachine.Failure {
        if let error = error as? SessionStorageError {
            return .init(code: .cannotCreateFile, description: error.description, underlying: .storage(error))
        }
        return .init(code: .cannotCreateFile, description: "\(error)")
    }

    /// Pauses the engine's download and turns its durable state into resume data.
    private func stop(_ download: Download) async {
        await download.pause()
        switch download.state {
        case .completed:
            handle(.stopped(.finished(download.destination)))
        case .failed(let error) where !error.isResumable:
            handle(.stopped(.failed(error)))
        default:
            handle(.stopped(.paused(resumeData: await makeResumeData(download))))
        }
    }

    private func makeResumeData(_ download: Download) async -> Data? {
        guard case .success(let engine) = session.engine,
              let state = await engine.agent.resumeState(of: download),
              state.hasStoredBytes, state.validator != nil,
              let file = try? engine.directory.partialFile(for: download.id), file.size >= state.storedEnd else {
            return nil
        }
        let data = ResumeData(id: download.id, url: state.url, entityTag: state.entityTag, lastModified: state.lastModified,
                              offset: state.verifiedOffset, ranges: state.ranges, seams: state.seams,
                              expectedLength: state.totalLength,
                              partialFile: .init(name: ResumeData.partialFileName(for: download.id),
                                                 device: file.device, inode: file.inode, modified: file.modified),
                              stateDirectory: engine.directory.root.path, createdAt: Date())
        return try? data.encoded(key: engine.directory.key)
    }

    private func release(keepFiles: Bool) async {
        let (download, lock, id) = core.withLock { core in
            defer { core.download = nil; core.lock = nil }
            return (core.download, core.lock, core.downloadID)
        }
        if let download, case .success(let engine) = session.engine { await engine.agent.forget(download) }
        // Only a task holding the id's lock may delete its files (another may be using them).
        if let lock {
            if !keepFiles, let id { session.directory?.removeFiles(of: id) }
            lock.release()
        }
        session.unregister(self)
        commands.finish()
    }
}
