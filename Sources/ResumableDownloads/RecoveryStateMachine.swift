import FoundationEssentials
import Glibc

/// Decides what a download does after each attempt: finish, continue, retry (now or after a
/// backoff), wait for a usable path, restart from zero, or fail. Pure: tested without sockets.
///
/// The retry budget counts consecutive failed attempts that received no bytes; any progress
/// resets it. Waiting for a path never spends budget.
struct RecoveryStateMachine: Sendable {
    struct Policy: Sendable, Hashable {
        var backoff: Backoff
        /// Consecutive failures without progress before giving up.
        var maximumConsecutiveFailures: Int
        /// Restarts from zero (entity changed, range rules broken) before giving up.
        var maximumRestarts: Int
    }

    enum Event: Sendable, Hashable {
        /// An attempt ended; `receivedBytes` says whether it made progress, `isPathSatisfied`
        /// whether a usable path exists right now.
        case attemptEnded(AttemptResult, receivedBytes: Bool, isPathSatisfied: Bool)
    }

    enum Action: Sendable, Hashable {
        /// All bytes are in; verify and move into place.
        case complete(totalLength: Int64)
        /// Ask again for the rest straight away.
        case continueNow
        /// Try again after `delay` (zero means at once), on a new connection when `freshConnection`.
        case retry(after: Duration, freshConnection: Bool, error: DownloadError?)
        /// Wait until a usable path appears, then retry on a new connection.
        case waitForPath
        /// Truncate the partial file and start over.
        case restartFromZero(reason: String)
        /// Give up.
        case fail(DownloadError)
        /// We stopped it on purpose (pause, cancel, shutdown): the agent finishes that request.
        case stop(AbortReason)
    }

    let policy: Policy
    private(set) var consecutiveFailures = 0
    private(set) var restarts = 0

    init(policy: Policy) { self.policy = policy }

    /// `jitter` in 0...1 comes from the caller so tests are deterministic.
    mutating func event(_ event: Event, jitter: Double) -> Action {
        switch event {
        case .attemptEnded(let result, let receivedBytes, let isPathSatisfied):
            return attemptEnded(result, receivedBytes: receivedBytes, isPathSatisfied: isPathSatisfied, jitter: jitter)
        }
    }

    private mutating func attemptEnded(_ result: AttemptResult, receivedBytes: Bool, isPathSatisfied: Bool,
                                       jitter: Double) -> Action {
        let backoff = policy.backoff
        if receivedBytes { consecutiveFailures = 0 }
        switch result {
        case .completed(let total):
            return .complete(totalLength: total)

        case .incomplete:
            if receivedBytes { return .continueNow }
            return countFailure(.badServerResponse.with(description: "the server keeps ending the body early")) {
                .retry(after: backoff.delay(afterFailures: $0, jitter: jitter), freshConnection: false, error: nil)
            }

        case .restartFromZero(let reason):
            restarts += 1
            if restarts > policy.maximumRestarts {
                return .fail(.badServerResponse.with(description: reason))
            }
            return .restartFromZero(reason: reason)

        case .serverBusy(let status, let retryAfter):
            return countFailure(.httpStatus(status)) {
                .retry(after: backoff.delay(afterFailures: $0, retryAfter: retryAfter, jitter: jitter),
                       freshConnection: false, error: .httpStatus(status))
            }

        case .failed(let error):
            return .fail(error)

        case .transport(let error):
            switch RetryClass(error.urlCode) {
            case .permanent:
                return .fail(error)
            case .connectionLost:
                if !isPathSatisfied { return .waitForPath }
                // The first retry goes at once (a reset on a healthy path is usually transient);
                // later ones back off.
                return countFailure(error) { failures in
                    .retry(after: failures == 1 ? .zero : backoff.delay(afterFailures: failures - 1, jitter: jitter),
                           freshConnection: true, error: error)
                }
            case .unreachable:
                if !isPathSatisfied { return .waitForPath }
                return countFailure(error) {
                    .retry(after: backoff.delay(afterFailures: $0, jitter: jitter), freshConnection: true, error: error)
                }
            }

        case .aborted(.pathChanged):
            return .waitForPath

        case .aborted(.writeFailed(let error)):
            return .fail(error)

        case .aborted(let reason):
            return .stop(reason)
        }
    }

    private mutating func countFailure(_ error: DownloadError, _ retry: (Int) -> Action) -> Action {
        consecutiveFailures += 1
        if consecutiveFailures > policy.maximumConsecutiveFailures {
            return .fail(error.with(description: error.description + " (after \(consecutiveFailures) attempts)"))
        }
        return retry(consecutiveFailures)
    }
}
