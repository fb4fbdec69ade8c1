/// A kind of value people give as text: a command-line option's, a configuration file key's or
/// an environment variable's. The kind owns the syntax, the bounds, the rounding and the error
/// text, so every place that reads such a value applies the same rules, and no text can trap.
///
/// The shape of swift-argument-parser's `ExpressibleByArgument`, with one difference: a kind is
/// a value rather than a type, so that one kind (seconds) serves options whose bounds differ
/// (`--metrics-interval` 1 to 86400, `--max-outage` 0 or more) and the bounds are in the text
/// of the error.
package protocol TextValueKind: Sendable {
    /// What the text stands for.
    associatedtype Value: Sendable

    /// What a valid text looks like, to follow "expected": `a number of seconds from 1 to 86400`.
    var expectation: String { get }

    /// The value `text` stands for, or nil when it stands for none (then `expectation` says why).
    func value(from text: String) -> Value?
}

extension TextValueKind {
    /// The value `text` stands for; `InvalidValue` with the text and the expectation otherwise.
    package func parse(_ text: String) throws(InvalidValue) -> Value {
        guard let value = value(from: text) else { throw InvalidValue(text: text, expectation: expectation) }
        return value
    }
}

/// One of a fixed set of names (`--priority low`): exactly a case's raw value, in any case.
package struct Choice<Value: RawRepresentable & CaseIterable & Sendable>: TextValueKind where Value.RawValue == String {
    package init() {}

    package var expectation: String { "one of " + Value.allCases.map(\.rawValue).joined(separator: ", ") }

    package func value(from text: String) -> Value? { Value(rawValue: text.lowercased()) }
}

/// A text that stands for no value of its kind.
package struct InvalidValue: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was given.
    package var text: String
    /// What a valid text looks like (`a number from 1 to 64`).
    package var expectation: String

    package init(text: String, expectation: String) {
        self.text = text
        self.expectation = expectation
    }

    /// `expected a number from 1 to 64`.
    package var description: String { "expected \(expectation)" }

    /// `max-concurrent: expected a number from 1 to 64, got '0'`, for a configuration key or an
    /// environment variable (options say it in swift-argument-parser's words instead).
    package func message(for name: String) -> String {
        "\(name): \(description), got '\(text)'"
    }
}

/// Decimal numbers as the value kinds accept them: digits with an optional fraction and an
/// optional exponent (`30`, `0.25`, `.5`, `1e3`). No sign (so `-1` is outside every range and
/// says so), no white space (a padded value is a mistake to point at, not to guess about), no
/// hexadecimal (`Double("0x10")` is 16), no `nan` or `inf` (a kind that means something by
/// `inf` says so itself), no digit separators.
package enum DecimalText {
    /// The number `text` spells, or nil. Finite or `+infinity` (an exponent too large).
    package static func number(_ text: some StringProtocol) -> Double? {
        let bytes = Array(text.utf8)
        var index = 0
        func digits() -> Int {
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
            return index - start
        }
        var mantissaDigits = digits()
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            mantissaDigits += digits()
        }
        guard mantissaDigits > 0 else { return nil }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { return nil }
        }
        guard index == bytes.count else { return nil }
        return Double(String(decoding: bytes, as: UTF8.self))
    }

    /// The whole number `text` spells in decimal digits alone (`64`), or nil (also when it does
    /// not fit an `Int64`).
    package static func integer(_ text: some StringProtocol) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int64(text)
    }
}
