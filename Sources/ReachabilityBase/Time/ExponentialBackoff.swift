/// The one back-off of the package: a delay that starts at `initial` and doubles with each
/// consecutive failure, never above `maximum`. The download engine (with jitter and the
/// server's Retry-After on top), the connectivity check, host lookups and the system-bus
/// reconnect all wait this way; only the numbers differ.
package struct ExponentialBackoff: Sendable, Hashable {
    /// The delay after the first failure.
    package var initial: Duration
    /// The longest delay.
    package var maximum: Duration

    /// A back-off from `initial`, doubling up to `maximum`.
    package init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The delay before retry number `failures` (1-based count of consecutive failures):
    /// `initial * 2^(failures-1)`, capped at `maximum`; zero when nothing failed.
    package func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        // Doubled step by step rather than multiplied by 2^(failures-1): a delay from a library
        // caller's configuration (`.seconds(Int64.max)`) times 2^30 would overflow Duration and
        // trap. Each step stops at the maximum, so at most 128 steps are ever taken.
        var delay = min(initial, maximum)
        for _ in 1..<min(failures, 129) where delay > .zero && delay < maximum {
            delay = doubled(delay)
        }
        return delay
    }

    /// The delay that follows `previous` (nil: the first failure): doubled, capped at `maximum`.
    package func delay(after previous: Duration?) -> Duration {
        previous.map(doubled) ?? initial
    }

    /// `delay * 2`, capped at `maximum` without overflowing.
    private func doubled(_ delay: Duration) -> Duration {
        delay > maximum / 2 ? maximum : min(delay * 2, maximum)
    }
}
