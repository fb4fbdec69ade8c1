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
