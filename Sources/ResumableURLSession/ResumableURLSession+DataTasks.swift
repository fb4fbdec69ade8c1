import Foundation
import FoundationNetworking
import LinuxReachability
import ResumableDownloads
import Synchronization

/// URLSession's data tasks and their async forms, run in this process (also from a background
/// session: a request is short, and its answer is wanted by the process that asked).
extension ResumableURLSession {
    /// A suspended task that fetches `url` (GET); call `resume()` to start it. The response and
    /// body go to the session's `ResumableURLSessionDataDelegate`.
    public func dataTask(with url: URL) -> ResumableDataTask {
        dataTask(with: URLRequest(url: url))
    }

    /// A suspended task for `request`: any method, its headers (and `httpAdditionalHeaders`),
    /// its `httpBody`, its `timeoutInterval` when shorter than `timeoutIntervalForRequest`. A
    /// `httpBodyStream` fails the task with `unsupportedURL` (a stream cannot be sent again).
    public func dataTask(with request: URLRequest) -> ResumableDataTask {
        makeDataTask(request, body: nil, completionHandler: nil)
    }

    /// A task whose outcome goes to `completionHandler` instead of the delegate: the whole body
    /// and the response, or the error (with the response when one arrived). Call `resume()`.
    public func dataTask(with url: URL,
                         completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> ResumableDataTask {
        dataTask(with: URLRequest(url: url), completionHandler: completionHandler)
    }

    /// `dataTask(with:completionHandler:)` for a request.
    public func dataTask(with request: URLRequest,
                         completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> ResumableDataTask {
        makeDataTask(request, body: nil, completionHandler: completionHandler)
    }

    /// Fetches `url` and returns the body and the response. Cancelling the calling task cancels
    /// the request (`URLError.cancelled`).
    public func data(from url: URL) async throws -> (Data, URLResponse) {
        try await data(for: URLRequest(url: url))
    }

    /// `data(from:)` for a request (any method, headers, `httpBody`).
    public func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        try await awaitData { dataTask(with: request, completionHandler: $0) }
    }

    // MARK: internal

    func makeDataTask(_ request: URLRequest, body: DataExchangeBody?,
                      completionHandler: (@Sendable (Data?, URLResponse?, (any Error)?) -> Void)?) -> ResumableDataTask {
        ResumableDataTask(session: self, identifier: makeTaskIdentifier(), request: request, body: body,
                          completionHandler: completionHandler)
    }

    /// Runs the task `make` creates and returns its body and response.
    func awaitData(
        _ make: (@escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> ResumableDataTask
    ) async throws -> (Data, URLResponse) {
        try await awaitTask(make, onCancel: { $0.cancelAwaited() }) { data, response, error in
            guard let data, let response, error == nil else { throw error ?? URLError(.badServerResponse) }
            return (data, response)
        }
    }

    /// Resumes the task `make` creates and waits for its completion handler, whose values
    /// `finish` turns into the result (inside the handler: before the session cleans up after
    /// it); the one wait behind `data(for:)` and `download(for:)`. A cancelled Swift task cancels
    /// the task: at once when the cancel came before the task existed, else with `onCancel`.
    func awaitTask<SessionTask: AwaitableTask, Body, Value>(
        _ make: (@escaping @Sendable (Body?, URLResponse?, (any Error)?) -> Void) -> SessionTask,
        onCancel: @escaping @Sendable (SessionTask) -> Void,
        finish: @escaping @Sendable (Body?, URLResponse?, (any Error)?) throws -> sending Value
    ) async throws -> Value {
        let running = RunningTask<SessionTask>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                let task = make { body, response, error in
                    do { continuation.resume(returning: try finish(body, response, error)) } catch { continuation.resume(throwing: error) }
                }
                task.resume()
                if running.started(task) { task.cancelAwaited() }
            }
        } onCancel: {
            if let task = running.cancel() { onCancel(task) }
        }
    }

    /// The current path as data tasks see it (nil before any is known: a task then starts).
    func currentPathState() -> DataTaskStateMachine.PathState? {
        var path = latestPathValue
        if path == nil, case .success(let engine) = engine { path = engine.monitor?.currentPath }
        return path.map(pathState)
    }

    /// Calls `observer` with every path the engine gets, as data tasks see it.
    func observePaths(_ observer: @escaping @Sendable (DataTaskStateMachine.PathState) -> Void) -> UUID {
        observeEnginePaths { [weak self] path in
            guard let self else { return }
            observer(pathState(path))
        }
    }

    /// A path the configuration may use (satisfied, and allowed by its access rules), with the
    /// interfaces a running exchange may be on.
    func pathState(_ path: NetworkPath) -> DataTaskStateMachine.PathState {
        guard path.isSatisfied, networkUnavailableReason(on: path) == nil else { return .unusable }
        return .usable(primary: path.primaryInterface?.name,
                       up: Set(path.interfaces.filter(\.isUsable).map(\.name)))
    }

    /// Whether the delegate handles data tasks (otherwise responses are allowed unasked).
    var hasDataDelegate: Bool { delegate is any ResumableURLSessionDataDelegate }

    /// Queues a data delegate call (dropped when the delegate handles no data tasks).
    func deliverToDataDelegate(_ call: @escaping @Sendable (any ResumableURLSessionDataDelegate) -> Void) {
        enqueue { [self] in deliverNowToDataDelegate(call) }
    }

    /// On the delegate queue: the call, if the delegate handles data tasks.
    func deliverNowToDataDelegate(_ call: (any ResumableURLSessionDataDelegate) -> Void) {
        if let delegate = delegate as? any ResumableURLSessionDataDelegate { call(delegate) }
    }
}

/// A task `awaitTask` can start and cancel: the two task classes.
protocol AwaitableTask: ResumableURLSessionTask {
    func resume()
    /// Ends the task for a caller that no longer waits for it.
    func cancelAwaited()
}

extension ResumableDataTask: AwaitableTask {
    func cancelAwaited() { cancel() }
}

extension ResumableDownloadTask: AwaitableTask {
    /// By producing resume data, so that the stored bytes are kept for a later request.
    func cancelAwaited() { cancel(byProducingResumeData: { _ in }) }
}

/// The task of one awaited request, and whether the awaiting Swift task was cancelled before it existed.
final class RunningTask<Task: Sendable>: Sendable {
    private let state = Mutex<(task: Task?, isCancelled: Bool)>((nil, false))

    /// Records the task; true when the cancel came first (the caller cancels it now).
    func started(_ task: Task) -> Bool {
        state.withLock { state in
            state.task = task
            return state.isCancelled
        }
    }

    /// Records the cancel; the task to cancel, if it exists yet.
    func cancel() -> Task? {
        state.withLock { state in
            state.isCancelled = true
            return state.task
        }
    }
}
