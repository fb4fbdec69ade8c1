import Dispatch
import Foundation
import FoundationNetworking
import LinuxSystem
import ReachabilityAgent
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// A background session's one connection to the user's agent: it attaches the session (starting
/// the agent when none runs), sends the tasks and what the process asks of them in order, and
/// turns the agent's events into the session's delegate calls, acknowledging each once the
/// delegate has returned. When the agent goes away (stopped, killed) it connects again, the
/// agent replays what this process has not acknowledged, and what it had handled already is
/// not handed to the delegate twice.
//
// Longer than 400 lines on purpose: one connection's life (attach, reconnect, the tasks it mirrors,
// the ordered events and their acknowledgements, closing) under one lock whose state stays private
// here; the protocol's messages and the agent side are in ReachabilityAgent.
final class BackgroundSessionLink: Sendable {
    enum Phase: Sendable {
        case connecting
        case attached
        /// For good: another process holds the session, or no agent could be started.
        case failed(URLError)
        case closed
    }

    private struct State {
        var session: ResumableURLSession?
        var phase = Phase.connecting
        var connection: AgentConnection?
        /// Sent once attached, in order (an upload's open file with its `createTask`).
        var queued: [(ControlCommand, AgentConnection.Reply, FileDescriptor?)] = []
        /// Tasks of this process that have not completed.
        var tasks: [Int: ResumableDownloadTask] = [:]
        var nextIdentifier = 1
        /// The first attach has an answer: attached (and its replay handed to the delegate
        /// queue), or failed for good.
        var hasFirstOutcome = false
        /// Events received (handed to the delegate queue) and handled (the delegate returned).
        var received: Set<UInt64> = []
        var handled: Set<UInt64> = []
        var isClosing = false
        /// The last reconnect's wait; nil until one fails after an attach (`reconnectBackoff`).
        var lastReconnectDelay: Duration?
        var directory: SessionDirectory?
    }

    let identifier: String
    let configuration: ResumableURLSession.Configuration
    /// The upload tasks' events (BackgroundUploads.swift).
    let uploads = BackgroundUploadRouter()
    private let state: Mutex<State>
    /// Left once when the first attach has an outcome; tasks wait for it to get their
    /// identifiers, and `allTasks` so that a track whose file was replayed is not started again.
    private let firstOutcome = DispatchGroup()

    init(session: ResumableURLSession, identifier: String) {
        self.identifier = identifier
        configuration = session.configuration
        state = Mutex(State(session: session))
        firstOutcome.enter()
    }

    /// The session, until the link is closed.
    var session: ResumableURLSession? { state.withLock { $0.session } }

    var phase: Phase { state.withLock { $0.phase } }

    /// Connects and attaches on a thread of its own.
    func start() {
        SystemThread.detach(name: "bg-session") { [self] in connect() }
    }

    // MARK: connecting

    private func connect() {
        do {
            let connection = try AgentStarter.connect(
                stateDirectory: configuration.stateDirectory.standardizedFileURL.path,
                executable: configuration.agentExecutable?.path, environment: ProcessInfo.processInfo.environment,
                onEvent: { [weak self] event in self?.received(event) },
                onClose: { [weak self] reason in self?.disconnected(reason) })
            let closing = state.withLock { $0.isClosing }
            guard !closing else { connection.close(); return }
            connection.send(.attach(session: identifier, settings: configuration.backgroundSettings)) { [weak self] result in
                self?.attached(connection, result)
            }
        } catch {
            let isFirst = !state.withLock { $0.hasFirstOutcome }
            if isFirst {
                fail(URLError(.backgroundSessionWasDisconnected, userInfo: [
                    NSLocalizedDescriptionKey: "background session '\(identifier)': cannot reach or start the download agent: \(error.message)"]))
            } else {
                reconnectLater()
            }
        }
    }

    /// Reconnects to a lost agent: 50 ms, doubling to 2 s, the package's one back-off.
    static let reconnectBackoff = ExponentialBackoff(initial: .milliseconds(50), maximum: .seconds(2))

    private func reconnectLater() {
        let delay = state.withLock { state -> Duration? in
            guard !state.isClosing, case .connecting = state.phase else { return nil }
            let delay = Self.reconnectBackoff.delay(after: state.lastReconnectDelay)
            state.lastReconnectDelay = delay
            return delay
        }
        guard let delay else { return }
        SystemThread.detach(name: "bg-session") { [self] in
            CurrentProcess.sleep(milliseconds: Int(delay.milliseconds))
            connect()
        }
    }

    /// The attach's answer (on the connection's reader thread, before any event after it).
    private func attached(_ connection: AgentConnection, _ result: Result<ControlResponse, AgentClientError>) {
        guard case .success(let response) = result, let attachment = response.attachment else {
            if case .failure(let error) = result, error == .noReply {
                return   // the connection ended first: disconnected() reconnects
            }
            connection.close()
            fail(attachFailure(connection, result))
            return
        }
        let directory = try? SessionDirectory(root: URL(fileURLWithPath: attachment.downloadsDirectory).deletingLastPathComponent(),
                                              hasRecords: false)
        let (session, known, wasFirst) = state.withLock { state -> (ResumableURLSession?, [Int: ResumableDownloadTask], Bool) in
            state.phase = .attached
            state.connection = connection
            state.lastReconnectDelay = nil
            state.nextIdentifier = max(state.nextIdentifier, attachment.nextTaskIdentifier)
            if state.directory == nil { state.directory = directory }
            // With events to replay, the first outcome waits for their end (`finishedEvents`).
            let isFirst = !state.hasFirstOutcome && attachment.pendingEvents == 0
            if isFirst { state.hasFirstOutcome = true }
            return (state.session, state.tasks, isFirst)
        }
        guard let session else { return }
        // The agent's tasks: the ones this process knows are brought up to date, the others
        // (made by an earlier process) become task objects here.
        var agentKnows = Set<Int>()
        for snapshot in attachment.tasks {
            agentKnows.insert(snapshot.taskIdentifier)
            if snapshot.isUpload == true {
                if !uploads.knows(snapshot.taskIdentifier) { _ = uploads.adopt(snapshot, in: session) }
            } else if let task = known[snapshot.taskIdentifier] {
                task.remote?.update(from: snapshot)
            } else {
                track(makeTask(session, from: snapshot))
            }
        }
        // Tasks this process made that the agent lost (it was killed before writing them): again.
        for (identifier, task) in known where !agentKnows.contains(identifier) && task.remote?.isLive == true {
            connection.send(.createTask(session: self.identifier, spec(for: task)))
            if task.state == .running { connection.send(.taskAction(session: self.identifier, taskIdentifier: identifier, .resume)) }
        }
        let queued = state.withLock { state -> [(ControlCommand, AgentConnection.Reply, FileDescriptor?)] in
            defer { state.queued = [] }
            return state.queued
        }
        for (command, reply, descriptor) in queued {
            connection.send(command, passing: descriptor, reply: reply)
            descriptor?.close()
        }
        if wasFirst { firstOutcome.leave() }
    }

    /// The error a refused attach ends the session with: in use elsewhere, an older agent, or refused.
    private func attachFailure(_ connection: AgentConnection, _ result: Result<ControlResponse, AgentClientError>) -> URLError {
        let message: String
        let code: URLError.Code
        switch result {
        case .failure(let error) where error.agentCode == .sessionInUse:
            (code, message) = (.backgroundSessionInUseByAnotherProcess, error.message)
        case .failure(let error) where error.agentCode == .unknownCommand:
            (code, message) = (.backgroundSessionWasDisconnected,
                               "the agent on \(connection.stateDirectory) is older than this library and has no background sessions; restart it (reachability agent) with this version")
        case .failure(let error):
            (code, message) = (.backgroundSessionWasDisconnected, "the agent refused background session '\(identifier)': \(error.message)")
        case .success:
            (code, message) = (.backgroundSessionWasDisconnected, "the agent's reply to the attach named no session")
        }
        return URLError(code, userInfo: [NSLocalizedDescriptionKey: message])
    }

    /// The connection ended: closed on purpose, or the agent went away (then again).
    private func disconnected(_ reason: AgentClientError) {
        let (closing, failed) = state.withLock { state -> (Bool, Bool) in
            state.connection = nil
            if case .failed = state.phase { return (state.isClosing, true) }
            if !state.isClosing { state.phase = .connecting }
            return (state.isClosing, false)
        }
        if closing { return finishClosing() }
        if !failed { reconnectLater() }
    }

    /// The session cannot work (another process holds it, no agent): every task ends with
    /// `error`, and the delegate hears `didBecomeInvalidWithError(error)`.
    private func fail(_ error: URLError) {
        let (tasks, queued, wasFirst, session) = state.withLock { state in
            state.phase = .failed(error)
            defer { state.tasks = [:]; state.queued = []; state.hasFirstOutcome = true }
            return (Array(state.tasks.values), state.queued, !state.hasFirstOutcome, state.session)
        }
        for (_, reply, descriptor) in queued {
            descriptor?.close()
            reply(.failure(AgentClientError(.noReply, error.localizedDescription)))
        }
        for task in tasks { task.remote?.abandoned(error) }
        if wasFirst { firstOutcome.leave() }
        session?.backgroundSessionFailed(error)
    }

    // MARK: tasks

    /// Waits (bounded) for the first attach, then hands out the next identifier: the agent's
    /// tasks keep theirs, so a later process sees the same numbers.
    func makeIdentifier() -> Int {
        _ = firstOutcome.wait(timeout: .now() + .seconds(30))
        return state.withLock { state in
            defer { state.nextIdentifier += 1 }
            return state.nextIdentifier
        }
    }

    /// A new task: known here, and created in the agent (suspended until resumed).
    func created(_ task: ResumableDownloadTask) {
        track(task)
        if case .failed(let error) = phase {
            task.remote?.abandoned(error)
            return
        }
        send(.createTask(session: identifier, spec(for: task))) { [weak task] result in
            guard case .failure(let error) = result, error != .noReply, let task else { return }
            task.remote?.abandoned(URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: error.message,
                                                                NSURLErrorFailingURLErrorKey: task.originalRequest?.url as Any]))
        }
    }

    /// A new upload task, created in the agent with its open file (this link closes it once
    /// sent) and resumed; `refused` hears why the agent would not take it.
    func createUpload(_ spec: BackgroundTaskSpec, file: FileDescriptor, refused: @escaping @Sendable (String) -> Void) {
        if case .failed(let error) = phase {
            file.close()
            return refused(error.localizedDescription)
        }
        send(.createTask(session: identifier, spec), passing: file) { result in
            guard case .failure(let error) = result, error != .noReply else { return }
            refused(error.message)
        }
        perform(.resume, on: spec.taskIdentifier)
    }

    /// An upload task's end was handled (its delegate returned): the agent may let it go.
    func acknowledgeUpload(_ sequence: UInt64) {
        state.withLock { _ = $0.handled.insert(sequence) }
        send(.acknowledge(session: identifier, sequence: sequence))
    }

    func perform(_ action: BackgroundTaskAction, on identifier: Int) {
        send(.taskAction(session: self.identifier, taskIdentifier: identifier, action))
    }

    func update(_ identifier: Int, _ hints: ResumableDownloadTask.Hints) {
        send(.updateTask(session: self.identifier, taskIdentifier: identifier, BackgroundTaskChanges(
            taskDescription: hints.taskDescription, earliestBeginDate: hints.earliestBeginDate?.timeIntervalSince1970,
            expectedBytes: hints.countOfBytesClientExpectsToReceive, priority: hints.priority)))
    }

    /// The delegate handled event `sequence` (on the delegate queue): the agent may let it go.
    func acknowledge(_ sequence: UInt64, completing task: ResumableDownloadTask) {
        state.withLock { state in
            state.handled.insert(sequence)
            if state.tasks[task.taskIdentifier] === task { state.tasks[task.taskIdentifier] = nil }
        }
        send(.acknowledge(session: identifier, sequence: sequence))
        session?.unregister(task)
    }

    /// The tasks not completed, in identifier order.
    var liveTasks: [ResumableDownloadTask] {
        state.withLock { Array($0.tasks.values) }.filter { $0.remote?.isLive == true }.sorted { $0.taskIdentifier < $1.taskIdentifier }
    }

    /// Waits for the first attach (for `allTasks` right after the session is made).
    func waitUntilAttachedOnce() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            firstOutcome.notify(queue: .global()) { continuation.resume() }
        }
    }

    private func track(_ task: ResumableDownloadTask) {
        let session = state.withLock { state -> ResumableURLSession? in
            state.tasks[task.taskIdentifier] = task
            return state.session
        }
        session?.register(task)
    }

    private func makeTask(_ session: ResumableURLSession, from snapshot: BackgroundTaskSnapshot) -> ResumableDownloadTask {
        let remote = BackgroundTask(link: self, identifier: snapshot.taskIdentifier, isFromResumeData: false)
        var hints = ResumableDownloadTask.Hints()
        hints.taskDescription = snapshot.taskDescription
        hints.earliestBeginDate = snapshot.earliestBeginDate.map(Date.init(timeIntervalSince1970:))
        hints.countOfBytesClientExpectsToReceive = snapshot.expectedBytes
        hints.priority = snapshot.priority
        let url = URL(string: snapshot.url) ?? URL(fileURLWithPath: "/")
        let task = ResumableDownloadTask(session: session, identifier: snapshot.taskIdentifier, source: .request(URLRequest(url: url)),
                                         remote: remote, hints: hints)
        remote.update(from: snapshot)
        return task
    }

    private func spec(for task: ResumableDownloadTask) -> BackgroundTaskSpec {
        let hints = task.hints.withLock { $0 }
        var spec = BackgroundTaskSpec(taskIdentifier: task.taskIdentifier, url: task.originalRequest?.url?.absoluteString ?? "")
        spec.taskDescription = hints.taskDescription
        spec.earliestBeginDate = hints.earliestBeginDate?.timeIntervalSince1970
        spec.expectedBytes = hints.countOfBytesClientExpectsToReceive
        spec.priority = hints.priority
        switch task.source {
        case .request(let request):
            spec.headers = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
            if request.timeoutInterval.isFinite, request.timeoutInterval > 0, request.timeoutInterval < configuration.timeoutIntervalForRequest {
                spec.timeout = request.timeoutInterval
            }
        case .resumeData(.success(let data), _):
            spec.resumeState = resumeState(for: data)
        case .resumeData(.failure, _):
            break
        }
        return spec
    }

    // MARK: events (on the connection's reader thread, in order)

    private func received(_ event: BackgroundEvent) {
        guard let session else { return }
        if event.kind == .finishedEvents {
            // After the replayed upload ends reach their delegate (a data delegate's response
            // answer can put a task's completion behind this line on the queue).
            uploads.whenEndsDelivered {
                session.enqueue { [session] in session.delegate?.urlSessionDidFinishEvents(forBackgroundURLSession: session) }
            }
            let isFirst = state.withLock { state -> Bool in
                defer { state.hasFirstOutcome = true }
                return !state.hasFirstOutcome
            }
            if isFirst { firstOutcome.leave() }
            return
        }
        guard let snapshot = event.task else { return }
        if snapshot.isUpload == true { return receivedUpload(event, snapshot, session) }
        let known = state.withLock { $0.tasks[snapshot.taskIdentifier] }
        switch event.kind {
        case .progress:
            known?.remote?.progressed(to: event.bytes ?? snapshot.bytesReceived, of: event.total ?? snapshot.totalBytes)
        case .resumed:
            known?.remote?.resumed(at: event.bytes ?? 0, of: event.total ?? snapshot.totalBytes)
        case .waitingForConnectivity:
            known?.remote?.waitingForConnectivity()
        case .finished, .failed:
            guard let sequence = event.sequence else { return }
            let seen = state.withLock { state -> (received: Bool, handled: Bool) in
                (!state.received.insert(sequence).inserted, state.handled.contains(sequence))
            }
            if seen.handled {
                // Handled before the agent went away, the acknowledgement lost with it.
                send(.acknowledge(session: identifier, sequence: sequence))
                return
            }
            if seen.received { return }   // on the delegate queue already; acknowledged from there
            let task = known ?? {
                // Made by an earlier process: a task object for the delegate call.
                let ghost = makeTask(session, from: snapshot)
                return ghost
            }()
            if event.kind == .finished, let location = event.location {
                task.remote?.finished(at: URL(fileURLWithPath: location), sequence: sequence, total: snapshot.totalBytes)
            } else {
                let failure = event.failure ?? BackgroundFailure(code: URLError.Code.unknown.rawValue, message: "the agent gave no reason")
                let resumeData = failure.resumeState.flatMap { makeResumeData($0) }
                task.remote?.failed(urlError(failure, resumeData: resumeData, url: task.originalRequest?.url),
                                    resumeData: resumeData, sequence: sequence)
            }
        case .finishedEvents:
            break
        }
    }

    /// An upload task's event: its end once (as for downloads: handled ones are acknowledged
    /// again, ones on the delegate queue already are not handed over twice).
    private func receivedUpload(_ event: BackgroundEvent, _ snapshot: BackgroundTaskSnapshot, _ session: ResumableURLSession) {
        if let sequence = event.sequence {
            let seen = state.withLock { state -> (received: Bool, handled: Bool) in
                (!state.received.insert(sequence).inserted, state.handled.contains(sequence))
            }
            if seen.handled { return send(.acknowledge(session: identifier, sequence: sequence)) }
            if seen.received { return }
            // Made by an earlier process: a task object for the delegate calls.
            if !uploads.knows(snapshot.taskIdentifier) { _ = uploads.adopt(snapshot, in: session) }
        }
        uploads.handle(event, on: self)
    }

    private func urlError(_ failure: BackgroundFailure, resumeData: Data?, url: URL?) -> URLError {
        var info: [String: Any] = [NSLocalizedDescriptionKey: failure.message]
        if let url { info[NSURLErrorFailingURLErrorKey] = url }
        if let resumeData { info[NSURLSessionDownloadTaskResumeData] = resumeData }
        return URLError(URLError.Code(rawValue: failure.code) ?? .unknown, userInfo: info)
    }

    // MARK: resume data

    /// The background directory (`STATE/background`): its key signs background resume data.
    var directory: SessionDirectory? {
        if let directory = state.withLock({ $0.directory }) { return directory }
        let opened = try? SessionDirectory(root: configuration.stateDirectory.appendingPathComponent("background", isDirectory: true),
                                           hasRecords: false)
        state.withLock { if $0.directory == nil { $0.directory = opened } }
        return state.withLock { $0.directory }
    }

    /// Resume data (the same format as other sessions', signed with the background key) for a
    /// transfer the agent stopped: its whole state, segment ranges and seams included.
    func makeResumeData(_ resumeState: ResumeState) -> Data? {
        directory.flatMap { ResumeData.make(for: resumeState, in: $0) }
    }

    /// What the agent continues from for resume data (checked against its partial file).
    private func resumeState(for data: ResumeData) -> ResumeState? {
        guard let directory else { return nil }
        return try? data.continuedState(in: directory)
    }

    // MARK: sending

    /// Sends now when attached, else once attached; dropped with a failure when the link failed.
    /// `descriptor` travels with the command, and is closed once sent (or dropped).
    private func send(_ command: ControlCommand, passing descriptor: FileDescriptor? = nil,
                      reply: @escaping AgentConnection.Reply = { _ in }) {
        let connection = state.withLock { state -> AgentConnection?? in
            switch state.phase {
            case .attached: return .some(state.connection)
            case .connecting:
                state.queued.append((command, reply, descriptor))
                return .some(nil)
            case .failed, .closed: return nil
            }
        }
        switch connection {
        case .some(.some(let connection)):
            connection.send(command, passing: descriptor, reply: reply)
            descriptor?.close()
        case .some(.none): break
        case .none:
            descriptor?.close()
            reply(.failure(AgentClientError(.noReply, "background session '\(identifier)' is not connected to the agent")))
        }
    }

    /// `invalidateAndCancel()`: the agent cancels every task (their events follow).
    func invalidate() {
        send(.invalidate(session: identifier))
    }

    /// Detaches from the agent (the session is done); `session.backgroundLinkClosed()` follows.
    func close() {
        let connection = state.withLock { state -> AgentConnection? in
            state.isClosing = true
            return state.connection
        }
        if let connection { connection.close() } else { finishClosing() }
    }

    private func finishClosing() {
        let session = state.withLock { state -> ResumableURLSession? in
            guard !(state.phase.isClosed) else { return nil }
            state.phase = .closed
            defer { state.session = nil; state.tasks = [:] }
            return state.session
        }
        session?.backgroundLinkClosed()
    }
}

extension BackgroundSessionLink.Phase {
    var isClosed: Bool { if case .closed = self { true } else { false } }
}
