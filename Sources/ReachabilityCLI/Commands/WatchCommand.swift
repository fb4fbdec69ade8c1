import LinuxReachability
import Synchronization
import ReachabilityEvents

/// `reachability watch`: print the current path, then one timestamped line per change, until
/// SIGINT/SIGTERM (exit 0).
struct WatchCommand: Command, OptionTable {
    static let name = "watch"
    static let abstract = "Print the path, then a timestamped line per change."
    static let table: [OptionRow<Self>] = [
        .flag("json", help: "Print one JSON object per line (NDJSON).", sets: \.isJSON),
        MonitorOptions.allInterfaces(sets: \.monitor.includesAllInterfaces),
    ] + MetricsOptions.rows(at: \.metrics) + MonitorOptions.rows(at: \.monitor)
    static let discussion: String? = """
        Lines are written as they happen, so the output can be piped. SIGINT or SIGTERM ends the \
        watch with exit status 0; if the monitor stops on its own, the exit status is 1; 66 when \
        --netns names no namespace, 77 when it lacks privilege; 73 when the --metrics-file directory \
        cannot be used.
        """ + "\n\n" + MetricsOptions.discussion + "\n\n" + MonitorOptions.discussion

    var isJSON = false
    var monitor = MonitorOptions()
    var metrics = MetricsOptions()

    func run(in context: CommandContext) async throws -> ExitCode {
        let metricsFile = try metrics.open(in: context)
        // Subscribed before the monitor starts: the first path and the connectivity check's answer
        // (which can follow within a millisecond) are both printed, in order.
        var subscription: AsyncStream<NetworkPath>?
        let (source, _) = try monitor.startPathSource(in: context, validate: { _ in }, prepare: { subscription = $0.paths })
        defer { source.cancel() }
        let paths = subscription ?? source.paths
        let pathMetrics = SharedPathMetrics(startedAt: context.now())
        pathMetrics.record(source.currentPath, at: context.now())
        var publisher: MetricsPublisher?
        if let metricsFile {
            let now = context.now, errorOutput = context.errorOutput
            publisher = try await MetricsPublisher(
                file: metricsFile, interval: metrics.interval, sleep: context.sleep,
                render: { MetricsText.render(pathMetrics.families(at: now()), format: .prometheus) },
                report: { failure in
                    errorOutput.line(TerminalText.escaped("\(Self.commandPath): " + (failure ?? "\(metricsFile.path) is written again")))
                })
        }
        // Cancelling the source finishes `paths`, which ends the loop below normally.
        let interruption = InterruptionFlag()
        let removeHandler = await context.onInterrupt {
            interruption.raise()
            source.cancel()
        }
        defer { removeHandler() }
        monitor.logger(in: context).info("watching for changes; SIGINT or SIGTERM stops")

        var previous: NetworkPath?
        for await path in paths {
            let time = context.now()
            pathMetrics.record(path, at: time)
            publisher?.refresh()
            guard !isRepeat(path, of: previous) else { continue }
            previous = path
            context.output.line(isJSON ? PathJSON.line(path, at: time) : PathText.line(path, at: time))
        }
        await publisher?.finish()
        guard interruption.isRaised else {
            context.errorOutput.line("\(Self.commandPath): the monitor stopped unexpectedly")
            return .failure
        }
        return .success
    }

    /// Whether printing `path` would repeat the previous line. PathMonitor already drops equal
    /// paths, but a text line shows only the route summary, so a change elsewhere (another interface
    /// losing carrier) would print the same words again; JSON shows everything, so any change counts.
    func isRepeat(_ path: NetworkPath, of previous: NetworkPath?) -> Bool {
        guard let previous else { return false }
        return isJSON ? path == previous : PathText.summary(path) == PathText.summary(previous)
    }
}

/// Set by the signal handler, so `watch` can tell a requested stop from the monitor ending on its own.
private final class InterruptionFlag: Sendable {
    private let raised = Atomic(false)

    func raise() { raised.store(true, ordering: .relaxed) }
    var isRaised: Bool { raised.load(ordering: .relaxed) }
}
