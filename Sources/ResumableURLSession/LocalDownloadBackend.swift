import Foundation
import FoundationNetworking
import LinuxReachability
import ResumableDownloads
import Synchronization

/// A download task run by this process's engine (any session but a background one): its
/// `DownloadTaskStateMachine` decides, this applies its actions to the session's
/// `DownloadAgent` and tells the owning task's delegate.
//
// Longer than 300 lines on purpose: the machine's inputs, its actions and the engine commands
// they turn into (start, stop with resume data, release) read together.
final class LocalDownloadBackend: DownloadTaskBackend {
    private enum Command: Sendable {
        case start, pause, resume, cancel, stop
        case release(keepFiles: Bool)
    }

    private struct Core {
        /// The public task; weak, since it owns this backend (the session keeps it while it runs).
        weak var owner: ResumableDownloadTask?
        var machine: DownloadTaskStateMachine
        var downloadID: UUID?
        var download: Download?
        var lock: DownloadLock?
        var resumeDataCallbacks: [@Sendable (Data?) -> Void] = []
        var error: URLError?
        /// The resume data answers and the completion, held until the task's lock is released:
        /// a caller that resumes from them at once must find the download free, not in use.
        var afterRelease: [@Sendable () -> Void] = []
    }

    let session: ResumableURLSession
    let source: ResumableDownloadTask.Source
    private let core: Mutex<Core>
    private let commands: AsyncStream<Command>.Continuation

    init(session: ResumableURLSession, source: ResumableDownloadTask.Source) {
        self.session = session
        self.source = source
        let waits = session.configuration.effectiveWaitsForConnectivity
        var machine = DownloadTaskStateMachine(options: .init(waitsForConnectivity: waits))
        if case .resumeData(.success(let data), let original) = source {
            machine = DownloadTaskStateMachine(options: .init(waitsForConnectivity: waits, originalResumeData: original),
                                               storedBytes: data.state.verifiedOffset, expectedBytes: data.state.totalLength)
        }
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

    func adopt(_ owner: ResumableDownloadTask) {
        core.withLock { $0.owner = owner }
    }

    private var owner: ResumableDownloadTask? { core.withLock { $0.owner } }

    // MARK: DownloadTaskBackend

    var publicState: ResumableDownloadTask.State {
        switch core.withLock({ $0.machine.publicState }) {
        case .running: .running
        case .suspended: .suspended
        case .canceling: .canceling
        case .completed: .completed
        }
    }

    var bytesReceived: Int64 { core.withLock { $0.machine.bytesWritten } }
    var expectedBytes: Int64 { core.withLock { $0.machine.expectedBytes ?? -1 } }
    var error: URLError? { core.withLock { $0.error } }

    func resume() { handle(.resume) }
    func suspend() { handle(.suspend) }

    func cancel(producingResumeData callback: (@Sendable (Data?) -> Void)?) {
        guard let callback else { return handle(.cancel) }
        handle(.cancelByProducingResumeData, resumeDataCallback: callback)
    }

    /// The hints are read when the transfer starts (its priority); nothing to send.
    func hintsChanged(_ hints: ResumableDownloadTask.Hints) {}

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
        let owner = core.owner
        switch action {
        case .start:
            if let owner { session.register(owner) }
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
            owner?.notifyWaitingForConnectivity()
        case .notifyResumed(let offset, let expected):
            owner?.notifyResumed(at: offset, expected: expected)
        case .notifyWrote(let bytes, let total, let expected):
            owner?.notifyWrote(bytes, total: total, expected: expected)
        case .deliverFile(let location):
            let id = core.downloadID
            let expected = core.machine.expectedBytes
            session.enqueue { [self] in
                owner?.deliverFile(at: location, expectedLength: expected)
                // As on Apple platforms, the file is gone once the delegate returns.
                if let id { session.directory?.removeFinishedFile(of: id) }
                handle(.fileDelivered)
            }
        case .answerResumeData(let data):
            let callbacks = core.resumeDataCallbacks
            core.resumeDataCallbacks = []
            let answer: @Sendable () -> Void = { for callback in callbacks { callback(data) } }
            if data == nil { session.enqueue(answer) } else { core.afterRelease.append(answer) }
        case .complete(let completion):
            let error = completion.map(urlError)
            core.error = error
            core.afterRelease.append { owner?.complete(with: error) }
        }
    }

    private func urlError(_ completion: DownloadTaskStateMachine.Completion) -> URLError {
        completion.failure.urlError(url: source.url, downloadResumeData: completion.resumeData)
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
        if case .resumeData(.failure(let error), _) = source {
            return handle(.startFailed(.init(code: .cannotWriteToFile, description: error.description, underlying: .resumeData(error))))
        }
        let (directory, agent): (SessionDirectory, DownloadAgent)
        switch session.engine {
        case .success(let engine): (directory, agent) = (engine.directory, engine.agent)
        case .failure(let failure): return handle(.startFailed(failure))
        }
        let url: URL
        let id: UUID
        var resumeState: ResumeState?
        var requestHeaders: [String] = []
        var requestTimeout: Duration?
        switch source {
        case .request(let request):
            switch Self.check(request) {
            case .failure(let failure): return handle(.startFailed(failure))
            case .success(let checked): (url, requestHeaders, requestTimeout) = (checked.url, checked.headers, checked.timeout)
            }
            id = UUID()
            // A fresh state under our id, so the engine's files carry the id we lock.
            resumeState = ResumeState(id: id, url: url, entityTag: nil, lastModified: nil, totalLength: nil, verifiedOffset: 0)
        case .resumeData(.failure(let error), _):
            return handle(.startFailed(.init(code: .cannotWriteToFile, description: error.description, underlying: .resumeData(error))))
        case .resumeData(.success(let data), _):
            url = data.state.url
            id = data.state.id
        }
        do {
            let lock = try directory.lock(id)
            core.withLock { $0.lock = lock; $0.downloadID = id }
            if case .resumeData(.success(let data), _) = source {
                resumeState = try data.continuedState(in: directory)
            }
        } catch let error as ResumeDataError {
            return handle(.startFailed(.init(code: .cannotWriteToFile, description: error.description, underlying: .resumeData(error))))
        } catch {
            return handle(.startFailed(Self.storageFailure(error)))
        }
        await startEngine(agent, url: url, id: id, resuming: resumeState, in: directory,
                          headers: requestHeaders, timeout: requestTimeout)
    }

    /// Creates the engine's download, its events and progress wired before it is scheduled.
    private func startEngine(_ agent: DownloadAgent, url: URL, id: UUID, resuming resumeState: ResumeState?,
                             in directory: SessionDirectory, headers: [String], timeout: Duration?) async {
        do {
            let options = DownloadOptions(allowsExpensive: session.allowsExpensive, allowsRoaming: session.allowsRoaming,
                                          allowsConstrained: session.allowsConstrained,
                                          priority: owner?.priority ?? ResumableDownloadTask.defaultPriority,
                                          requestHeaders: headers, requestTimeout: timeout)
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

    /// A request the engine can download: GET (or unset) without a body, to an http or https URL,
    /// its headers as `Name: value` lines (refused with the reason when the resume rules own
    /// them), its `timeoutInterval` when shorter than the session's.
    static func check(_ request: URLRequest) -> Result<(url: URL, headers: [String], timeout: Duration?), DownloadTaskStateMachine.Failure> {
        guard let url = request.url, let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            return .failure(.init(code: .unsupportedURL, description: "only http and https URLs can be downloaded: \(request.url?.absoluteString ?? "no URL")"))
        }
        let method = request.httpMethod?.uppercased() ?? "GET"
        guard method == "GET" else {
            return .failure(.init(code: .unsupportedURL, description: "download tasks make GET requests; this one is \(method)"))
        }
        guard request.httpBody == nil, request.httpBodyStream == nil else {
            return .failure(.init(code: .unsupportedURL, description: "download tasks make GET requests, which carry no body"))
        }
        let headers = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
        for line in headers {
            if let problem = HeaderValidation.problem(with: line) {
                return .failure(.init(code: .badURL, description: "the request's header \(line.prefix(while: { $0 != ":" })): \(problem)"))
            }
        }
        let timeout = request.timeoutInterval.isFinite && request.timeoutInterval > 0
            ? max(.milliseconds(1), Duration(clampingTimeInterval: request.timeoutInterval)) : nil
        return .success((url, headers, timeout))
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
        guard case .success(let engine) = session.engine, let state = await engine.agent.resumeState(of: download) else { return nil }
        return ResumeData.make(for: state, in: engine.directory)
    }

    private func release(keepFiles: Bool) async {
        let (download, lock, id, deliveries) = core.withLock { core in
            defer { core.download = nil; core.lock = nil; core.afterRelease = [] }
            return (core.download, core.lock, core.downloadID, core.afterRelease)
        }
        if let download, case .success(let engine) = session.engine { await engine.agent.forget(download) }
        // Only a task holding the id's lock may delete its files (another may be using them).
        if let lock {
            if !keepFiles, let id { session.directory?.removeFiles(of: id) }
            lock.release()
        }
        for delivery in deliveries { session.enqueue(delivery) }
        if let owner { session.unregister(owner) }
        commands.finish()
    }
}
