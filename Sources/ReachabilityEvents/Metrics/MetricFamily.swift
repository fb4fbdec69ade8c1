import FoundationEssentials

/// One metric family (OpenMetrics' MetricFamily): a name, a type, help and its samples.
///
/// Only gauges and counters: OpenMetrics' `info` and `stateset` types make node_exporter's
/// textfile collector (a Prometheus text-format parser) reject the whole file, so states are
/// gauges with one sample per state, 1 for the current one.
package struct MetricFamily: Sendable, Equatable {
    /// The two types the tool exposes.
    package enum Kind: String, Sendable {
        case gauge, counter
    }

    /// The family name, without `_total` for counters; ends with `_UNIT` when `unit` is set.
    package var name: String
    package var kind: Kind
    /// `seconds` or `bytes`, when the value has one.
    package var unit: String?
    /// One sentence.
    package var help: String
    package var samples: [MetricSample]
    /// For counters: when counting started (Unix seconds), OpenMetrics' `_created` sample, so a
    /// reader can tell a restart (counters back to zero) from a quiet period.
    package var created: Date?

    package init(_ name: String, _ kind: Kind, unit: String? = nil, help: String, created: Date? = nil, samples: [MetricSample]) {
        self.name = name
        self.kind = kind
        self.unit = unit
        self.help = help
        self.samples = samples
        self.created = created
    }

    /// A family with one unlabelled sample.
    package init(_ name: String, _ kind: Kind, unit: String? = nil, help: String, created: Date? = nil, value: Double) {
        self.init(name, kind, unit: unit, help: help, created: created, samples: [MetricSample(value)])
    }
}

/// One sample: label pairs in order, and the value.
package struct MetricSample: Sendable, Equatable {
    package var labels: [(name: String, value: String)]
    package var value: Double

    package init(_ value: Double, labels: [(name: String, value: String)] = []) {
        self.labels = labels
        self.value = value
    }

    package static func == (lhs: MetricSample, rhs: MetricSample) -> Bool {
        lhs.value == rhs.value && lhs.labels.map(\.name) == rhs.labels.map(\.name) && lhs.labels.map(\.value) == rhs.labels.map(\.value)
    }
}

/// The two text expositions of the same families.
public enum MetricsFormat: String, Codable, Sendable, CaseIterable {
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`): `# TYPE`/`# UNIT`/`# HELP`,
    /// counters as `NAME_total` with `NAME_created`, `# EOF` last. What `agent metrics` prints.
    case openMetrics = "openmetrics"
    /// Prometheus text 0.0.4, what node_exporter's textfile collector parses (its parser names a
    /// counter `NAME_total` in `# TYPE` and ignores `# UNIT`/`# EOF`). What `--metrics-file` writes.
    case prometheus
}

/// Renders families as text. Label values are escaped (`\\`, `\"`, `\n`), so a hostile
/// interface name cannot end a label, add a sample or break a line.
package enum MetricsText {
    package static func render(_ families: [MetricFamily], format: MetricsFormat) -> String {
        var text = ""
        for family in families {
            switch format {
            case .openMetrics:
                text += "# TYPE \(family.name) \(family.kind.rawValue)\n"
                if let unit = family.unit { text += "# UNIT \(family.name) \(unit)\n" }
                text += "# HELP \(family.name) \(escapeHelp(family.help, format: format))\n"
            case .prometheus:
                let exposed = sampleName(family)
                text += "# HELP \(exposed) \(escapeHelp(family.help, format: format))\n"
                text += "# TYPE \(exposed) \(family.kind.rawValue)\n"
            }
            for sample in family.samples {
                text += line(sampleName(family), sample.labels, sample.value)
                if format == .openMetrics, family.kind == .counter, let created = family.created {
                    text += line(family.name + "_created", sample.labels, created.timeIntervalSince1970)
                }
            }
        }
        if format == .openMetrics { text += "# EOF\n" }
        return text
    }

    /// `NAME_total` for counters, `NAME` for gauges.
    package static func sampleName(_ family: MetricFamily) -> String {
        family.kind == .counter ? family.name + "_total" : family.name
    }

    private static func line(_ name: String, _ labels: [(name: String, value: String)], _ value: Double) -> String {
        var text = name
        if !labels.isEmpty {
            text += "{" + labels.map { "\($0.name)=\"\(escapeLabelValue($0.value))\"" }.joined(separator: ",") + "}"
        }
        return text + " " + number(value) + "\n"
    }

    /// A label value between double quotes: backslash, double quote and line feed escaped, as
    /// both text formats require (everything else is literal UTF-8).
    package static func escapeLabelValue(_ value: String) -> String {
        escape(value, quotes: true)
    }

    /// HELP text: OpenMetrics escapes `\`, `"` and line feeds there; the Prometheus format only
    /// `\` and line feeds (its parser would keep `\"` as two characters).
    package static func escapeHelp(_ help: String, format: MetricsFormat) -> String {
        escape(help, quotes: format == .openMetrics)
    }

    /// Backslash and line feed escaped, double quotes too when `quotes`. By hand, not with
    /// `replacingOccurrences`: that is Foundation proper's (NSString), and one call to it links
    /// CoreFoundation, ICU and their load-time initialiser into every command.
    private static func escape(_ text: String, quotes: Bool) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\"" where quotes: escaped += "\\\""
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }

    /// Integers without a fraction, other values to the millisecond (seconds and timestamps
    /// need no more); `+Inf`/`-Inf`/`NaN` spelled as both formats want.
    package static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 9_007_199_254_740_992 { return String(Int64(value)) }
        let milliseconds = (value * 1000).rounded() / 1000
        return milliseconds.isFinite ? "\(milliseconds)" : "\(value)"
    }
}
