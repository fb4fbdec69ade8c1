/// The one back-off of the package: a delay that starts at `initial` and doubles with each
/// consecutive failure, never above `maximum`. The download engine (with jitter and the
/// server's Retry-After on top), the connectivity check, host lookups and the system-bus
/// reconnect all wait this way; only the numbers differ.
package struct ExponentialBackoff: Sendable, Hashable {
    /// The delay after the first failure.
    package var initial: Duration
    /// The longest delay.
    package var maximum: Duration

    package init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The delay before retry number `failures` (1-based count of consecutive failures):
    /// `initial * 2^(failures-1)`, capped at `maximum`; zero when nothing failed.
    package func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        // 2^30 times any initial delay is past every maximum the package uses; the cap keeps the
        // shift from overflowing for a count that keeps growing.
        return min(initial * (1 << min(failures - 1, 30)), maximum)
    }

    /// The delay that follows `previous` (nil: the first failure): doubled, capped at `maximum`.
    package func delay(after previous: Duration?) -> Duration {
        previous.map { min($0 * 2, maximum) } ?? initial
    }
}
