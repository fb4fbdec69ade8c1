/// A token bucket: `burst` events may happen back to back, then one more per `interval`.
///
/// The one rate limiter of the package: the path monitor's evaluations during a netlink storm,
/// and a download's attempt starts whatever the server does (a reset after a few bytes, a 200 to
/// every range). Pure: the owner passes the clock.
package struct TokenBucket: Sendable, Hashable {
    /// Events that may happen back to back.
    package let burst: Int
    /// One more event is allowed per `interval`; zero or less means no limit.
    package let interval: Duration
    private var tokens: Double
    private var refilledAt: ContinuousClock.Instant?

    /// A full bucket.
    package init(burst: Int, interval: Duration) {
        self.burst = max(1, burst)
        self.interval = interval
        tokens = Double(self.burst)
    }

    /// Takes a token at `now` and returns nil, or returns the instant one will be available
    /// (taking nothing).
    package mutating func take(at now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard interval > .zero else { return nil }
        if let refilledAt {
            tokens = min(Double(burst), tokens + (now - refilledAt) / interval)
        }
        refilledAt = now
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return now + interval * (1 - tokens)
    }

    /// Gives one token back (an attempt that turned out to make progress), never beyond `burst`.
    package mutating func refund() {
        tokens = min(Double(burst), tokens + 1)
    }
}
