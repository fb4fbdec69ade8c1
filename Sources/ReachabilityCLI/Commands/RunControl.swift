import Synchronization

/// How one `download` run ends: its work, the signal that interrupted it, and the first of
/// "the work finished" or "a second signal said quit now". Signal handlers only set state here;
/// nothing exits the process from a handler.
final class RunControl: Sendable {
    private struct State {
        var interruption: Int32 = 0
        var work: Task<Void, Never>?
        var isWorkCancelled = false
        var outcome: [DownloadCommand.JobFailure]??
        var waiter: CheckedContinuation<[DownloadCommand.JobFailure]?, Never>?
    }

    private let state = Mutex(State())

    /// Records the first signal; false when one had already arrived.
    func firstInterruption(_ number: Int32) -> Bool {
        state.withLock { state in
            guard state.interruption == 0 else { return false }
            state.interruption = number
            return true
        }
    }

    /// The first signal's number, 0 when none arrived.
    var interruption: Int32 { state.withLock { $0.interruption } }

    /// Starts the work; its failures become the result unless a second signal came first.
    func start(_ body: @escaping @Sendable () async -> [DownloadCommand.JobFailure]) {
        let task = Task { self.finish(await body()) }
        let cancelNow = state.withLock { state in
            state.work = task
            return state.isWorkCancelled
        }
        if cancelNow { task.cancel() }
    }

    /// Cancels the work (after an interrupt shut the agents down).
    func cancelWork() {
        let task = state.withLock { state in
            state.isWorkCancelled = true
            return state.work
        }
        task?.cancel()
    }

    /// The first result wins: the work's failures, or nil for "quit now".
    func finish(_ outcome: [DownloadCommand.JobFailure]?) {
        let waiter = state.withLock { state -> CheckedContinuation<[DownloadCommand.JobFailure]?, Never>? in
            guard state.outcome == nil else { return nil }
            state.outcome = .some(outcome)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: outcome)
    }

    /// Waits for `finish`.
    func result() async -> [DownloadCommand.JobFailure]? {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> [DownloadCommand.JobFailure]?? in
                if let outcome = state.outcome { return .some(outcome) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
