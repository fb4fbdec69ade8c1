/// A number of bytes, or of bytes per second: `1048576`, `512k`, `2m`, `1.5g` (`DecimalText`
/// with an optional `k`, `m`, `g` or `t` suffix in either case, 1024-based as curl's), rounded
/// down to whole bytes, within `range`.
package struct ByteCount: TextValueKind {
    /// The counts accepted, after rounding.
    package let range: ClosedRange<Int64>
    /// Whether the value is a rate (the error text says "bytes per second").
    package let isRate: Bool

    /// A number of bytes in `range`.
    package init(_ range: ClosedRange<Int64>) {
        self.range = range
        isRate = false
    }

    private init(rate range: ClosedRange<Int64>) {
        self.range = range
        isRate = true
    }

    /// Bytes per second in `range`.
    package static func rate(_ range: ClosedRange<Int64>) -> ByteCount { ByteCount(rate: range) }

    private static let multipliers: [UInt8: Double] = [
        UInt8(ascii: "k"): 1024, UInt8(ascii: "m"): 1024 * 1024, UInt8(ascii: "g"): 1024 * 1024 * 1024,
        UInt8(ascii: "t"): 1024 * 1024 * 1024 * 1024,
    ]

    package var expectation: String {
        let what = isRate ? "bytes per second, like 500k or 2m," : "a number of bytes (k, m, g, t: 1024-based)"
        return "\(what) from \(Self.format(range.lowerBound)) to \(Self.format(range.upperBound))"
    }

    package func value(from text: String) -> Int64? {
        var number = Substring(text)
        var multiplier = 1.0
        if let last = text.utf8.last, let factor = Self.multipliers[last | 0x20] {
            number = number.dropLast()
            multiplier = factor
        }
        guard let value = DecimalText.number(number) else { return nil }
        let bytes = (value * multiplier).rounded(.down)
        guard bytes >= Double(range.lowerBound), bytes <= Double(range.upperBound) else { return nil }
        return Int64(bytes)
    }

    /// `1024` as `1k`, `1099511627776` as `1t`; other counts in digits.
    static func format(_ count: Int64) -> String {
        for (suffix, shift) in [("t", 40), ("g", 30), ("m", 20), ("k", 10)] as [(String, Int64)]
        where count >= 1 << shift && count % (1 << shift) == 0 {
            return "\(count >> shift)\(suffix)"
        }
        return String(count)
    }
}

/// A whole number in decimal digits (`DecimalText.integer`), within `range`: `4`, `64`.
package struct Count: TextValueKind {
    /// The numbers accepted.
    package let range: ClosedRange<Int>
    /// What is counted, for the error text (`whole seconds`); nil: `a number`.
    package let unit: String?

    package init(_ range: ClosedRange<Int>, of unit: String? = nil) {
        self.range = range
        self.unit = unit
    }

    package var expectation: String { "\(unit ?? "a number") from \(range.lowerBound) to \(range.upperBound)" }

    package func value(from text: String) -> Int? {
        guard let number = DecimalText.integer(text), let value = Int(exactly: number), range.contains(value) else { return nil }
        return value
    }
}

/// Yes or no: `true`, `yes`, `1`, `false`, `no`, `0`, in any case.
package struct YesOrNo: TextValueKind {
    package init() {}

    package var expectation: String { "true or false" }

    package func value(from text: String) -> Bool? {
        switch text.lowercased() {
        case "true", "yes", "1": true
        case "false", "no", "0": false
        default: nil
        }
    }
}

/// A setting read from an environment variable and parsed by its kind; unset or empty is not
/// set. Test and tuning knobs (`REACHABILITY_DOWNLOAD_STALL_TIMEOUT`) and the system's own
/// (`WATCHDOG_USEC`) go through the same kinds as options, so a bad value is an error that says
/// what was expected, never a value out of range.
package struct EnvironmentValue<Kind: TextValueKind>: Sendable {
    /// The variable's name.
    package let name: String
    /// How its text is read.
    package let kind: Kind

    package init(_ name: String, _ kind: Kind) {
        self.name = name
        self.kind = kind
    }

    /// The value in `environment`; nil when unset or empty.
    package func value(in environment: [String: String]) throws(InvalidValue) -> Kind.Value? {
        guard let text = environment[name], !text.isEmpty else { return nil }
        return try kind.parse(text)
    }
}
