import Foundation
import FoundationNetworking
import LinuxSystem
import ReachabilityAgent
import Synchronization

/// A background session's transport for upload tasks (issue 28): the task runs in the agent,
/// which owns it as it owns download tasks. `start` opens the file here (so a file this process
/// may not read, a directory or a FIFO is refused before the agent hears of it), creates the
/// task in the agent with the open file passed along (SCM_RIGHTS) and resumes it; the agent's
/// events come back through `BackgroundUploadRouter` as the exchange's events.
///
/// As on Apple platforms a background session uploads from a file only: a body from `Data` (or
/// no body: a data task) fails the task with `unsupportedURL` and says what to do instead.
struct BackgroundUploadExchanger: DataExchanger {
    let link: BackgroundLinkReference

    var runsResumableUploads: Bool { true }

    func start(_ request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange {
        let refuse = { (code: URLError.Code, description: String) -> any DataExchange in
            events(.finished(.init(code: code, description: description)))
            return NoExchange()
        }
        guard let link = link.value else {
            return refuse(.backgroundSessionWasDisconnected, "the background session is closed")
        }
        switch request.body {
        case nil:
            return refuse(.unsupportedURL, "a background session runs download and upload tasks only: make requests with a default session")
        case .data:
            return refuse(.unsupportedURL, "a background session uploads from a file only, as on Apple platforms (where uploadTask(with:from:) raises): write the body to a file and use uploadTask(with:fromFile:)")
        case .file(let url):
            return link.uploads.start(request, file: url, on: link, events: events)
        }
    }

    private struct NoExchange: DataExchange {
        func cancel() {}
    }
}

/// The session's link, once it exists (the exchanger is made before it).
final class BackgroundLinkReference: Sendable {
    private let link = Mutex<BackgroundSessionLink?>(nil)
    var value: BackgroundSessionLink? { link.withLock { $0 } }
    func set(_ value: BackgroundSessionLink) { link.withLock { $0 = value } }
}

/// The agent's events for a background session's upload tasks, routed to the task running the
/// exchange: its own, or for a task an earlier process made, a task object made here and
/// resumed (`adopt`), whose exchange then hears what the agent kept for it (the server's
/// response, then the end) and acknowledges it once the delegate's `didCompleteWithError` returned.
final class BackgroundUploadRouter: Sendable {
    private struct State {
        /// Each running exchange's events, by task identifier.
        var sinks: [Int: @Sendable (DataExchangeEvent) -> Void] = [:]
        /// Tasks the agent has (made by an earlier process) that this process mirrors.
        var adopted: Set<Int> = []
        /// Their events until their exchange starts.
        var backlog: [Int: [BackgroundEvent]] = [:]
        /// Ends handed to tasks whose delegate has not heard them yet, and what waits for them
        /// (`urlSessionDidFinishEvents` comes after every replayed end, as on Apple platforms).
        var endsInFlight = 0
        var whenDelivered: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())

    func start(_ request: DataExchangeRequest, file: URL, on link: BackgroundSessionLink,
               events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange {
        let identifier = request.taskIdentifier
        let exchange = Exchange(link: link, identifier: identifier)
        let backlog = state.withLock { state -> [BackgroundEvent]? in
            state.sinks[identifier] = events
            guard state.adopted.contains(identifier) else { return nil }
            defer { state.backlog[identifier] = nil }
            return state.backlog[identifier] ?? []
        }
        if let backlog {
            // The agent runs it already: only listen.
            for event in backlog { handle(event, on: link) }
            return exchange
        }
        let opened: UploadSourceFile
        switch UploadSourceFile.open(file.path) {
        case .success(let file): opened = file
        case .failure(let problem):
            state.withLock { _ = $0.sinks.removeValue(forKey: identifier) }
            events(.finished(.init(problem)))
            return exchange
        }
        var spec = BackgroundTaskSpec(taskIdentifier: identifier, url: request.url.absoluteString)
        spec.headers = request.headers.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
        let seconds = Double(request.timeout.components.seconds) + Double(request.timeout.components.attoseconds) / 1e18
        if seconds > 0, seconds < link.configuration.timeoutIntervalForRequest { spec.timeout = seconds }
        spec.upload = BackgroundUploadSpec(file: opened.path, method: request.method)
        // From resume data: the agent asks the server its offset and sends only the rest.
        spec.upload?.resume = request.upload?.resuming
        link.createUpload(spec, file: opened.descriptor) { [weak self] message in
            guard let sink = self?.state.withLock({ $0.sinks.removeValue(forKey: identifier) }) else { return }
            sink(.finished(.init(code: .cannotOpenFile, description: "the agent refused the upload task: \(message)")))
        }
        return exchange
    }

    /// A live upload task the agent reported at attach, made by an earlier process: a task
    /// object here, resumed so that its progress and end reach the delegate.
    func adopt(_ snapshot: BackgroundTaskSnapshot, in session: ResumableURLSession) -> ResumableDataTask {
        let isNew = state.withLock { state -> Bool in
            guard state.sinks[snapshot.taskIdentifier] == nil else { return false }
            let isNew = state.adopted.insert(snapshot.taskIdentifier).inserted
            // Where it is now: countOfBytesSent and the expected length before the next progress.
            state.backlog[snapshot.taskIdentifier, default: []].insert(
                BackgroundEvent(kind: .progress, task: snapshot, bytes: snapshot.bytesReceived, total: snapshot.totalBytes), at: 0)
            return isNew
        }
        var request = URLRequest(url: URL(string: snapshot.url) ?? URL(fileURLWithPath: "/"))
        request.httpMethod = "POST"
        let task = ResumableDataTask(session: session, identifier: snapshot.taskIdentifier, request: request,
                                     body: .file(URL(fileURLWithPath: snapshot.uploadFile ?? "/")), completionHandler: nil)
        task.taskDescription = snapshot.taskDescription
        if isNew { task.resume() }
        return task
    }

    /// Whether the router has an exchange (or an adopted task) for `identifier`.
    func knows(_ identifier: Int) -> Bool {
        state.withLock { $0.sinks[identifier] != nil || $0.adopted.contains(identifier) }
    }

    /// An event of the agent for upload task `identifier` (on the connection's reader thread, in order).
    func handle(_ event: BackgroundEvent, on link: BackgroundSessionLink) {
        guard let snapshot = event.task else { return }
        let identifier = snapshot.taskIdentifier
        let sink = state.withLock { state -> (@Sendable (DataExchangeEvent) -> Void)? in
            if let sink = state.sinks[identifier] { return sink }
            if state.adopted.contains(identifier) { state.backlog[identifier, default: []].append(event) }
            return nil
        }
        guard let sink else { return }
        switch event.kind {
        case .progress:
            sink(.sent(bytes: event.bytes ?? snapshot.bytesReceived, total: event.total ?? snapshot.totalBytes))
        case .finished, .failed:
            guard let sequence = event.sequence else { return }
            state.withLock { state in
                state.sinks[identifier] = nil
                state.adopted.remove(identifier)
                state.endsInFlight += 1
            }
            if event.kind == .finished, let response = event.response {
                if let total = snapshot.totalBytes { sink(.sent(bytes: total, total: total)) }
                let url = URL(string: snapshot.url) ?? URL(fileURLWithPath: "/")
                sink(.response(.init(statusCode: response.statusCode, headers: response.headers, url: url)))
                if !response.body.isEmpty { sink(.body(response.body)) }
                sink(.finished(nil))
            } else {
                let failure = event.failure ?? BackgroundFailure(code: URLError.Code.unknown.rawValue, message: "the agent gave no reason")
                var ended = DataTaskStateMachine.Failure(code: URLError.Code(rawValue: failure.code) ?? .unknown, description: failure.message)
                // Signed with the background directory's key, as download resume data is.
                if let resume = failure.uploadResume, let key = link.directory?.key {
                    ended.uploadResumeData = try? UploadResumeData.encoded(resume, key: key)
                }
                sink(.finished(ended))
            }
            // Acknowledged once the delegate has heard the end: a process killed before that
            // gets it again at its next attach.
            let delivered: @Sendable () -> Void = { [self] in
                link.acknowledgeUpload(sequence)
                endDelivered()
            }
            if let task = link.session?.registeredDataTask(identifier) {
                task.whenCompletionDelivered(delivered)
            } else {
                link.session?.enqueue(delivered)
            }
        case .resumed, .waitingForConnectivity, .finishedEvents:
            break
        }
    }

    /// Runs `work` once every end handed to a task has reached its delegate (at once when none waits).
    func whenEndsDelivered(_ work: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            guard state.endsInFlight > 0 else { return true }
            state.whenDelivered.append(work)
            return false
        }
        if now { work() }
    }

    private func endDelivered() {
        let waiting = state.withLock { state -> [@Sendable () -> Void] in
            state.endsInFlight -= 1
            guard state.endsInFlight == 0 else { return [] }
            defer { state.whenDelivered = [] }
            return state.whenDelivered
        }
        for work in waiting { work() }
    }

    /// Cancelling the exchange cancels the agent's task (its `failed` event ends the exchange);
    /// stopping it for resume data asks the agent for where the server holds the upload.
    private struct Exchange: DataExchange {
        let link: BackgroundSessionLink
        let identifier: Int
        func cancel() { link.perform(.cancel, on: identifier) }
        func stopForResumeData() { link.perform(.cancelProducingResumeData, on: identifier) }
    }
}
