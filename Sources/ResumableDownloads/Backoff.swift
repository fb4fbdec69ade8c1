import Foundation

/// Exponential backoff with jitter, and `Retry-After` parsing.
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
        guard failures > 0 else { return .zero }
        let exponent = min(failures - 1, 30)
        let base = min(seconds(initial) * pow(2, Double(exponent)), seconds(maximum))
        let factor = 0.5 + 0.5 * min(max(jitter, 0), 1)
        return .milliseconds(Int64((base * factor * 1000).rounded()))
    }

    /// The delay for an HTTP status answer: the server's `Retry-After` when present (capped),
    /// otherwise the jittered backoff.
    func delay(afterFailures failures: Int, retryAfter: Duration?, jitter: Double) -> Duration {
        if let retryAfter { return min(max(retryAfter, .zero), maximumRetryAfter) }
        return delay(afterFailures: failures, jitter: jitter)
    }

    private func seconds(_ duration: Duration) -> Double {
        let parts = duration.components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}

/// When to try a server again while it does not answer on a working path (refused, reset,
/// timed out, DNS failing): quickly at first, since most such failures are blips (a restart, a
/// failover), then at a steady, cheap pace that still notices the server's return within a
/// fraction of a second, slowing down only after minutes. Shared by every download of a host, so
/// the pace is per host, however many downloads wait.
struct ServerWaitSchedule: Sendable, Hashable {
    /// Delay before the first probe after the server stopped answering.
    var firstProbe: Duration = .milliseconds(100)
    /// Spacing between probe starts once settled.
    var interval: Duration = .milliseconds(500)
    /// After waiting this long, probe every `slowInterval`...
    var slowAfter: Duration = .seconds(120)
    var slowInterval: Duration = .seconds(1)
    /// ...and after this long, every `slowestInterval`.
    var slowestAfter: Duration = .seconds(600)
    var slowestInterval: Duration = .seconds(2)
    /// Spread of each settled interval (0.1: 90-110 %), so many clients of one server do not probe
    /// in lockstep; the mean spacing stays `interval`.
    var jitter: Double = 0.1

    /// The spacing before the probe that follows `probesSoFar` probes, after `waited` of waiting;
    /// `random` in 0...1.
    func delay(afterProbes probesSoFar: Int, waited: Duration, random: Double) -> Duration {
        if probesSoFar == 0 { return firstProbe }
        let base = settledInterval(waited: waited)
        let factor = 1 - jitter + 2 * jitter * min(max(random, 0), 1)
        return .microseconds(Int64(((base / .microseconds(1)) * factor).rounded()))
    }

    /// The settled spacing after `waited` of waiting.
    func settledInterval(waited: Duration) -> Duration {
        if waited >= slowestAfter { return slowestInterval }
        if waited >= slowAfter { return slowInterval }
        return interval
    }

    /// How long a probe may take to connect: one settled interval (a probe that has not connected
    /// by the time the next is due is as good as lost, and its SYN would only be retransmitted
    /// after a second anyway), but never less than four connect round trips seen on this host,
    /// nor less than `floor` (2 s before any connection to the host succeeded, so a distant
    /// server is not cut off before it could answer).
    func connectTimeout(waited: Duration, connectTime: Duration?) -> Duration {
        let settled = settledInterval(waited: waited)
        guard let connectTime else { return max(settled, .seconds(2)) }
        return max(settled, connectTime * 4)
    }
}

/// A token bucket over attempt starts, so no server behaviour (a reset after every few bytes,
/// a 200 to every range) can make one download send more than a few requests a second.
struct AttemptRateLimiter: Sendable, Hashable {
    /// Attempts that may start back to back.
    var burst: Int = 4
    /// One more attempt is allowed per `interval` (0.5 s: two a second on average).
    var interval: Duration = .milliseconds(500)
    private var tokens: Double?
    private var updatedAt: ContinuousClock.Instant?

    init(burst: Int = 4, interval: Duration = .milliseconds(500)) {
        self.burst = max(1, burst)
        self.interval = interval
    }

    /// Takes a token at `now` and returns nil, or returns the instant one will be available
    /// (taking nothing).
    mutating func take(at now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        var available = tokens ?? Double(burst)
        if let updatedAt, interval > .zero {
            available = min(Double(burst), available + (now - updatedAt) / interval)
        }
        updatedAt = now
        tokens = available
        if available >= 1 {
            tokens = available - 1
            return nil
        }
        return now + interval * (1 - available)
    }
}

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
enum RetryAfter {
    /// Parses the header relative to `now`; nil when malformed. Dates in the past give zero.
    static func parse(_ value: String, now: Date = Date()) -> Duration? {
        let text = value.trimmingWhitespace()
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            guard let seconds = Int64(text) else { return nil }
            return .seconds(seconds)
        }
        guard let date = HTTPDate.parse(text) else { return nil }
        let interval = date.timeIntervalSince(now)
        return interval <= 0 ? .zero : .milliseconds(Int64((interval * 1000).rounded()))
    }
}

/// IMF-fixdate and the two obsolete HTTP date forms.
enum HTTPDate {
    static func parse(_ text: String) -> Date? {
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
