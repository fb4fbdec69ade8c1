import Foundation
import FoundationNetworking
import LinuxReachability
import ResumableDownloads
import Synchronization

/// A data task of a `ResumableURLSession`, shaped like `URLSessionDataTask`: created suspended,
/// started with `resume()`, its response and body handed to the session's data delegate
/// (`ResumableURLSessionDataDelegate`) or to its completion handler.
///
/// Unlike Foundation's on Linux, it watches the network path: started with no path it waits for
/// one (`waitsForConnectivity`) or fails with -1009 after a short grace; a path that goes away
/// under it ends it at once with -1005, not with -1001 after `timeoutIntervalForRequest`.
public final class ResumableDataTask: ResumableURLSessionTask {
    /// URLSessionTask.State's cases and raw values.
    public typealias State = ResumableDownloadTask.State

    /// Unique within its session.
    public let taskIdentifier: Int
    /// What the task was created for.
    public let originalRequest: URLRequest?
    /// Progress in bytes received: `totalUnitCount` is the response's length (-1 while unknown).
    public let progress: Progress

    let session: ResumableURLSession
    /// `dataTask(with:completionHandler:)`: called instead of the delegate, once.
    let completionHandler: (@Sendable (Data?, URLResponse?, (any Error)?) -> Void)?
    private let request: Result<DataExchangeRequest, DataTaskStateMachine.Failure>

    private struct Core {
        var machine: DataTaskStateMachine
        var exchange: (any DataExchange)?
        /// Bumped at every start, so events of an aborted exchange are told apart from the next one's.
        var attempt = 0
        var response: HTTPURLResponse?
        /// The body so far, for the completion handler.
        var body = Data()
        var error: URLError?
        var pathObservation: UUID?
        var taskDescription: String?
        var priority: Float = ResumableDownloadTask.defaultPriority
        /// `cancel(byProducingResumeData:)`'s handlers, waiting for the transport's resume data.
        var resumeDataCallbacks: [@Sendable (Data?) -> Void] = []
        /// Run on the delegate queue once the completion has been delivered (a background
        /// upload's acknowledgement to the agent).
        var afterCompletion: [@Sendable () -> Void] = []
        var hasDeliveredCompletion = false
    }

    /// What to do once the lock is released: things that may call back into the task.
    private enum Work {
        case start(attempt: Int)
        case abort(any DataExchange)
        case stopForResumeData(any DataExchange)
        case answer(allow: Bool)
    }

    private let core: Mutex<Core>

    /// `resuming`: an upload task made from resume data (or the reason that data was refused).
    init(session: ResumableURLSession, identifier: Int, request: URLRequest, body: DataExchangeBody?,
         resuming: Result<UploadResumeState, ResumeDataError>? = nil,
         completionHandler: (@Sendable (Data?, URLResponse?, (any Error)?) -> Void)?) {
        self.session = session
        taskIdentifier = identifier
        originalRequest = request
        self.completionHandler = completionHandler
        let waits = session.configuration.effectiveWaitsForConnectivity
        var options = DataTaskStateMachine.Options(waitsForConnectivity: waits)
        // A file upload becomes a resumable one where the transport runs those.
        let resumable: Bool
        if case .success(let exchanger) = session.exchanger, exchanger.runsResumableUploads, body != nil {
            resumable = true
        } else {
            resumable = false
        }
        switch resuming {
        case .failure(let error):
            self.request = .failure(.init(code: .cannotWriteToFile, description: error.description, underlying: .resumeData(error)))
        case .success(let state):
            self.request = Self.check(request, body: body, configuration: session.configuration).map {
                var checked = $0
                checked.upload = UploadPlan(resuming: state, stopsAtInterruption: !waits)
                return checked
            }
        case nil:
            self.request = Self.check(request, body: body, configuration: session.configuration).map {
                var checked = $0
                if resumable { checked.upload = UploadPlan(resuming: nil, stopsAtInterruption: !waits) }
                return checked
            }
        }
        options.transportFollowsPath = resumable
        let method = request.httpMethod?.uppercased() ?? "GET"
        options.retriesAfterPathChange = session.configuration.retriesIdempotentRequestsAfterPathChange
            && Self.idempotentMethods.contains(method) && !resumable
        progress = Progress(totalUnitCount: -1)
        core = Mutex(Core(machine: DataTaskStateMachine(options: options)))
    }

    /// RFC 9110's idempotent methods: the ones a path change may repeat, when the caller opted in.
    static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]

    // MARK: URLSessionTask's surface

    /// running, suspended or completed (a cancelled data task completes at once).
    public var state: State {
        switch core.withLock({ $0.machine.publicState }) {
        case .running: .running
        case .suspended: .suspended
        case .canceling: .canceling
        case .completed: .completed
        }
    }

    /// The response head, once it arrived (an `HTTPURLResponse`).
    public var response: URLResponse? { core.withLock { $0.response } }
    /// Body bytes received so far.
    public var countOfBytesReceived: Int64 { core.withLock { $0.machine.bytesReceived } }
    /// The body's length from the response, or -1 (`NSURLSessionTransferSizeUnknown`).
    public var countOfBytesExpectedToReceive: Int64 {
        core.withLock { $0.response.map { $0.expectedContentLength } ?? -1 }
    }
    /// Request body bytes sent so far.
    public var countOfBytesSent: Int64 { core.withLock { $0.machine.bytesSent } }
    /// The request body's length (0 without a body).
    public var countOfBytesExpectedToSend: Int64 { core.withLock { $0.machine.bytesExpectedToSend } }
    /// The error the task completed with, once it has.
    public var error: (any Error)? { core.withLock { $0.error } }

    /// A label of your choosing.
    public var taskDescription: String? {
        get { core.withLock { $0.taskDescription } }
        set { core.withLock { $0.taskDescription = newValue } }
    }

    /// 0...1 (`defaultPriority` 0.5); kept for ported code (a data task starts at once).
    public var priority: Float {
        get { core.withLock { $0.priority } }
        set { core.withLock { $0.priority = newValue.isNaN ? ResumableDownloadTask.defaultPriority : min(1, max(0, newValue)) } }
    }

    /// Starts the task (it waits for a usable path first when there is none).
    public func resume() {
        // The path is watched from the first resume to the end; the machine hears the current
        // one before the resume, so a task started offline waits instead of trying.
        let observes = core.withLock { core -> Bool in
            guard core.pathObservation == nil, core.machine.publicState == .suspended else { return false }
            core.pathObservation = session.observePaths { [weak self] in self?.handle(.path($0)) }
            return true
        }
        if observes {
            session.register(self)
            if let path = session.currentPathState() { handle(.path(path)) }
        }
        handle(.resume)
    }

    /// Keeps a task that has not started its request from starting it; once the request runs it
    /// goes on to its end (libcurl cannot hold a response without holding its connection).
    public func suspend() { handle(.suspend) }

    /// Ends the task; the delegate hears `didCompleteWithError` with `URLError.cancelled`.
    public func cancel() { handle(.cancel) }

    /// Ends an upload task and hands `completionHandler` what continues it with
    /// `ResumableURLSession.uploadTask(withResumeData:)`: nil unless the upload runs from a file
    /// to a server that keeps what it received (IETF resumable upload draft or tus) and has
    /// started. The task completes with `URLError.cancelled`, the same data in its `userInfo`.
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        handle(.cancelProducingResumeData, resumeDataCallback: completionHandler)
    }

    /// Whether the task sends a body (an upload task), as `getTasksWithCompletionHandler` sorts them.
    var isUpload: Bool {
        if case .success(let request) = request { return request.body != nil }
        return false
    }

    /// Runs `work` on the delegate queue once the task's completion has been delivered (at once,
    /// on that queue, when it has been already).
    func whenCompletionDelivered(_ work: @escaping @Sendable () -> Void) {
        let now = core.withLock { core -> Bool in
            if core.hasDeliveredCompletion { return true }
            core.afterCompletion.append(work)
            return false
        }
        if now { session.enqueue(work) }
    }

    // MARK: inputs

    /// Feeds the state machine. Delegate calls are queued while the lock is held, so they keep
    /// the machine's order whichever thread (the engine's, the path's, a timer) fed it; starting
    /// and aborting exchanges happens after, since an exchange may report back at once.
    private func handle(_ input: DataTaskStateMachine.Input, attempt: Int? = nil,
                        resumeDataCallback: (@Sendable (Data?) -> Void)? = nil) {
        let work = core.withLock { core -> [Work] in
            if let resumeDataCallback { core.resumeDataCallbacks.append(resumeDataCallback) }
            if let attempt, attempt != core.attempt { return [] }   // an aborted exchange's late events
            var work: [Work] = []
            for action in core.machine.handle(input) { apply(action, &core, &work) }
            return work
        }
        for item in work {
            switch item {
            case .start(let attempt): start(attempt: attempt)
            case .abort(let exchange): exchange.cancel()
            case .stopForResumeData(let exchange): exchange.stopForResumeData()
            case .answer(let allow): handle(.responseAnswered(allow: allow))
            }
        }
    }

    private func apply(_ action: DataTaskStateMachine.Action, _ core: inout Core, _ work: inout [Work]) {
        switch action {
        case .startExchange:
            core.attempt += 1
            work.append(.start(attempt: core.attempt))
        case .abortExchange:
            core.attempt += 1
            if let exchange = core.exchange { work.append(.abort(exchange)) }
            core.exchange = nil
        case .stopExchangeForResumeData:
            // The attempt stays current: its end carries the resume data.
            if let exchange = core.exchange { work.append(.stopForResumeData(exchange)) }
        case .deliverResumeData(let data):
            // On the delegate queue, in order, before the completion (as download tasks do).
            let callbacks = core.resumeDataCallbacks
            core.resumeDataCallbacks = []
            session.enqueue { for callback in callbacks { callback(data) } }
        case .startConnectivityGrace:
            Task { [weak self] in
                try? await Task.sleep(for: DataTaskStateMachine.connectivityGrace)
                self?.handle(.connectivityGraceExpired)
            }
        case .startResourceTimer:
            let timeout = session.configuration.resourceTimeout
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                self?.handle(.resourceTimeoutExpired)
            }
        case .notifyWaitingForConnectivity:
            guard completionHandler == nil else { return }
            session.deliverToDataDelegate { [self] in $0.urlSession(session, taskIsWaitingForConnectivity: self) }
        case .deliverResponse(let head):
            deliverResponse(head, &core, &work)
        case .deliverData(let data):
            progress.completedUnitCount = core.machine.bytesReceived
            guard completionHandler == nil else {
                core.body.append(data)
                return
            }
            session.deliverToDataDelegate { [self] in $0.urlSession(session, dataTask: self, didReceive: data) }
        case .notifySent(let bytes, let total, let expected):
            guard completionHandler == nil else { return }
            session.deliverToDataDelegate { [self] in
                $0.urlSession(session, task: self, didSendBodyData: bytes, totalBytesSent: total, totalBytesExpectedToSend: expected)
            }
        case .complete(let failure):
            complete(failure, &core)
        }
    }

    /// The response head as an `HTTPURLResponse`, to the delegate (which answers whether to go
    /// on) or straight on when nobody asks.
    private func deliverResponse(_ head: DataTaskStateMachine.Response, _ core: inout Core, _ work: inout [Work]) {
        let response = HTTPURLResponse(url: head.url, statusCode: head.statusCode, httpVersion: "HTTP/1.1",
                                       headerFields: head.headers)
        core.response = response
        if let response, response.expectedContentLength >= 0 { progress.totalUnitCount = response.expectedContentLength }
        guard completionHandler == nil, let response, session.hasDataDelegate else {
            work.append(.answer(allow: true))
            return
        }
        session.deliverToDataDelegate { [self] delegate in
            delegate.urlSession(session, dataTask: self, didReceive: response) { [weak self] disposition in
                self?.handle(.responseAnswered(allow: disposition != .cancel))
            }
        }
    }

    /// The task's end: its error kept, paths no longer followed, the completion delivered in order.
    private func complete(_ failure: DataTaskStateMachine.Failure?, _ core: inout Core) {
        let error = failure.map(urlError)
        core.error = error
        if let observation = core.pathObservation { session.stopObservingPaths(observation) }
        core.pathObservation = nil
        let (body, response) = (core.body, core.response)
        core.body = Data()
        session.enqueue { [self] in
            if let completionHandler {
                completionHandler(error == nil ? body : nil, response, error)
            } else {
                session.deliverNowToDataDelegate { $0.urlSession(session, task: self, didCompleteWithError: error) }
            }
            let after = self.core.withLock { core -> [@Sendable () -> Void] in
                core.hasDeliveredCompletion = true
                defer { core.afterCompletion = [] }
                return core.afterCompletion
            }
            for work in after { work() }
            session.unregister(self)
        }
    }

    private func start(attempt: Int) {
        var request: DataExchangeRequest
        let exchanger: any DataExchanger
        switch (self.request, session.exchanger) {
        case (.failure(let failure), _), (_, .failure(let failure)):
            return handle(.exchangeFinished(failure), attempt: attempt)
        case (.success(let checked), .success(let engine)):
            (request, exchanger) = (checked, engine)
            request.taskIdentifier = taskIdentifier
        }
        if session.isInvalidating {
            return handle(.exchangeFinished(.init(code: .cancelled, description: "the session was invalidated")), attempt: attempt)
        }
        let exchange = exchanger.start(request) { [weak self] event in
            guard let self else { return }
            switch event {
            case .response(let head): handle(.response(head), attempt: attempt)
            case .body(let data): handle(.body(data), attempt: attempt)
            case .sent(let bytes, let total): handle(.sent(bytes: bytes, total: total), attempt: attempt)
            case .finished(let failure): handle(.exchangeFinished(failure), attempt: attempt)
            }
        }
        let isCurrent = core.withLock { core -> Bool in
            guard core.attempt == attempt, core.machine.publicState != .completed else { return false }
            core.exchange = exchange
            return true
        }
        if !isCurrent { exchange.cancel() }   // cancelled or lost while it was being started
    }

    private func urlError(_ failure: DataTaskStateMachine.Failure) -> URLError {
        failure.urlError(url: originalRequest?.url)
    }

    /// The request as the exchange takes it: http(s), a method token, headers without line
    /// breaks, a timeout in range. A request body comes from `httpBody` unless the task has one.
    static func check(_ request: URLRequest, body: DataExchangeBody?,
                      configuration: ResumableURLSession.Configuration) -> Result<DataExchangeRequest, DataTaskStateMachine.Failure> {
        guard let url = request.url, let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            return .failure(.init(code: .unsupportedURL, description: "only http and https URLs can be requested: \(request.url?.absoluteString ?? "no URL")"))
        }
        let method = request.httpMethod?.uppercased() ?? "GET"
        guard !method.isEmpty, method.utf8.allSatisfy({ Self.tokenCharacters.contains($0) }) else {
            return .failure(.init(code: .badURL, description: "the request's method \(method) is not an HTTP token"))
        }
        guard request.httpBodyStream == nil else {
            return .failure(.init(code: .unsupportedURL,
                                  description: "a body stream cannot be sent again after a drop: give the body as Data or a file (uploadTask(with:fromFile:))"))
        }
        var headers = configuration.httpAdditionalHeaders ?? [:]
        for (name, value) in request.allHTTPHeaderFields ?? [:] { headers[name] = value }
        // libcurl writes these from the request itself (its body, its URL); a caller's value
        // could only contradict them, and Apple's URLSession ignores them too.
        headers = headers.filter { !Self.requestOwnedHeaders.contains($0.key.lowercased()) }
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            if let problem = HeaderValidation.problem(with: "\(name): \(value)") {
                return .failure(.init(code: .badURL, description: "the request's header \(name): \(problem)"))
            }
        }
        let configured = configuration.requestTimeout
        let own = request.timeoutInterval.isFinite && request.timeoutInterval > 0
            ? max(.milliseconds(1), Duration(clampingTimeInterval: request.timeoutInterval)) : configured
        return .success(DataExchangeRequest(url: url, method: method, headers: headers,
                                            body: body ?? request.httpBody.map { .data($0) }, timeout: min(own, configured)))
    }

    /// Headers the exchange writes from the request itself.
    static let requestOwnedHeaders: Set<String> = ["content-length", "transfer-encoding", "connection", "expect", "host"]

    /// RFC 9110's `tchar`: what a method name may hold.
    private static let tokenCharacters = Set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
}
