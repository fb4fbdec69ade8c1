import ReachabilityAgent
import ReachabilityEvents
/// `reachability agent metrics [--format openmetrics|prometheus]`.
struct AgentMetricsCommand: Command, OptionTable {
    static let name = "agent metrics"
    static let abstract = "Print the running agent's path and download metrics (OpenMetrics text)."
    static let table: [OptionRow<Self>] = [
        .custom(.value("format", valueName: "format", help: "openmetrics (default: OpenMetrics 1.0, ends with '# EOF') or prometheus (text 0.0.4, as --metrics-file writes it)."),
                into: \.metricsFormat, read: format),
    ] + ControlOptions.rows(at: \.control)
    static let discussion: String? = """
        Counters count from the agent's start (reachability_start_timestamp_seconds). No metric \
        carries a URL: per-download detail is in 'queue list'. Metric names and meanings: docs/metrics.md.
        """ + "\n\n" + ControlOptions.discussion

    var metricsFormat = MetricsFormat.openMetrics
    var control = ControlOptions()

    /// `--format`: a name of `MetricsFormat`, with a suggestion for a near miss.
    private static func format(_ arguments: ParsedArguments, _ option: Option) throws -> MetricsFormat {
        guard let text = arguments.value(option) else { return .openMetrics }
        guard let format = MetricsFormat(rawValue: text) else {
            let names = MetricsFormat.allCases.map(\.rawValue)
            throw UsageError.invalidValue(text, for: option, "expected \(names.joined(separator: " or "))"
                                          + Suggestion.clause(for: text, among: names))
        }
        return format
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(.metrics(metricsFormat), in: context)
        guard let metrics = response.metrics else {
            throw CommandFailure(message: "the agent sent no metrics (an agent older than this command?)", exitCode: .failure)
        }
        context.output.text(metrics)
        return .success
    }
}
