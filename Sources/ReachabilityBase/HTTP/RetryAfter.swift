import FoundationEssentials

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
package enum RetryAfter {
    /// Parses the header relative to `now`; nil when malformed. Dates in the past give zero.
    package static func parse(_ value: String, now: Date = Date()) -> Duration? {
        let text = value.trimmingWhitespace()
        if !text.isEmpty, text.utf8.allSatisfy(HTTPWire.isDigit) {
            guard let seconds = HTTPWire.digits(text) else { return nil }
            return .seconds(seconds)
        }
        guard let date = HTTPDate.parse(text) else { return nil }
        let interval = date.timeIntervalSince(now)
        return Duration(clampingTimeInterval: interval)
    }
}
