import FoundationEssentials
import LinuxReachability
import ReachabilityBase

/// Exponential backoff with jitter, capped, or the server's `Retry-After` (read by
/// ReachabilityBase's `RetryAfter`).
struct Backoff: Sendable, Hashable {
    /// Delay before the first backed-off retry.
    var initial: Duration
    /// Upper bound for any computed delay.
    var maximum: Duration
    /// Upper bound for a server's `Retry-After` (a hostile server must not park us for a day).
    var maximumRetryAfter: Duration

    /// The delay before retry number `failures` (1-based count of consecutive failures):
    /// `initial * 2^(failures-1)` capped at `maximum`, scaled by `jitter` in 0.5...1.0
    /// ("equal jitter": never less than half the step, so retries still spread out).
    func delay(afterFailures failures: Int, jitter: Double) -> Duration {
        let base = ExponentialBackoff(initial: initial, maximum: maximum).delay(afterFailures: failures)
        let factor = 0.5 + 0.5 * min(max(jitter, 0), 1)
        return Duration(clampingTimeInterval: base.timeInterval * factor)
    }

    /// The delay for an HTTP status answer: the server's `Retry-After` when present (capped),
    /// otherwise the jittered backoff.
    func delay(afterFailures failures: Int, retryAfter: Duration?, jitter: Double) -> Duration {
        if let retryAfter { return min(max(retryAfter, .zero), maximumRetryAfter) }
        return delay(afterFailures: failures, jitter: jitter)
    }
}

/// When to try a server again while it does not answer on a working path (refused, reset,
/// timed out, DNS failing): quickly at first, since most such failures are blips (a restart, a
/// failover), then at a steady, cheap pace that still notices the server's return within a
/// fraction of a second, slowing down only after minutes. Shared by every download of a host, so
/// the pace is per host, however many downloads wait.
///
/// A server that comes back at a random moment is seen at the next probe, so the wait after its
/// return is half the spacing on average, whatever the schedule: the cheapest schedule for a given
/// rate is an even one. So once settled, probes are exactly `interval` apart, and they are held to
/// one per `interval` on average from the start of the wait, the attempt that failed and the quick
/// first probe included: attempt number k of a wait starts no earlier than k intervals (plus a
/// small random phase) after it began. With 500 ms that is at most two attempts a second over any
/// wait, and a server that is back is noticed 0.25 s later on average.
struct ServerWaitSchedule: Sendable, Hashable {
    /// Delay before the first probe after the server stopped answering.
    var firstProbe: Duration = .milliseconds(100)
    /// Spacing between probe starts once settled, and the average spacing over the whole wait.
    var interval: Duration = .milliseconds(500)
    /// After waiting this long, probe every `slowInterval`...
    var slowAfter: Duration = .seconds(120)
    var slowInterval: Duration = .seconds(1)
    /// ...and after this long, every `slowestInterval`.
    var slowestAfter: Duration = .seconds(600)
    var slowestInterval: Duration = .seconds(2)
    /// Spread, as a share of the interval: each wait's probes are offset by a random phase of up
    /// to `jitter * interval` (0.1: 0-50 ms), and the slow intervals vary by ±`jitter`, so many
    /// clients of one server do not probe in lockstep. A phase rather than a jittered spacing keeps
    /// the settled probes evenly spaced, which is what keeps the average wait at half the interval.
    var jitter: Double = 0.1

    /// The spacing before the probe that follows `probesSoFar` probes, after `waited` of waiting;
    /// `random` in 0...1. For the settled phase this is the spacing from the previous probe's
    /// start; `due(attempt:phase:)` is the floor that keeps the average.
    func delay(afterProbes probesSoFar: Int, waited: Duration, random: Double) -> Duration {
        if probesSoFar == 0 { return firstProbe }
        let base = settledInterval(waited: waited)
        guard base > interval else { return base }
        let factor = 1 - jitter + 2 * jitter * min(max(random, 0), 1)
        return base.scaled(by: factor)
    }

    /// How long after the start of a wait its attempt number `attempt` (1-based, the failed
    /// attempt that began the wait being the first) may start at the earliest: `attempt`
    /// intervals plus the wait's phase (`random` in 0...1, drawn once per wait), so that any
    /// stretch from the start of the wait holds at most one attempt per interval on average.
    func earliestStart(ofAttempt attempt: Int, random: Double) -> Duration {
        interval * attempt + phase(random: random)
    }

    /// The wait's random phase: 0 to `jitter * interval`.
    func phase(random: Double) -> Duration {
        interval.scaled(by: jitter * min(max(random, 0), 1))
    }

    /// The settled spacing after `waited` of waiting.
    func settledInterval(waited: Duration) -> Duration {
        if waited >= slowestAfter { return slowestInterval }
        if waited >= slowAfter { return slowInterval }
        return interval
    }

    /// How long after a probe's connect gave up its failure may take to reach the scheduler
    /// (the engine's thread, the task's actor, on a loaded machine): a failure reported after
    /// the next probe fell due delays that probe by the difference.
    var reportAllowance: Duration = .milliseconds(150)

    /// How long a probe may take to connect: the spacing less `reportAllowance`, at most 90 % of
    /// it (`1 - jitter`; a probe that has not connected by the time the next is due is as good as
    /// lost, and its SYN would only be retransmitted after a second anyway; ending it early
    /// enough for its failure to be known before the next is due keeps probes of a blackholed
    /// server on the interval rather than on interval + slack), but never less than four connect
    /// round trips seen on this host, nor less than 2 s before any connection to the host
    /// succeeded (so a distant server is not cut off before it could answer).
    func connectTimeout(waited: Duration, connectTime: Duration?) -> Duration {
        let settled = settledInterval(waited: waited)
        guard let connectTime else { return max(settled, .seconds(2)) }
        let beforeTheNext = min(settled.scaled(by: 1 - jitter), settled - reportAllowance)
        return max(beforeTheNext, connectTime * 4)
    }
}
