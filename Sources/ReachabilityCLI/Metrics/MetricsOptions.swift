import FoundationEssentials
import ReachabilityBase

/// `--metrics-file` and `--metrics-interval`, shared by `watch` and `agent`.
struct MetricsOptions: OptionTable, Equatable {
    static let table: [OptionRow<Self>] = [
        .path("metrics-file", valueName: "path", expected: "a file path", help: "Keep metrics in this file for node_exporter's textfile collector (Prometheus text format; name it *.prom), replaced atomically.",
              into: \.path),
        .value("metrics-interval", valueName: "seconds", help: "Rewrite the metrics file at least this often (default 15), besides on every path change.",
               as: Seconds(.seconds(1)...Duration.seconds(86_400)), into: \.givenInterval),
        .then { _, options in
            guard options.givenInterval == nil || options.path != nil else {
                throw UsageError("'\(option("metrics-interval").synopsis)' needs '\(option("metrics-file").synopsis)'")
            }
        },
    ]

    /// Help paragraph for commands that take them.
    static let discussion = """
        With --metrics-file the file is written at start, on every path change, every --metrics-interval \
        seconds and at exit: a temporary file in the same directory is fsynced and renamed over it, so \
        node_exporter never reads half a file. Its directory must not be writable by other users \
        (/tmp is refused: another user could plant the file); the file is mode 0644 and holds no URLs. \
        Per-interface metrics cover the interfaces the path lists: the usable ones ('watch \
        --all-interfaces' lists every one). Metric names and meanings: docs/metrics.md.
        """

    /// `--metrics-file` as given, nil when absent.
    var path: String?
    /// `--metrics-interval` as given (only with `--metrics-file`).
    var givenInterval: Duration?
    /// How often the file is rewritten.
    var interval: Duration { givenInterval ?? .seconds(15) }

    init() {}

    /// Opens and checks the file's directory (relative paths against the working directory) and
    /// prints its warnings; nil without `--metrics-file`. Throws `CommandFailure` (exit 73).
    func open(in context: CommandContext) throws -> MetricsFile? {
        guard let path else { return nil }
        let absolute = path.hasPrefix("/") ? path
            : URL(fileURLWithPath: context.currentDirectory).appendingPathComponent(path).standardizedFileURL.path
        let file = try MetricsFile(path: absolute, effectiveUserID: context.effectiveUserID)
        for warning in file.warnings { context.errorOutput.line(TerminalText.escaped("Warning: \(warning)")) }
        return file
    }
}

/// Rewrites a metrics file: when asked (`refresh()`), every interval, and once more at `finish()`.
/// One task writes, so a slow write never lets an older snapshot land after a newer one; requests
/// that arrive while it writes collapse into one.
final class MetricsPublisher: Sendable {
    /// A write failed (`message`), or works again after failing (nil).
    typealias Report = @Sendable (_ failure: String?) -> Void

    private let triggers: AsyncStream<Void>.Continuation
    private let writer: Task<Void, Never>
    private let ticker: Task<Void, Never>

    /// Writes once before returning, so a file that cannot be written stops the command at
    /// start (throws `CommandFailure`) instead of failing quietly later.
    init(file: MetricsFile, interval: Duration, sleep: @escaping @Sendable (Duration) async throws -> Void,
         render: @escaping @Sendable () async -> String, report: @escaping Report) async throws {
        try file.write(await render())
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        triggers = continuation
        writer = Task {
            var lastFailure: String?
            for await _ in stream {
                let text = await render()
                do {
                    try file.write(text)
                    if lastFailure != nil { report(nil) }
                    lastFailure = nil
                } catch {
                    let message = "\(error)"
                    if message != lastFailure { report(message) }
                    lastFailure = message
                }
            }
        }
        ticker = Task {
            while (try? await sleep(interval)) != nil, !Task.isCancelled {
                continuation.yield()
            }
        }
    }

    /// Asks for a write soon (a path changed).
    func refresh() { triggers.yield() }

    /// Writes the final state and returns once no write is under way.
    func finish() async {
        ticker.cancel()
        triggers.yield()
        triggers.finish()
        await writer.value
    }
}
