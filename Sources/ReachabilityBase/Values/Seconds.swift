/// A span of time given in seconds: `30`, `0.25`, `1e3` (`DecimalText`). Rounded up to the
/// whole millisecond, so a positive value never becomes zero; within `range`, which never
/// reaches past `Duration.maximumCountable` (100 years).
package struct Seconds: TextValueKind {
    /// The spans accepted, after rounding.
    package let range: ClosedRange<Duration>

    /// Spans in `range` (its upper end held to 100 years).
    package init(_ range: ClosedRange<Duration>) {
        self.range = range.lowerBound...min(range.upperBound, .maximumCountable)
    }

    /// Any span above zero, up to `maximum`.
    package static func positive(upTo maximum: Duration = .maximumCountable) -> Seconds {
        Seconds(.milliseconds(1)...maximum)
    }

    package var expectation: String { Self.expectation(range) }

    package func value(from text: String) -> Duration? {
        guard let seconds = DecimalText.number(text), let span = Self.duration(seconds), range.contains(span) else { return nil }
        return span
    }

    /// `seconds` rounded up to the millisecond; nil beyond `Duration.maximumCountable`.
    static func duration(_ seconds: Double) -> Duration? {
        let milliseconds = (seconds * 1000).rounded(.up)
        guard milliseconds.isFinite, milliseconds >= 0,
              milliseconds <= Double(Duration.maximumCountable.milliseconds) else { return nil }
        return .milliseconds(Int64(milliseconds))
    }

    /// `a number of seconds from 1 to 86400`, `a number of seconds above 0, at most 31536000`,
    /// `a number of seconds, 0 or more`.
    static func expectation(_ range: ClosedRange<Duration>) -> String {
        let lower: String = switch range.lowerBound {
        case .zero: ", 0 or more"
        case .milliseconds(1): " above 0"
        default: " from \(range.lowerBound.formattedSeconds)"
        }
        guard range.upperBound < .maximumCountable else { return "a number of seconds\(lower)" }
        let upper = range.lowerBound > .milliseconds(1) ? " to " : ", at most "
        return "a number of seconds\(lower)\(upper)\(range.upperBound.formattedSeconds)"
    }
}

/// How long to wait: a span, or for ever.
package enum TimeLimit: Sendable, Hashable {
    /// At most this long.
    case after(Duration)
    /// No limit.
    case never

    /// The span; nil for no limit.
    package var duration: Duration? {
        if case .after(let span) = self { return span }
        return nil
    }
}

/// A limit in seconds that may also be none: `inf` (or `infinity`), and any number of seconds
/// beyond `Duration.maximumCountable` (100 years), mean no limit; other values are `Seconds`
/// from `minimum`, rounded up to the millisecond.
package struct SecondsOrForever: TextValueKind {
    /// The shortest limit.
    package let minimum: Duration

    package init(minimum: Duration = .zero) { self.minimum = minimum }

    package var expectation: String { Seconds.expectation(minimum...Duration.maximumCountable) + ", or 'inf'" }

    package func value(from text: String) -> TimeLimit? {
        if text == "inf" || text == "infinity" { return .never }
        guard let seconds = DecimalText.number(text) else { return nil }
        guard let span = Seconds.duration(seconds) else { return seconds > 0 ? .never : nil }
        return span >= minimum ? .after(span) : nil
    }
}
