import Dispatch
import ResumableDownloads
import Synchronization

/// Collects a download's events so tests can wait for one with a deadline instead of sleeping.
///
/// The subscription to `download.events` is taken in `init`, synchronously: what the log will
/// see is decided by the download's state at that moment, not by when a task happens to run.
/// (A log whose subscription ran on its own task raced `resume()` after a resumable failure:
/// subscribed before it, the stream of a failed download ends at once and the log missed the
/// whole resumed run; that made the disk-full test fail in 10-60 % of runs.)
public final class EventLog: Sendable {
    private struct Waiter {
        var predicate: @Sendable (DownloadEvent) -> Bool
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var events: [DownloadEvent] = []
        var waiters: [Int: Waiter] = [:]
        var nextWaiter = 0
        var hasEnded = false
        var endWaiters: [Int: CheckedContinuation<Bool, Never>] = [:]
    }

    private let state = Mutex(State())

    /// Follows `download.events`, which replays recent events, so nothing fired before the log
    /// existed is missed. The stream ends when the download is final (completed, failed or
    /// cancelled): create the log after `resume()` to follow a resumed run of a failed download.
    public init(_ download: Download) {
        let events = download.events
        Task { [self] in
            for await event in events { record(event) }
            end()
        }
    }

    private func record(_ event: DownloadEvent) {
        let ready = state.withLock { state -> [Waiter] in
            state.events.append(event)
            let matched = state.waiters.filter { $0.value.predicate(event) }
            for key in matched.keys { state.waiters.removeValue(forKey: key) }
            return Array(matched.values)
        }
        for waiter in ready { waiter.continuation.resume(returning: true) }
    }

    private func end() {
        let (waiters, endWaiters) = state.withLock { state in
            state.hasEnded = true
            defer { state.waiters = [:]; state.endWaiters = [:] }
            return (Array(state.waiters.values), Array(state.endWaiters.values))
        }
        for waiter in waiters { waiter.continuation.resume(returning: false) }
        for waiter in endWaiters { waiter.resume(returning: true) }
    }

    /// Every event so far.
    public var all: [DownloadEvent] { state.withLock { $0.events } }

    /// True once the event stream has ended (the download reached a final state).
    public var hasEnded: Bool { state.withLock { $0.hasEnded } }

    /// Returns true as soon as an event satisfying `predicate` has been seen; false after
    /// `timeout`, or when the stream ends without one.
    @discardableResult
    public func wait(timeout: Duration = .seconds(20), for predicate: @escaping @Sendable (DownloadEvent) -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let key = state.withLock { state -> Int? in
                if state.events.contains(where: predicate) { return nil }
                if state.hasEnded { return -1 }
                state.nextWaiter += 1
                state.waiters[state.nextWaiter] = Waiter(predicate: predicate, continuation: continuation)
                return state.nextWaiter
            }
            guard let key else { return continuation.resume(returning: true) }
            guard key >= 0 else { return continuation.resume(returning: false) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout.dispatchInterval) { [self] in
                state.withLock { $0.waiters.removeValue(forKey: key) }?.continuation.resume(returning: false)
            }
        }
    }

    /// Waits until the event stream has ended, so every event of the run is in the log (the log
    /// follows the stream on its own task, so it can trail `finished()` by a moment). Returns
    /// false after `timeout`.
    @discardableResult
    public func settled(timeout: Duration = .seconds(20)) async -> Bool {
        await withCheckedContinuation { continuation in
            let key = state.withLock { state -> Int? in
                if state.hasEnded { return nil }
                state.nextWaiter += 1
                state.endWaiters[state.nextWaiter] = continuation
                return state.nextWaiter
            }
            guard let key else { return continuation.resume(returning: true) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout.dispatchInterval) { [self] in
                state.withLock { $0.endWaiters.removeValue(forKey: key) }?.resume(returning: false)
            }
        }
    }

    /// Offsets of every `resumed` event.
    public var resumedOffsets: [Int64] { all.compactMap { if case .resumed(let offset) = $0 { offset } else { nil } } }

    /// How many times the download restarted from zero.
    public var restarts: Int { all.filter { if case .restartedFromZero = $0 { true } else { false } }.count }
}

extension Duration {
    fileprivate var dispatchInterval: DispatchTimeInterval {
        .nanoseconds(Int(components.seconds) * 1_000_000_000 + Int(components.attoseconds / 1_000_000_000))
    }
}
