import Foundation
import FoundationNetworking
import LinuxReachability
import ResumableDownloads
import Synchronization

/// A download task of a `ResumableURLSession`, shaped like `URLSessionDownloadTask`: created
/// suspended, started with `resume()`, observed through the session's delegate, `progress` and
/// the byte counts.
//
// Longer than 400 lines on purpose: URLSessionDownloadTask's public surface and the task's one
// locked state (hints, counts, the engine download or the background link) read together.
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

    /// The request type (`URLRequest`); kept so code naming it still compiles.
    @available(*, deprecated, renamed: "URLRequest")
    public typealias Request = URLRequest

    /// `URLSessionTask.defaultPriority` and friends.
    public static let defaultPriority: Float = 0.5
    /// The lowest priority.
    public static let lowPriority: Float = 0
    /// The highest priority.
    public static let highPriority: Float = 1

    /// Unique within its session; in a background session, the same in every process that
    /// attaches it.
    public let taskIdentifier: Int
    /// What the task was created for (for a task from resume data, a GET of the URL recorded in
    /// it; nil when the data could not be read).
    public let originalRequest: URLRequest?
    /// The same as `originalRequest` (redirects are followed inside the engine).
    public var currentRequest: URLRequest? { originalRequest }
    /// Progress in bytes: `completedUnitCount` is `countOfBytesReceived`, `totalUnitCount` the
    /// expected length (-1 while unknown).
    public let progress: Progress

    let session: ResumableURLSession
    /// `downloadTask(with:completionHandler:)`: called instead of the delegate (the file is
    /// valid during the call), once.
    let completionHandler: (@Sendable (URL?, URLResponse?, (any Error)?) -> Void)?
    /// A background session's task: its state is the agent's, mirrored here.
    let remote: BackgroundTask?

    enum Source: Sendable {
        case request(URLRequest)
        case resumeData(Result<ResumeData, ResumeDataError>, original: Data)

        /// Resume data that was refused: such a task fails here, in any session.
        var isUnreadableResumeData: Bool {
            if case .resumeData(.failure, _) = self { true } else { false }
        }
    }

    /// What every task can be told before (and while) it runs.
    struct Hints: Sendable {
        var taskDescription: String?
        var earliestBeginDate: Date?
        var countOfBytesClientExpectsToReceive: Int64 = -1
        var priority: Float = ResumableDownloadTask.defaultPriority
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
    }

    let source: Source
    private let core: Mutex<Core>
    let hints: Mutex<Hints>
    private let commands: AsyncStream<Command>.Continuation

    init(session: ResumableURLSession, identifier: Int, source: Source,
         completionHandler: (@Sendable (URL?, URLResponse?, (any Error)?) -> Void)? = nil, remote: BackgroundTask? = nil,
         hints: Hints = Hints()) {
        self.session = session
        taskIdentifier = identifier
        self.source = source
        self.completionHandler = completionHandler
        self.remote = remote
        self.hints = Mutex(hints)
        let waits = session.configuration.effectiveWaitsForConnectivity
        var machine = DownloadTaskStateMachine(options: .init(waitsForConnectivity: waits))
        switch source {
        case .request(let request):
            originalRequest = request
        case .resumeData(.success(let data), let original):
            originalRequest = URLRequest(url: data.state.url)
            machine = DownloadTaskStateMachine(options: .init(waitsForConnectivity: waits, originalResumeData: original),
                                               storedBytes: data.state.verifiedOffset, expectedBytes: data.state.totalLength)
        case .resumeData(.failure, _):
            originalRequest = nil
        }
        progress = Progress(totalUnitCount: machine.expectedBytes ?? -1)
        progress.completedUnitCount = machine.bytesWritten
        core = Mutex(Core(machine: machine))
        let (stream, continuation) = AsyncStream.makeStream(of: Command.self)
        commands = continuation
        guard remote == nil else {
            continuation.finish()   // a background task's engine is the agent's
            return
        }
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
        if let remote { return remote.publicState }
        return switch core.withLock({ $0.machine.publicState }) {
        case .running: .running
        case .suspended: .suspended
        case .canceling: .canceling
        case .completed: .completed
        }
    }

    /// Bytes of the file received so far, resumed bytes included.
    public var countOfBytesReceived: Int64 { remote?.bytesReceived ?? core.withLock { $0.machine.bytesWritten } }
    /// The file's length, or -1 (`NSURLSessionTransferSizeUnknown`) while unknown.
    public var countOfBytesExpectedToReceive: Int64 { remote?.expectedBytes ?? core.withLock { $0.machine.expectedBytes ?? -1 } }
    /// Always 0: download tasks send no body.
    public var countOfBytesSent: Int64 { 0 }
    /// Always 0: download tasks send no body.
    public var countOfBytesExpectedToSend: Int64 { 0 }
    /// The error the task completed with, once it has (what `didCompleteWithError` got).
    public var error: (any Error)? { remote.map { $0.error } ?? core.withLock { $0.error } }

    /// A label of your choosing; a background session's tasks keep it in the agent, so a later
    /// process finds it on the task it gets back.
    public var taskDescription: String? {
        get { hints.withLock { $0.taskDescription } }
        set { changeHints { $0.taskDescription = newValue } }
    }

    /// Background sessions: the task does not start before this date (it waits in the agent,
    /// `queue list` saying until when). Ignored by other sessions, as on Apple platforms.
    public var earliestBeginDate: Date? {
        get { hints.withLock { $0.earliestBeginDate } }
        set { changeHints { $0.earliestBeginDate = newValue } }
    }

    /// Background sessions: how many bytes the task expects (-1, unknown, by default). The agent
    /// starts it only when that many bytes (less what it has) fit the free disk space beside
    /// what other running tasks still expect; otherwise it waits with that reason, checked
    /// every 30 s, instead of filling the disk.
    public var countOfBytesClientExpectsToReceive: Int64 {
        get { hints.withLock { $0.countOfBytesClientExpectsToReceive } }
        set { changeHints { $0.countOfBytesClientExpectsToReceive = max(-1, newValue) } }
    }

    /// 0...1 (`defaultPriority` 0.5): where the task waits for a transfer slot, higher first.
    public var priority: Float {
        get { hints.withLock { $0.priority } }
        set { changeHints { $0.priority = newValue.isNaN ? Self.defaultPriority : min(1, max(0, newValue)) } }
    }

    private func changeHints(_ body: (inout Hints) -> Void) {
        let changed = hints.withLock { hints -> Hints in
            body(&hints)
            return hints
        }
        remote?.hintsChanged(changed)
    }

    /// Starts the task, or continues it after `suspend()`.
    public func resume() {
        if let remote { return remote.resume() }
        handle(.resume)
    }

    /// Pauses the transfer, keeping what arrived; `resume()` continues it.
    public func suspend() {
        if let remote { return remote.suspend() }
        handle(.suspend)
    }

    /// Stops the task for good and deletes what arrived; the delegate hears
    /// `didCompleteWithError` with `URLError.cancelled`. For a background task, the one way (with
    /// `invalidateAndCancel()` and `reachability queue cancel`) to stop it: a process that exits
    /// leaves it running.
    public func cancel() {
        if let remote { return remote.cancel(producingResumeData: nil) }
        handle(.cancel)
    }

    /// Stops the task and hands `completionHandler` resume data (nil when the download cannot be
    /// continued: no bytes yet, or no ETag/Last-Modified from the server). The handler runs on
    /// the delegate queue, before `didCompleteWithError` (whose `URLError.cancelled` carries the
    /// same data).
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        if let remote { return remote.cancel(producingResumeData: completionHandler) }
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
            notifyWaitingForConnectivity()
        case .notifyResumed(let offset, let expected):
            notifyResumed(at: offset, expected: expected)
        case .notifyWrote(let bytes, let total, let expected):
            notifyWrote(bytes, total: total, expected: expected)
        case .deliverFile(let location):
            let id = core.downloadID
            let expected = core.machine.expectedBytes
            session.enqueue { [self] in
                deliverFile(at: location, expectedLength: expected)
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
            session.enqueue { [self] in complete(with: error) }
        }
    }

    // MARK: telling the delegate (or the completion handler)

    func notifyWaitingForConnectivity() {
        guard completionHandler == nil else { return }
        session.deliver { [self] in $0.urlSession(session, taskIsWaitingForConnectivity: self) }
    }

    func notifyResumed(at offset: Int64, expected: Int64) {
        progress.totalUnitCount = expected
        progress.completedUnitCount = offset
        guard completionHandler == nil else { return }
        session.deliver { [self] in $0.urlSession(session, downloadTask: self, didResumeAtOffset: offset, expectedTotalBytes: expected) }
    }

    func notifyWrote(_ bytes: Int64, total: Int64, expected: Int64) {
        progress.totalUnitCount = expected
        progress.completedUnitCount = total
        guard completionHandler == nil else { return }
        session.deliver { [self] in
            $0.urlSession(session, downloadTask: self, didWriteData: bytes, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
        }
    }

    /// On the delegate queue: the file to the completion handler or the delegate.
    func deliverFile(at location: URL, expectedLength: Int64?) {
        if let completionHandler {
            completionHandler(location, response(for: location, expectedLength: expectedLength), nil)
        } else if let delegate = session.downloadDelegate {
            delegate.urlSession(session, downloadTask: self, didFinishDownloadingTo: location)
        }
    }

    /// On the delegate queue: the end (nil: success, after the file was delivered).
    func complete(with error: URLError?) {
        if let completionHandler {
            if let error { completionHandler(nil, nil, error) }
        } else if let delegate = session.downloadDelegate {
            delegate.urlSession(session, task: self, didCompleteWithError: error)
        }
    }

    /// What the completion handler and the async forms return with the file: a 200 for the URL
    /// asked for, with the length. (The engine follows redirects and validators internally; the
    /// headers of the last response are not kept.)
    func response(for location: URL, expectedLength: Int64?) -> URLResponse {
        let url = originalRequest?.url ?? location
        let length = ((try? FileManager.default.attributesOfItem(atPath: location.path)[.size]) as? NSNumber)?.int64Value
            ?? expectedLength ?? -1
        return HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1",
                               headerFields: length >= 0 ? ["Content-Length": "\(length)"] : [:])
            ?? URLResponse(url: url, mimeType: nil, expectedContentLength: Int(length), textEncodingName: nil)
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
        do {
            let options = DownloadOptions(allowsExpensive: session.allowsExpensive, allowsRoaming: session.allowsRoaming,
                                          allowsConstrained: session.allowsConstrained,
                                          priority: priority, requestHeaders: requestHeaders, requestTimeout: requestTimeout)
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
