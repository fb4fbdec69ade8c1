import FoundationEssentials
import ReachabilityBase

/// When the agent starts a background session's program for its events (Apple's relaunch for
/// `handleEventsForBackgroundURLSession`, BITS's `SetNotifyCmdLine`), one session's worth. Pure:
/// the agent feeds what happened and carries out the returned action; tested without processes.
///
/// - Coalesced: events that arrive while nobody is attached start one launch, `batchWindow`
///   after the first (so tasks finishing together are one batch), never a second one while a
///   launched program is starting or attached.
/// - A launch succeeds when a process attaches and every pending event has been acknowledged.
///   It fails when the program ends (or its process detaches) with events still pending, when
///   the launcher itself fails (no such program, `systemctl` refused), or when no process has
///   attached `attachDeadline` after the launch.
/// - After a failure the next launch waits `backoff(failures)`: 1 s, 2 s, 4 s ... up to
///   `maximumBackoff`; a success resets it. Never a loop, whatever the program does.
package struct LaunchPolicy: Sendable, Hashable {
    package enum Phase: Sendable, Hashable {
        /// Nothing to launch.
        case idle
        /// Events are pending and nobody is attached: launch at this time.
        case batching(until: Date)
        /// A launch was made at `since`; waiting for an attach (until `deadline`) or for its end.
        case launched(since: Date, deadline: Date)
        /// The launched program (or any process) is attached.
        case attached(afterLaunch: Bool)
        /// The last launch failed: the next one not before this time.
        case backingOff(until: Date)
    }

    /// What the owner does.
    package enum Action: Sendable, Hashable {
        /// Start the program now.
        case launch
        /// Call `timerFired` at this time (the earliest one asked for counts).
        case wake(at: Date)
    }

    package static let batchWindow: TimeInterval = 1
    package static let attachDeadline: TimeInterval = 60
    package static let maximumBackoff: TimeInterval = 15 * 60

    package private(set) var phase = Phase.idle
    /// Launches that failed in a row.
    package private(set) var consecutiveFailures = 0
    /// Why the last one failed, for `agent status`.
    package private(set) var lastFailure: String?
    package private(set) var launches = 0
    package private(set) var failures = 0

    package init() {}

    /// 1 s after the first failure, doubling, at most `maximumBackoff`: the package's one
    /// back-off with the launcher's numbers.
    package static func backoff(afterFailures count: Int) -> TimeInterval {
        ExponentialBackoff(initial: .seconds(1), maximum: .seconds(maximumBackoff)).delay(afterFailures: count).timeInterval
    }

    /// Whether the launcher is failing (shown by `agent status` and in metrics).
    package var isFailing: Bool { consecutiveFailures > 0 }

    /// When the next launch may happen, while backing off or batching.
    package var nextAttempt: Date? {
        switch phase {
        case .batching(let until), .backingOff(let until): until
        default: nil
        }
    }

    /// Events are pending (new ones arrived, or the agent started with some) and nobody is attached.
    package mutating func eventsPending(now: Date) -> Action? {
        switch phase {
        case .idle:
            let when = now.addingTimeInterval(Self.batchWindow)
            phase = .batching(until: when)
            return .wake(at: when)
        case .batching(let until), .backingOff(let until):
            return .wake(at: until)
        case .launched, .attached:
            return nil
        }
    }

    /// A process attached the session.
    package mutating func attached() {
        switch phase {
        case .launched: phase = .attached(afterLaunch: true)
        case .attached: break
        default: phase = .attached(afterLaunch: false)
        }
    }

    /// Every pending event was acknowledged by the attached process.
    package mutating func drained() {
        guard case .attached(let afterLaunch) = phase else { return }
        if afterLaunch || consecutiveFailures > 0 {
            consecutiveFailures = 0
            lastFailure = nil
        }
        phase = .attached(afterLaunch: false)
    }

    /// The attached process went away; `pending` says whether events are still waiting.
    package mutating func detached(pending: Bool, now: Date) -> Action? {
        guard case .attached(let afterLaunch) = phase else { return nil }
        if afterLaunch, pending {
            return fail("the launched program detached with events still pending", now: now)
        }
        phase = .idle
        return pending ? eventsPending(now: now) : nil
    }

    /// The launch was made (the process or `systemctl` started).
    package mutating func launched(now: Date) -> Action {
        launches += 1
        let deadline = now.addingTimeInterval(Self.attachDeadline)
        phase = .launched(since: now, deadline: deadline)
        return .wake(at: deadline)
    }

    /// The launcher failed before anything ran, or the launched program ended. `pending`: events
    /// still wait; `attachedNow`: a process (that one) is still attached.
    package mutating func launchEnded(_ failure: String?, pending: Bool, attachedNow: Bool, now: Date) -> Action? {
        switch phase {
        case .launched:
            if let failure { return fail(failure, now: now) }
            if attachedNow { return nil }
            if pending { return fail("the launched program ended without taking its events", now: now) }
            phase = .idle
            return nil
        case .attached(afterLaunch: true):
            // It ended while still attached: the detach that follows decides.
            if let failure, !attachedNow { return fail(failure, now: now) }
            return nil
        default:
            return nil
        }
    }

    /// A wake time asked for has come.
    package mutating func timerFired(now: Date, pending: Bool, attachedNow: Bool) -> Action? {
        switch phase {
        case .batching(let until), .backingOff(let until):
            guard now >= until else { return .wake(at: until) }
            guard pending, !attachedNow else {
                phase = attachedNow ? .attached(afterLaunch: false) : .idle
                return nil
            }
            return .launch
        case .launched(_, let deadline):
            guard now >= deadline else { return .wake(at: deadline) }
            guard pending else { phase = .idle; return nil }
            return fail("no process attached within \(Int(Self.attachDeadline)) s of the launch", now: now)
        default:
            return nil
        }
    }

    private mutating func fail(_ reason: String, now: Date) -> Action {
        consecutiveFailures += 1
        failures += 1
        lastFailure = reason
        let until = now.addingTimeInterval(Self.backoff(afterFailures: consecutiveFailures))
        phase = .backingOff(until: until)
        return .wake(at: until)
    }
}
