import FoundationEssentials
import Synchronization
import ReachabilityBase

/// One download managed by a `DownloadAgent`: its state, progress and events.
///
/// Like URLSession's download task: observe it through `events` / `progressUpdates` (async
/// streams) or `onEvent` / `onProgress` (closures, for code ported from delegates), and control
/// it with `pause()`, `resume()` and `cancel()`.
public final class Download: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// Stable across relaunches (it names the resume record).
    public let id: UUID
    /// Where the bytes come from (a download whose link expired may be given a new one:
    /// `DownloadAgent.replaceURL(of:with:)`).
    public var url: URL { observers.withLock { $0.url } }
    /// Where the verified file ends up.
    public let destination: URL
    /// The options it was created with.
    public let options: DownloadOptions

    /// The proxy its requests go through now, as events show it (password masked; libcurl's
    /// environment variables when no proxy was set); nil for a direct connection.
    public var proxyDescription: String? { ProxyEnvironment.shownProxy(for: url, explicit: options.proxy) }

    private struct Observers {
        weak var agent: DownloadAgent?
        var url: URL
        var state: DownloadState = .queued
        /// Why a queued download is held back (disk space, ...); nil once it moves on.
        var waitReason: JobWaitReason?
        var progress = DownloadProgress()
        var rate = RateEstimator()
        var eventContinuations: [UUID: AsyncStream<DownloadEvent>.Continuation] = [:]
        /// Recent events, replayed to new `events` subscribers (bounded: retries can repeat).
        var history: [DownloadEvent] = []
        var progressContinuations: [UUID: AsyncStream<DownloadProgress>.Continuation] = [:]
        var finishWaiters: [UUID: CheckedContinuation<URL, any Error>] = [:]
        var onEvent: (@Sendable (DownloadEvent) -> Void)?
        var onProgress: (@Sendable (DownloadProgress) -> Void)?
        /// The agent service's one follower (`follow`), kept past a final state: a resumed
        /// failed download goes on reporting to it.
        var follower: (@Sendable (DownloadEvent) -> Void)?
        /// Counts this download's state while it is in its agent's list (`leaveCensus()`).
        var census: DownloadCensus?
    }

    /// Its class, as its agent's census counts it.
    private let priorityClass: DownloadPriority
    /// Its place in its agent's list, as the census orders a `queue list` page.
    private let listPosition: UInt64

    private let observers: Mutex<Observers>

    init(id: UUID, url: URL, destination: URL, options: DownloadOptions, agent: DownloadAgent,
         state: DownloadState, progress: DownloadProgress, census: DownloadCensus? = nil) {
        self.id = id
        self.destination = destination
        self.options = options
        priorityClass = DownloadPriority(value: options.priority)
        var initial = Observers(url: url)
        initial.agent = agent
        initial.state = state
        initial.progress = progress
        initial.census = census
        listPosition = census?.nextPosition() ?? 0
        observers = Mutex(initial)
        census?.add(self, at: listPosition, state, priority: priorityClass)
    }

    /// No longer counted by its agent's census (it left the agent's list).
    func leaveCensus() {
        observers.withLock { observers in
            observers.census?.remove(at: listPosition, observers.state, priority: priorityClass)
            observers.census = nil
        }
    }

    /// Fetched from `url` from now on (the agent's record says so already).
    func replaceURL(with url: URL) { observers.withLock { $0.url = url } }

    /// The current state.
    public var state: DownloadState { observers.withLock { $0.state } }

    /// Why it waits while `queued` with a slot it could have (disk space, ...); nil otherwise.
    public var waitReason: JobWaitReason? { observers.withLock { $0.waitReason } }

    /// The latest progress.
    public var progress: DownloadProgress { observers.withLock { $0.progress } }

    /// Called with every event, on an arbitrary thread.
    public var onEvent: (@Sendable (DownloadEvent) -> Void)? {
        get { observers.withLock { $0.onEvent } }
        set { observers.withLock { $0.onEvent = newValue } }
    }

    /// Called with progress updates (at most about ten per second), on an arbitrary thread.
    public var onProgress: (@Sendable (DownloadProgress) -> Void)? {
        get { observers.withLock { $0.onProgress } }
        set { observers.withLock { $0.onProgress = newValue } }
    }

    /// The download's events, starting with a replay of the recent ones (up to 256), so a
    /// subscriber created after `download(from:to:)` returns misses nothing; the stream ends when
    /// the download completes, fails or is cancelled.
    public var events: AsyncStream<DownloadEvent> {
        subscribe(\.eventContinuations, bufferingPolicy: .unbounded) { observers, continuation in
            for event in observers.history { continuation.yield(event) }
        }
    }

    /// Gives `follower` the recent events (the replay `events` gives), then every new one, in
    /// order, on the thread that reports it, past a final state too (a resumed failed download
    /// goes on); a download already followed keeps its follower. For a caller that follows
    /// thousands of downloads: no task waits per download.
    package func follow(_ follower: @escaping @Sendable (DownloadEvent) -> Void) {
        observers.withLock { observers in
            guard observers.follower == nil else { return }
            // Under the lock: an event reported meanwhile is either in the replay or after it.
            for event in observers.history { follower(event) }
            observers.follower = follower
        }
    }

    /// Progress values, starting with the current one; ends with the download.
    public var progressUpdates: AsyncStream<DownloadProgress> {
        subscribe(\.progressContinuations, bufferingPolicy: .bufferingNewest(1)) { observers, continuation in
            continuation.yield(observers.progress)
        }
    }

    /// A stream of the observers' kept at `continuations`: `replay` gives it what a new subscriber
    /// sees first, under the lock, so nothing falls between; it ends at once for a finished
    /// download, else with the download.
    private func subscribe<Element: Sendable>(
        _ continuations: WritableKeyPath<Observers, [UUID: AsyncStream<Element>.Continuation]> & Sendable,
        bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy,
        replay: (Observers, AsyncStream<Element>.Continuation) -> Void
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: bufferingPolicy)
        let key = UUID()
        let isFinal = observers.withLock { observers -> Bool in
            replay(observers, continuation)
            if observers.state.isFinal { return true }
            observers[keyPath: continuations][key] = continuation
            return false
        }
        if isFinal { continuation.finish() }
        continuation.onTermination = { [weak self] _ in _ = self?.observers.withLock { $0[keyPath: continuations].removeValue(forKey: key) } }
        return stream
    }

    /// Waits until the download completes (returning the file URL) or fails (throwing its
    /// `DownloadError`). Pausing does not end the wait; cancelling the waiting task does (throwing
    /// `CancellationError`) without touching the download.
    public func finished() async throws -> URL {
        let key = UUID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let outcome = observers.withLock { observers -> Result<URL, any Error>? in
                    switch observers.state {
                    case .completed: return .success(destination)
                    case .failed(let error): return .failure(error)
                    default:
                        if Task.isCancelled { return .failure(CancellationError()) }
                        observers.finishWaiters[key] = continuation
                        return nil
                    }
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            observers.withLock { $0.finishWaiters.removeValue(forKey: key) }?.resume(throwing: CancellationError())
        }
    }

    /// Stops transferring and keeps the resume data.
    public func pause() async { await agent?.pause(self) }

    /// Continues a paused (or resumably failed) download.
    public func resume() async { await agent?.resume(self) }

    /// Stops for good and deletes the partial file and resume record.
    public func cancel() async { await agent?.cancel(self) }

    /// A short description with the id prefix, URL and destination.
    public var description: String { "Download(\(id.uuidString.prefix(8)) \(URLRedaction.redacted(url)) -> \(destination.path))" }

    /// Identity: two handles are equal only when they are the same object.
    public static func == (lhs: Download, rhs: Download) -> Bool { lhs === rhs }
    /// Hashes the object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    private var agent: DownloadAgent? { observers.withLock { $0.agent } }

    // MARK: updates from the agent

    /// Moves to `state` and, in the same step, records `event`: whoever sees the event sees the
    /// state it describes. A final state ends the event and progress streams after the event.
    func update(state: DownloadState, event: DownloadEvent? = nil) {
        let observed = observers.withLock { observers in
            // Under the same lock as the state: the census never disagrees with it.
            observers.census?.move(at: listPosition, from: observers.state, to: state, priority: priorityClass)
            observers.state = state
            observers.waitReason = nil
            if let event {
                observers.history.append(event)
                if observers.history.count > 256 { observers.history.removeFirst(observers.history.count - 256) }
            }
            let streams = Array(observers.eventContinuations.values)
            let progress = Array(observers.progressContinuations.values)
            let waiters = state.isFinal ? Array(observers.finishWaiters.values) : []
            if state.isFinal {
                observers.finishWaiters = [:]
                observers.eventContinuations = [:]
                observers.progressContinuations = [:]
            }
            return (streams: streams, progress: progress, waiters: waiters, handler: observers.onEvent,
                    follower: observers.follower)
        }
        if let event {
            for stream in observed.streams { stream.yield(event) }
            observed.handler?(event)
            observed.follower?(event)
        }
        for waiter in observed.waiters {
            switch state {
            case .failed(let error): waiter.resume(throwing: error)
            default: waiter.resume(returning: destination)
            }
        }
        guard state.isFinal else { return }
        for stream in observed.streams { stream.finish() }
        for stream in observed.progress { stream.finish() }
    }

    /// Holds the download back for `reason` (nil: no longer), emitting `waiting(reason)` when the
    /// reason changes (free space moving within one reason is not a new event).
    func wait(for reason: JobWaitReason?) {
        let changed = observers.withLock { observers in
            defer { observers.waitReason = reason }
            return observers.waitReason?.kind != reason?.kind
        }
        if changed, let reason { emit(.waiting(reason)) }
    }

    /// Records an event that does not change the state (retrying, restartedFromZero).
    func emit(_ event: DownloadEvent) {
        let (streams, handler, follower) = observers.withLock { observers in
            observers.history.append(event)
            if observers.history.count > 256 { observers.history.removeFirst(observers.history.count - 256) }
            return (Array(observers.eventContinuations.values), observers.onEvent, observers.follower)
        }
        for stream in streams { stream.yield(event) }
        handler?(event)
        follower?(event)
    }

    func report(bytesReceived: Int64, totalBytes: Int64?, resetRate: Bool = false) {
        let (progress, streams, handler) = observers.withLock { observers in
            if resetRate { observers.rate = RateEstimator() }
            let rate = observers.rate.add(bytes: bytesReceived, at: ContinuousClock.now)
            let eta = totalBytes.flatMap { RateEstimator.timeRemaining(bytes: $0 - bytesReceived, bytesPerSecond: rate) }
            let connections = observers.progress.connections
            observers.progress = DownloadProgress(bytesReceived: bytesReceived, totalBytes: totalBytes,
                                                  bytesPerSecond: rate, estimatedTimeRemaining: eta)
            observers.progress.connections = connections
            return (observers.progress, Array(observers.progressContinuations.values), observers.onProgress)
        }
        for stream in streams { stream.yield(progress) }
        handler?(progress)
    }

    /// The connections carrying the download changed: a progress update shows them.
    func report(connections: DownloadConnections) {
        let (progress, streams, handler, changed) = observers.withLock { observers in
            let changed = observers.progress.connections != connections
            observers.progress.connections = connections
            return (observers.progress, Array(observers.progressContinuations.values), observers.onProgress, changed)
        }
        guard changed else { return }
        for stream in streams { stream.yield(progress) }
        handler?(progress)
    }
}

/// Exponentially smoothed bytes-per-second from (offset, time) samples.
struct RateEstimator: Sendable {
    /// The time `bytes` take at `bytesPerSecond`, or nil when that is unknown or meaningless: no
    /// bytes left to count, or a rate under a byte a second. While a server is waited for, each
    /// failed probe reports the same offset and the smoothed rate decays towards zero; after a
    /// minute the quotient no longer fit an Int64 and the conversion trapped (SIGILL).
    static func timeRemaining(bytes: Int64, bytesPerSecond: Double) -> Duration? {
        guard bytes >= 0, bytesPerSecond >= 1, bytesPerSecond.isFinite else { return nil }
        let seconds = Double(bytes) / bytesPerSecond
        guard seconds < 1e9 else { return nil }
        return Duration(clampingTimeInterval: seconds)
    }

    private var last: (bytes: Int64, time: ContinuousClock.Instant)?
    private var rate: Double = 0

    /// Adds a sample and returns the smoothed rate. A drop in `bytes` (restart) re-bases silently.
    mutating func add(bytes: Int64, at time: ContinuousClock.Instant) -> Double {
        defer { if last == nil || bytes < last!.bytes || time - last!.time >= .milliseconds(50) { last = (bytes, time) } }
        guard let last, bytes >= last.bytes else { return rate }
        let elapsed = time - last.time
        guard elapsed >= .milliseconds(50) else { return rate }
        let instant = Double(bytes - last.bytes) / elapsed.timeInterval
        rate = rate == 0 ? instant : 0.7 * rate + 0.3 * instant
        return rate
    }
}
