/// A parsed `Content-Range` header value (RFC 9110 §14.4), bytes unit only; positions read
/// through `HTTPWire.digits`.
///
/// `bytes 100-199/1000` has `range` 100...199 and `totalLength` 1000; `bytes */1000` (sent with
/// 416) has no range; `bytes 0-9/*` has no total.
package struct ContentRange: Hashable, Sendable {
    /// First and last byte positions, inclusive; nil for the unsatisfied form `*/T`.
    package var range: ClosedRange<Int64>?
    /// The complete length; nil when the server wrote `*`.
    package var totalLength: Int64?

    /// A value as parsed (tests and callers that build one).
    package init(range: ClosedRange<Int64>?, totalLength: Int64?) {
        self.range = range
        self.totalLength = totalLength
    }

    /// Parses a header value; nil when it is malformed, uses another unit, or is inconsistent
    /// (last before first, last beyond the total, neither range nor total).
    package init?(_ value: String) {
        let trimmed = value.trimmingWhitespace()
        guard trimmed.count > 6, trimmed.prefix(5).lowercased() == "bytes",
              let afterUnit = trimmed.dropFirst(5).first, afterUnit == " " || afterUnit == "\t"
        else { return nil }
        let spec = trimmed.dropFirst(6).trimmingWhitespace()
        let parts = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let rangePart = parts[0], totalPart = parts[1]

        var total: Int64?
        if totalPart != "*" {
            guard let parsed = HTTPWire.digits(totalPart) else { return nil }
            total = parsed
        }
        if rangePart == "*" {
            guard let total else { return nil }
            self.init(range: nil, totalLength: total)
            return
        }
        let bounds = rangePart.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = HTTPWire.digits(bounds[0]), let last = HTTPWire.digits(bounds[1]),
              first <= last
        else { return nil }
        if let total, last >= total { return nil }
        self.init(range: first...last, totalLength: total)
    }
}
