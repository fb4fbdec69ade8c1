import FoundationEssentials
import LinuxSystem

/// A minimal logger shaped like swift-log: libraries accept one and never create one.
///
/// Lines look like `<ISO8601> <level> <label>: key=value ... message` on the sink (stderr by
/// default). The default, `.silent`, drops everything.
public struct Logger: Sendable {
    /// Severity, lowest first.
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        /// Very chatty detail.
        case trace
        /// Developer detail.
        case debug
        /// Normal operation.
        case info
        /// Something odd but handled.
        case warning
        /// Something failed.
        case error

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        var name: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .warning: "warning"
            case .error: "error"
            }
        }
    }

    /// The subsystem name printed on each line.
    public var label: String
    /// Messages below this level are dropped.
    public var minimumLevel: Level
    private let sink: (@Sendable (String) -> Void)?

    /// A logger writing formatted lines to `sink` (stderr when nil).
    public init(label: String, minimumLevel: Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.label = label
        self.minimumLevel = minimumLevel
        self.sink = sink ?? { line in Self.writeToStandardError(line + "\n") }
    }

    private init(silentLabel: String) {
        label = silentLabel
        minimumLevel = .error
        sink = nil
    }

    /// A logger that drops everything.
    public static let silent = Logger(silentLabel: "silent")

    /// Logs `message` with optional key/value metadata.
    public func log(_ level: Level, _ message: @autoclosure () -> String,
                    metadata: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        guard let sink, level >= minimumLevel else { return }
        let fields = metadata().map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        let time = Timestamp.iso8601(Date())
        sink("\(time) \(level.name) \(label): \(fields.isEmpty ? "" : fields + " ")\(message())")
    }

    /// Logs at debug level.
    public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.debug, message(), metadata: metadata())
    }
    /// Logs at info level.
    public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.info, message(), metadata: metadata())
    }
    /// Logs at warning level.
    public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.warning, message(), metadata: metadata())
    }
    /// Logs at error level.
    public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.error, message(), metadata: metadata())
    }

    /// Writes the whole line to fd 2; drops it on an error (a logger has nowhere to report its
    /// own failure).
    static func writeToStandardError(_ line: String) {
        try? FileDescriptor.standardError.writeAll(Array(line.utf8))
    }
}
