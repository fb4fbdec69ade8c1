/// The one home of `Duration` arithmetic: conversions that every module needs and that must not
/// trap. `Duration` counts attoseconds in 128 bits, while the ways out of it (`components`,
/// `Int64(...)`) trap on values a user can type (`--max-outage 1e16` once died with SIGILL), so
/// every conversion here saturates instead.
extension Duration {
    /// The longest span the program counts: 100 years. Values people give are held to it
    /// (`Seconds`), so every duration derived from one fits in 64-bit nanoseconds (292 years),
    /// the unit of `Task.sleep`, dispatch and the kernel's timers.
    package static let maximumCountable = Duration.seconds(100 * 31_557_600)

    /// Whole milliseconds, rounded toward zero; saturates at `Int64`'s bounds.
    package var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        let (sum, overflowAgain) = product.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        return overflowAgain ? (seconds < 0 ? .min : .max) : sum
    }

    /// Whole milliseconds, rounded up (a positive span never becomes 0: a poll(2) timeout or a
    /// socket deadline); saturates at `Int64`'s bounds.
    package var millisecondsRoundedUp: Int64 {
        let truncated = milliseconds
        guard truncated != .max, self > .milliseconds(truncated) else { return truncated }
        return truncated + 1
    }

    /// Seconds as a floating-point number (Foundation's `TimeInterval`).
    package var timeInterval: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// `seconds` as a duration, to the microsecond (rounded to nearest), held to
    /// `0...maximumCountable`: NaN and negatives are zero, infinity and huge values the maximum.
    /// For `TimeInterval`s from callers (URLSession's timeouts) and computed rates.
    package init(clampingTimeInterval seconds: Double) {
        guard seconds > 0 else {
            self = .zero
            return
        }
        guard seconds < Duration.maximumCountable.timeInterval else {
            self = .maximumCountable
            return
        }
        self = .microseconds(Int64((seconds * 1_000_000).rounded()))
    }

    /// This duration times `factor`, to the microsecond (the schedules' jitter, phase and share),
    /// held to `0...maximumCountable` like `init(clampingTimeInterval:)`.
    package func scaled(by factor: Double) -> Duration {
        Duration(clampingTimeInterval: timeInterval * factor)
    }

    /// Seconds as written on a command line and in messages, exact to the millisecond:
    /// `30`, `0.5`, `0.001`, `86400`.
    package var formattedSeconds: String {
        let total = milliseconds
        let sign = total < 0 ? "-" : ""
        let magnitude = total.magnitude
        let whole = "\(sign)\(magnitude / 1000)"
        let fraction = magnitude % 1000
        guard fraction != 0 else { return whole }
        var digits = String(fraction)
        digits = String(repeating: "0", count: 3 - digits.count) + digits
        while digits.hasSuffix("0") { digits.removeLast() }
        return whole + "." + digits
    }
}
