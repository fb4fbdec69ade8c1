import Foundation
import FoundationNetworking
import LinuxReachability
import ReachabilityAgent
import ResumableDownloads
import Synchronization

/// URLSession's download API on Linux, with resume data that works.
///
/// Code written against `URLSession` / `URLSessionDownloadDelegate` ports by renaming the types:
/// `downloadTask(with:)`, `downloadTask(withResumeData:)`, `resume()`, `suspend()`, `cancel()`,
/// `cancel(byProducingResumeData:)`, and a delegate called on `delegateQueue`. Underneath, the
/// resume engine (`ResumableDownloads`) transfers through libcurl and watches the network path
/// (`PathMonitor`): a link that drops mid-transfer ends the task at once with
/// `URLError.networkConnectionLost` (-1005) and resume data in its `userInfo`, instead of the
/// 60-second `-1001` and nil resume data of Foundation's URLSession on Linux.
///
/// Resume data is a self-contained, versioned `Data` value: write it to disk, read it back in a
/// later process, and `downloadTask(withResumeData:)` continues from the stored bytes. It is
/// authenticated with a key kept in the state directory, so data that was altered, or made with
/// another state directory, is refused with a clear error (`ResumeDataError`), and it never names
/// a path: the partial file lives in the session's own directory under the download's id.
//
// Longer than 400 lines on purpose: URLSession's public surface reads in one place, in Apple's
// order, over one lock; the configuration, the async forms, tasks and the background link are
// their own files.
public final class ResumableURLSession: Sendable {
    /// The configuration the session was created with (a copy).
    public let configuration: Configuration
    /// Where delegate calls and completion handlers run; serial unless you passed another queue.
    public let delegateQueue: OperationQueue

    struct Engine: Sendable {
        let directory: SessionDirectory
        let agent: DownloadAgent
        let monitor: PathMonitor?
    }

    /// Where path updates come from: the real monitor, or (tests) a scripted stream or none.
    enum PathSource: Sendable {
        case monitor
        case stream(AsyncStream<NetworkPath>)
        case assumeConnected
    }

    private struct State {
        var delegate: (any ResumableURLSessionDelegate)?
        var sessionDescription: String?
        var tasks: [Int: ResumableDownloadTask] = [:]
        var dataTasks: [Int: ResumableDataTask] = [:]
        /// Data tasks watching the path, by observation.
        var pathObservers: [UUID: @Sendable (DataTaskStateMachine.PathState) -> Void] = [:]
        var isInvalidating = false
        var shutdown: Task<Void, Never>?
        var isInvalidated = false
        var invalidationWaiters: [CheckedContinuation<Void, Never>] = []
    }

    let engine: Result<Engine, DownloadTaskStateMachine.Failure>
    /// What runs data and upload tasks' requests (in this process, also for background sessions).
    let exchanger: Result<any DataExchanger, DownloadTaskStateMachine.Failure>
    /// A background session's connection to the agent (nil for other sessions, and for a
    /// background configuration that cannot be used, whose tasks then fail with the reason).
    private let backgroundLink = Mutex<BackgroundSessionLink?>(nil)
    private let state: Mutex<State>
    private let nextIdentifier = Atomic<Int>(0)
    private let latestPath = PathRecorder()

    /// The last path the engine was given, for `networkUnavailableReason`, and whoever else
    /// follows the engine's paths (data tasks: the same signal downloads follow).
    final class PathRecorder: Sendable {
        private let state = Mutex<(latest: NetworkPath?, observers: [UUID: @Sendable (NetworkPath) -> Void])>((nil, [:]))
        var latest: NetworkPath? { state.withLock { $0.latest } }
        func record(_ latest: NetworkPath) -> NetworkPath {
            let observers = state.withLock { state in
                state.latest = latest
                return Array(state.observers.values)
            }
            for observer in observers { observer(latest) }
            return latest
        }

        func observe(_ observer: @escaping @Sendable (NetworkPath) -> Void) -> UUID {
            let id = UUID()
            state.withLock { $0.observers[id] = observer }
            return id
        }

        func stopObserving(_ id: UUID) {
            _ = state.withLock { $0.observers.removeValue(forKey: id) }
        }
    }

    /// Creates a session. `delegate` is held strongly until the session is invalidated;
    /// `delegateQueue` nil makes a serial queue. Failures to set up the state directory or the
    /// engine do not throw here: every task then completes with them.
    public convenience init(configuration: Configuration = .default,
                            delegate: (any ResumableURLSessionDelegate)? = nil,
                            delegateQueue: OperationQueue? = nil) {
        self.init(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue, pathSource: .monitor, exchanger: nil)
    }

    /// The same, with delegate calls on a dispatch queue (serial, for ordered calls).
    public convenience init(configuration: Configuration = .default,
                            delegate: (any ResumableURLSessionDelegate)?,
                            delegateDispatchQueue: DispatchQueue) {
        let queue = OperationQueue()
        queue.underlyingQueue = delegateDispatchQueue
        queue.maxConcurrentOperationCount = 1
        self.init(configuration: configuration, delegate: delegate, delegateQueue: queue, pathSource: .monitor, exchanger: nil)
    }

    init(configuration: Configuration, delegate: (any ResumableURLSessionDelegate)?,
         delegateQueue: OperationQueue?, pathSource: PathSource, exchanger: (any DataExchanger)? = nil) {
        self.configuration = configuration
        if let delegateQueue {
            self.delegateQueue = delegateQueue
        } else {
            let queue = OperationQueue()
            queue.name = "ResumableURLSession delegate queue"
            queue.maxConcurrentOperationCount = 1
            self.delegateQueue = queue
        }
        state = Mutex(State(delegate: delegate))
        if configuration.isBackground {
            engine = .failure(.init(code: .backgroundSessionWasDisconnected,
                                    description: configuration.problem ?? "a background session's tasks run in the agent"))
            // As on Apple platforms, where a background session takes upload and download tasks
            // only: uploads from a file run in the agent (BackgroundUploadExchanger).
            let reference = BackgroundLinkReference()
            self.exchanger = exchanger.map { .success($0) } ?? .success(BackgroundUploadExchanger(link: reference))
            if configuration.problem == nil {
                let link = BackgroundSessionLink(session: self, identifier: configuration.identifier ?? "")
                backgroundLink.withLock { $0 = link }
                reference.set(link)
                link.start()
            }
        } else {
            let engine = Self.makeEngine(configuration, pathSource: pathSource, latestPath: latestPath)
            self.engine = engine
            self.exchanger = exchanger.map { .success($0) } ?? engine.map { AgentExchanger(agent: $0.agent, directory: $0.directory) }
        }
    }

    deinit {
        // Only reached with no task running (running tasks hold their session).
        if case .success(let engine) = engine, state.withLock({ $0.shutdown == nil }) {
            let agent = engine.agent
            Task { await agent.shutdown() }
            engine.monitor?.cancel()
        }
    }

    /// The delegate (a `ResumableURLSessionDownloadDelegate`, a `ResumableURLSessionDataDelegate`,
    /// or both); nil after invalidation.
    public var delegate: (any ResumableURLSessionDelegate)? { state.withLock { $0.delegate } }

    /// The delegate, when it handles download tasks.
    var downloadDelegate: (any ResumableURLSessionDownloadDelegate)? { delegate as? any ResumableURLSessionDownloadDelegate }

    /// A label of your choosing.
    public var sessionDescription: String? {
        get { state.withLock { $0.sessionDescription } }
        set { state.withLock { $0.sessionDescription = newValue } }
    }

    /// A suspended task that downloads `url`; call `resume()` to start it.
    public func downloadTask(with url: URL) -> ResumableDownloadTask {
        downloadTask(with: URLRequest(url: url))
    }

    /// A suspended task for `request`: a GET (another method, or a body, fails the task with
    /// `unsupportedURL`), its headers sent with every attempt (`Range`, `If-Range` and the like,
    /// which resuming owns, fail it with `badURL`), its `timeoutInterval` used when shorter than
    /// `timeoutIntervalForRequest`. In a background session the agent keeps the headers with
    /// the task (in its state directory, 0600) so it can go on without this process.
    public func downloadTask(with request: URLRequest) -> ResumableDownloadTask {
        makeTask(.request(request), completionHandler: nil)
    }

    /// A task whose outcome goes to `completionHandler` instead of the delegate: the file (valid
    /// during the call, deleted afterwards, as on Apple platforms) and a response, or the error.
    /// Call `resume()` to start it. In a background session the handler is called while this
    /// process lives; a later process gets the outcome through its delegate.
    public func downloadTask(with url: URL,
                             completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> ResumableDownloadTask {
        downloadTask(with: URLRequest(url: url), completionHandler: completionHandler)
    }

    /// `downloadTask(with:completionHandler:)` for a request.
    public func downloadTask(with request: URLRequest,
                             completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> ResumableDownloadTask {
        makeTask(.request(request), completionHandler: completionHandler)
    }

    /// `downloadTask(withResumeData:completionHandler:)`: resume data's task, outcome to the handler.
    public func downloadTask(withResumeData resumeData: Data,
                             completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> ResumableDownloadTask {
        makeTask(decodeResumeData(resumeData), completionHandler: completionHandler)
    }

    /// Every task kind goes through here: a background session's tasks are the agent's.
    private func makeTask(_ source: ResumableDownloadTask.Source,
                          completionHandler: (@Sendable (URL?, URLResponse?, (any Error)?) -> Void)?) -> ResumableDownloadTask {
        guard let link = backgroundLink.withLock({ $0 }), !source.isUnreadableResumeData else {
            return ResumableDownloadTask(session: self, identifier: makeIdentifier(), source: source, completionHandler: completionHandler)
        }
        let identifier = link.makeIdentifier()
        var isFromResumeData = false
        if case .resumeData(.success, _) = source { isFromResumeData = true }
        let remote = BackgroundTask(link: link, identifier: identifier, isFromResumeData: isFromResumeData)
        let task = ResumableDownloadTask(session: self, identifier: identifier, source: source, completionHandler: completionHandler,
                                         remote: remote)
        link.created(task)
        return task
    }

    /// A suspended task that continues the download `resumeData` describes (from a failed task's
    /// `URLError`, or `cancel(byProducingResumeData:)`, in this process or an earlier one). Data
    /// that was altered, made elsewhere, or no longer matches its partial file makes the task
    /// complete with `URLError.cannotWriteToFile` whose underlying error is a `ResumeDataError`;
    /// data whose partial file is gone restarts the download from zero (the delegate hears
    /// `didResumeAtOffset` 0).
    public func downloadTask(withResumeData resumeData: Data) -> ResumableDownloadTask {
        makeTask(decodeResumeData(resumeData), completionHandler: nil)
    }

    /// The key that signs this session's resume data (a background session's: `STATE/background`'s).
    func resumeDataKey() -> Result<[UInt8], ResumeDataError> {
        if let link = backgroundLink.withLock({ $0 }) {
            guard let directory = link.directory else { return .failure(.malformed.with("the background state directory cannot be used")) }
            return .success(directory.key)
        }
        switch engine {
        case .success(let engine): return .success(engine.directory.key)
        // The task completes with the storage failure when resumed.
        case .failure(let failure): return .failure(.malformed.with(failure.description))
        }
    }

    /// Resume data checked with this session's key.
    private func decodeResumeData(_ resumeData: Data) -> ResumableDownloadTask.Source {
        let key: [UInt8]
        switch resumeDataKey() {
        case .success(let found): key = found
        case .failure(let error): return .resumeData(.failure(error), original: resumeData)
        }
        do {
            return .resumeData(.success(try ResumeData.decode(resumeData, key: key)), original: resumeData)
        } catch let error as ResumeDataError {
            return .resumeData(.failure(error), original: resumeData)
        } catch {
            return .resumeData(.failure(.malformed.with("\(error)")), original: resumeData)
        }
    }

    /// The tasks that have not completed: in a background session every task of the session
    /// (also those made by an earlier process, and the ones not started yet), once attached;
    /// in other sessions the ones resumed in this process.
    public var allTasks: [ResumableDownloadTask] {
        get async {
            if let link = backgroundLink.withLock({ $0 }) {
                await link.waitUntilAttachedOnce()
                return link.liveTasks
            }
            return state.withLock { $0.tasks.values.sorted { $0.taskIdentifier < $1.taskIdentifier } }
        }
    }

    /// The same as `allTasks` (URLSession's spelling).
    public func getAllTasks() async -> [ResumableDownloadTask] { await allTasks }

    /// `allTasks`, handed to `completionHandler` on the delegate queue.
    public func getAllTasks(completionHandler: @escaping @Sendable ([ResumableDownloadTask]) -> Void) {
        Task {
            let tasks = await allTasks
            enqueue { completionHandler(tasks) }
        }
    }

    /// URLSession's three lists of tasks that have not completed: data tasks and upload tasks
    /// resumed in this process (in a background session, also the upload tasks the agent runs
    /// for an earlier process of the session, once attached), and `allTasks`.
    public var tasks: ([ResumableDataTask], [ResumableUploadTask], [ResumableDownloadTask]) {
        get async {
            let downloads = await allTasks
            let running = state.withLock { $0.dataTasks.values.sorted { $0.taskIdentifier < $1.taskIdentifier } }
                .filter { $0.state != .completed }
            return (running.filter { !$0.isUpload }, running.filter(\.isUpload), downloads)
        }
    }

    /// `tasks`, handed to `completionHandler` on the delegate queue.
    public func getTasksWithCompletionHandler(
        _ completionHandler: @escaping @Sendable ([ResumableDataTask], [ResumableUploadTask], [ResumableDownloadTask]) -> Void) {
        Task {
            let (data, uploads, downloads) = await tasks
            enqueue { completionHandler(data, uploads, downloads) }
        }
    }

    /// Lets running tasks finish, accepts no new ones, then calls `didBecomeInvalidWithError`
    /// and releases the delegate and the engine.
    public func finishTasksAndInvalidate() {
        state.withLock { $0.isInvalidating = true }
        finishInvalidationIfIdle()
    }

    /// Cancels every task (each delegate hears `URLError.cancelled`), then invalidates as
    /// `finishTasksAndInvalidate()` does.
    public func invalidateAndCancel() {
        let (tasks, dataTasks) = state.withLock { state in
            state.isInvalidating = true
            return (Array(state.tasks.values), Array(state.dataTasks.values))
        }
        // Data tasks run in this process, also in a background session.
        for task in dataTasks { task.cancel() }
        if let link = backgroundLink.withLock({ $0 }) {
            // The agent cancels every task of the session, this process's and earlier ones'.
            link.invalidate()
        } else {
            for task in tasks { task.cancel() }
        }
        finishInvalidationIfIdle()
    }

    // MARK: internal

    /// The state directory, when it could be set up.
    var directory: SessionDirectory? {
        if case .success(let engine) = engine { return engine.directory }
        return nil
    }

    /// Whether tasks may use expensive (cellular-like or metered) paths.
    var allowsExpensive: Bool {
        configuration.allowsExpensiveNetworkAccess && configuration.allowsCellularAccess && !configuration.isDiscretionary
    }

    /// Whether tasks may use a roaming modem.
    var allowsRoaming: Bool { configuration.allowsRoaming && !configuration.isDiscretionary }

    /// Whether tasks may use a link the user asked to save data on (NetworkManager `Metered=yes`).
    var allowsConstrained: Bool { configuration.allowsConstrainedNetworkAccess && !configuration.isDiscretionary }

    /// Why the current path is unusable because of the configuration's access rules, if it is.
    func networkUnavailableReason() -> URLError.NetworkUnavailableReason? {
        latestPath.latest.flatMap(networkUnavailableReason(on:))
    }

    /// Why `path` is unusable because of the configuration's access rules, if it is.
    func networkUnavailableReason(on path: NetworkPath) -> URLError.NetworkUnavailableReason? {
        guard path.isSatisfied else { return nil }
        if !configuration.allowsCellularAccess, path.connection == .cellular { return .cellular }
        if !allowsRoaming, path.isRoaming { return .cellular }
        if !allowsExpensive, path.isExpensive { return .expensive }
        if !allowsConstrained, path.isConstrained { return .constrained }
        return nil
    }

    /// Waits until invalidation has released the engine (tests).
    func waitUntilInvalidated() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let isDone = state.withLock { state -> Bool in
                if state.isInvalidated { return true }
                state.invalidationWaiters.append(continuation)
                return false
            }
            if isDone { continuation.resume() }
        }
    }

    func register(_ task: ResumableDataTask) {
        state.withLock { $0.dataTasks[task.taskIdentifier] = task }
    }

    /// The data or upload task `identifier` while it runs (registered at its resume).
    func registeredDataTask(_ identifier: Int) -> ResumableDataTask? {
        state.withLock { $0.dataTasks[identifier] }
    }

    func unregister(_ task: ResumableDataTask) {
        state.withLock { _ = $0.dataTasks.removeValue(forKey: task.taskIdentifier) }
        finishInvalidationIfIdle()
    }

    /// A task identifier unique in this session (a background session's come from its link, so
    /// a data task's never meets a download task's).
    func makeTaskIdentifier() -> Int {
        backgroundLink.withLock({ $0 })?.makeIdentifier() ?? makeIdentifier()
    }

    /// The last path the engine was given.
    var latestPathValue: NetworkPath? { latestPath.latest }

    /// Calls `observer` with every path the engine is given from now on.
    func observeEnginePaths(_ observer: @escaping @Sendable (NetworkPath) -> Void) -> UUID {
        latestPath.observe(observer)
    }

    /// Ends an `observePaths`.
    func stopObservingPaths(_ id: UUID) {
        latestPath.stopObserving(id)
    }

    func register(_ task: ResumableDownloadTask) {
        state.withLock { $0.tasks[task.taskIdentifier] = task }
    }

    func unregister(_ task: ResumableDownloadTask) {
        state.withLock { _ = $0.tasks.removeValue(forKey: task.taskIdentifier) }
        finishInvalidationIfIdle()
    }

    /// Queues a delegate call (dropped when there is no download delegate, or after invalidation).
    func deliver(_ call: @escaping @Sendable (any ResumableURLSessionDownloadDelegate) -> Void) {
        delegateQueue.addOperation { [self] in
            if let delegate = downloadDelegate { call(delegate) }
        }
    }

    /// Queues work on the delegate queue.
    func enqueue(_ work: @escaping @Sendable () -> Void) {
        delegateQueue.addOperation(work)
    }

    /// Whether the session was invalidated: tasks can no longer start.
    var isInvalidating: Bool { state.withLock { $0.isInvalidating } }

    private func makeIdentifier() -> Int {
        nextIdentifier.add(1, ordering: .relaxed).newValue
    }

    private func finishInvalidationIfIdle() {
        let engine = engine
        let link = backgroundLink.withLock { $0 }
        let shouldFinish = state.withLock { state -> Bool in
            guard state.isInvalidating, state.tasks.isEmpty, state.dataTasks.isEmpty, state.shutdown == nil else { return false }
            if let link {
                // Detach; the tasks (none left here) are the agent's.
                state.shutdown = Task { link.close() }
                return true
            }
            state.shutdown = Task { [self] in
                if case .success(let engine) = engine {
                    await engine.agent.shutdown()
                    engine.monitor?.cancel()
                }
                // Invalidation is complete once the delegate has been told, so whoever waits for
                // it (waitUntilInvalidated) sees didBecomeInvalid as the delegate's last call.
                enqueue { [self] in
                    delegate?.urlSession(self, didBecomeInvalidWithError: nil)
                    let waiters = self.state.withLock { state in
                        state.delegate = nil
                        state.isInvalidated = true
                        defer { state.invalidationWaiters = [] }
                        return state.invalidationWaiters
                    }
                    for waiter in waiters { waiter.resume() }
                }
            }
            return true
        }
        _ = shouldFinish
    }

    /// A background session's link closed after invalidation: the delegate's last call.
    func backgroundLinkClosed() {
        finishInvalidation(error: nil)
    }

    /// A background session that cannot work (`URLError.backgroundSessionInUseByAnotherProcess`
    /// when another live process holds the identifier): the delegate hears it through
    /// `didBecomeInvalidWithError`, as the "never a silent duplicate" asks.
    func backgroundSessionFailed(_ error: URLError) {
        state.withLock { $0.isInvalidating = true }
        finishInvalidation(error: error)
    }

    private func finishInvalidation(error: (any Error)?) {
        enqueue { [self] in
            let isFirst = self.state.withLock { state -> Bool in
                defer { state.isInvalidated = true }
                return !state.isInvalidated
            }
            guard isFirst else { return }
            delegate?.urlSession(self, didBecomeInvalidWithError: error)
            let waiters = self.state.withLock { state in
                state.delegate = nil
                defer { state.invalidationWaiters = [] }
                return state.invalidationWaiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    private static func makeEngine(_ configuration: Configuration, pathSource: PathSource,
                                   latestPath: PathRecorder) -> Result<Engine, DownloadTaskStateMachine.Failure> {
        if let problem = configuration.problem {
            return .failure(.init(code: .unknown, description: problem))
        }
        let directory: SessionDirectory
        do {
            directory = try SessionDirectory(root: configuration.stateDirectory)
        } catch {
            return .failure(.init(code: .cannotCreateFile, description: error.description, underlying: .storage(error)))
        }
        if let lifetime = configuration.resumeDataLifetime {
            // Apple's system purges its temporary directory; this one is ours to purge.
            let removed = directory.removeLeftovers(olderThan: lifetime)
            if !removed.isEmpty {
                configuration.logger.info("removed partial files older than the resume data lifetime",
                                          metadata: ["count": "\(removed.count)"])
            }
        }
        let agentConfiguration = configuration.agentConfiguration(stateDirectory: directory.records)
        do {
            switch pathSource {
            case .assumeConnected:
                return .success(Engine(directory: directory, agent: try DownloadAgent(configuration: agentConfiguration),
                                       monitor: nil))
            case .stream(let paths):
                let recorded = paths.map { latestPath.record($0) }
                return .success(Engine(directory: directory,
                                       agent: try DownloadAgent(configuration: agentConfiguration, paths: recorded), monitor: nil))
            case .monitor:
                let monitor = PathMonitor(configuration: configuration.pathMonitor)
                do {
                    try monitor.start()
                } catch {
                    // No netlink (a locked-down container): transfers still work; a dead link is
                    // then noticed by the transfer itself (timeoutIntervalForRequest).
                    configuration.logger.warning("not watching the network path", metadata: ["error": "\(error)"])
                    return .success(Engine(directory: directory, agent: try DownloadAgent(configuration: agentConfiguration),
                                           monitor: nil))
                }
                let recorded = monitor.paths.map { latestPath.record($0) }
                return .success(Engine(directory: directory,
                                       agent: try DownloadAgent(configuration: agentConfiguration, paths: recorded,
                                                                hostPaths: { monitor.paths(to: $0) }),
                                       monitor: monitor))
            }
        } catch let error as DownloadError {
            return .failure(.init(error))
        } catch {
            return .failure(.init(code: .unknown, description: "\(error)"))
        }
    }
}
