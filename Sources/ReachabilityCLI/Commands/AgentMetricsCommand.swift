import ReachabilityAgent
import ReachabilityEvents
/// `reachability agent metrics [--format openmetrics|prometheus]`.
struct AgentMetricsCommand: Command {
    static let name = "agent metrics"
    static let abstract = "Print the running agent's path and download metrics (OpenMetrics text)."
    static let format = Option.value(
        "format", valueName: "format",
        help: "openmetrics (default: OpenMetrics 1.0, ends with '# EOF') or prometheus (text 0.0.4, as --metrics-file writes it).")
    static let options = [format, ControlOptions.stateDirectory]
    static let discussion: String? = """
        Counters count from the agent's start (reachability_start_timestamp_seconds). No metric \
        carries a URL: per-download detail is in 'queue list'. Metric names and meanings: docs/metrics.md.
        """ + "\n\n" + ControlOptions.discussion

    var metricsFormat: MetricsFormat
    var control: ControlOptions

    init(arguments: ParsedArguments) throws {
        metricsFormat = .openMetrics
        if let text = arguments.value(Self.format) {
            guard let format = MetricsFormat(rawValue: text) else {
                let names = MetricsFormat.allCases.map(\.rawValue)
                throw UsageError.invalidValue(text, for: Self.format, "expected \(names.joined(separator: " or "))"
                                              + Suggestion.clause(for: text, among: names))
            }
            metricsFormat = format
        }
        control = ControlOptions(arguments: arguments)
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
