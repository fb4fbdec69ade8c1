import Dispatch
import ResumableDownloads
import Synchronization

/// Collects a download's events so tests can wait for one with a deadline instead of sleeping.
public final class EventLog: Sendable {
    private struct Waiter {
        var predicate: @Sendable (DownloadEvent) -> Bool
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var events: [DownloadEvent] = []
        var waiters: [Int: Waiter] = [:]
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    /// Follows `download.events`, which replays recent events, so nothing fired before the log
    /// existed is missed (a closure set after `download(...)` returned could miss the first ones).
    public init(_ download: Download) {
        Task { [self] in
            for await event in download.events { record(event) }
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

    public var all: [DownloadEvent] { state.withLock { $0.events } }

    /// Returns true as soon as an event satisfying `predicate` has been seen, false after `timeout`.
    @discardableResult
    public func wait(timeout: Duration = .seconds(20), for predicate: @escaping @Sendable (DownloadEvent) -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let key = state.withLock { state -> Int? in
                if state.events.contains(where: predicate) { return nil }
                state.nextWaiter += 1
                state.waiters[state.nextWaiter] = Waiter(predicate: predicate, continuation: continuation)
                return state.nextWaiter
            }
            guard let key else { return continuation.resume(returning: true) }
            let nanoseconds = Int(timeout.components.seconds) * 1_000_000_000
                + Int(timeout.components.attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [self] in
                state.withLock { $0.waiters.removeValue(forKey: key) }?.continuation.resume(returning: false)
            }
        }
    }

    /// Waits until the terminal event (completed or failed) is recorded: the log follows the
    /// event stream on its own task, so it can trail `finished()` by a moment.
    public func settled() async {
        _ = await wait { event in
            switch event {
            case .completed, .failed: true
            default: false
            }
        }
    }

    /// Offsets of every `resumed` event.
    public var resumedOffsets: [Int64] { all.compactMap { if case .resumed(let offset) = $0 { offset } else { nil } } }

    /// How many times the download restarted from zero.
    public var restarts: Int { all.filter { if case .restartedFromZero = $0 { true } else { false } }.count }
}
