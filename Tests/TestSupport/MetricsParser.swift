import Foundation
import Synchronization

/// Reads metrics text with a real parser: `prometheus_client` (Debian's
/// python3-prometheus-client, which `scripts/setup.sh` installs), its OpenMetrics parser or its
/// Prometheus text-format parser. Debian's own `/usr/bin/python3` is used, not the first
/// `python3` on PATH: a pyenv or venv interpreter does not see Debian's dist-packages.
///
/// A missing parser is an error, never a skip: the tests that call this must not pass without it.
public enum MetricsParser {
    /// `openmetrics` or `prometheus`, as the parser script names them.
    public enum Format: String, Sendable {
        case openMetrics = "openmetrics"
        case prometheus
    }

    /// One family as the parser returns it.
    public struct Family: Decodable, Sendable, Equatable {
        /// The family's name.
        public var name: String
        /// `counter`, `gauge`, ...
        public var type: String
        /// The unit (OpenMetrics), or empty.
        public var unit: String
        /// The HELP text.
        public var help: String
        /// Its samples.
        public var samples: [Sample]

        /// The samples named `name` (e.g. `x_total`), in order.
        public func samples(named name: String) -> [Sample] { samples.filter { $0.name == name } }
    }

    /// One sample: its full name, labels and value.
    public struct Sample: Decodable, Sendable, Equatable {
        /// The sample's full name.
        public var name: String
        /// Its labels.
        public var labels: [String: String]
        /// Its value.
        public var value: Double
    }

    /// The parser is missing or rejected the text.
    public struct Failure: Error, CustomStringConvertible {
        /// Why, and what to do.
        public var description: String
    }

    /// Debian's interpreter, which sees its dist-packages.
    public static let python = "/usr/bin/python3"

    static let script = """
        import json, sys
        try:
            if sys.argv[1] == "openmetrics":
                from prometheus_client.openmetrics.parser import text_string_to_metric_families
            else:
                from prometheus_client.parser import text_string_to_metric_families
        except ImportError as error:
            sys.stderr.write("%s\\n" % error)
            sys.exit(3)
        families = []
        for family in text_string_to_metric_families(sys.stdin.read()):
            families.append({"name": family.name, "type": family.type, "unit": family.unit or "",
                             "help": family.documentation,
                             "samples": [{"name": s.name, "labels": dict(s.labels), "value": s.value} for s in family.samples]})
        print(json.dumps(families))
        """

    /// The families in `text`; throws with the parser's own message when it rejects the text.
    public static func parse(_ text: String, format: Format) throws -> [Family] {
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw Failure(description: "\(python) is missing: run ./scripts/setup.sh (it installs python3 and python3-prometheus-client)")
        }
        let result = try ChildProcess.run(python, ["-c", script, format.rawValue], environment: nil, input: Data(text.utf8))
        let data = Data(result.standardOutput.utf8)
        let message = result.standardError
        switch result.status {
        case 0:
            return try JSONDecoder().decode([Family].self, from: data)
        case 3:
            throw Failure(description: "prometheus_client is not installed for \(python) (\(message.trimmingCharacters(in: .whitespacesAndNewlines))): run ./scripts/setup.sh, which installs Debian's python3-prometheus-client")
        default:
            throw Failure(description: "the \(format.rawValue) parser rejected the text: \(message)\n--- text ---\n\(text)")
        }
    }

    /// The family named `name`, or nil.
    public static func family(_ name: String, in families: [Family]) -> Family? {
        families.first { $0.name == name }
    }
}

/// Bytes handed from a reader thread.
private final class LockedData: Sendable {
    private let data = Mutex(Data())
    func set(_ value: Data) { data.withLock { $0 = value } }
    func get() -> Data { data.withLock { $0 } }
}
