import FoundationEssentials
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import ReachabilityAgent

/// `reachability agent`: the long-running download agent with a control socket.
struct AgentCommand: Command, OptionTable {
    static let name = "agent"
    static let abstract = "Run the download agent: resume unfinished downloads, follow the network path, accept queue commands."
    static let table: [OptionRow<Self>] = ControlOptions.rows(at: \.control) + [
        .custom(.value("max-concurrent", valueName: "n", help: "Downloads transferring at once (1...64, default 4)."),
                into: \.settings.maximumConcurrentDownloads) { try $0.value($1, as: AgentSettings.concurrency) ?? 4 },
        .custom(.value("connections", valueName: "n", help: "Open at most this many connections to one server at once, over every download (1-\(DownloadAgent.maximumConnectionsPerHostLimit), default \(DownloadAgent.defaultConnectionsPerHost)); see 'reachability help download'."),
                into: \.settings.maximumConnectionsPerHost) { try $0.value($1, as: DownloadAgent.connectionsPerHostValue) ?? DownloadAgent.defaultConnectionsPerHost },
        .flag("no-expensive", help: "Keep new downloads off expensive paths (cellular-like, or metered per NetworkManager): they pin to a cheaper interface or wait, and stop (checkpointed) when their path turns expensive.",
              clears: \.settings.allowsExpensive),
        .flag("no-roaming", help: "Keep new downloads off modems registered on a visited network (roaming, per ModemManager).",
              clears: \.settings.allowsRoaming),
        .custom(.value("log-size", valueName: "bytes", help: "Rotate agent.log at this size (default 1m; k, m, g, t suffixes); three old files are kept."),
                into: \.logSizeLimit) { Int(try $0.value($1, as: logSizeValue) ?? 1 << 20) },
    ] + TransportOptions.rows(at: \.transport) + MetricsOptions.rows(at: \.metrics) + MonitorOptions.rows(at: \.monitor) + [
        .then { _, command in command.settings.proxy = command.transport.proxy },
    ]
    static let logSizeValue = ByteCount(1024...(1 << 40))
    /// `agent.conf`'s keys as the help lists them, from the table its parser reads.
    static let agentConfigurationLines = AgentSettings.fileKeys.map { "'\($0.name)=\($0.form)'" }.joined(separator: ", ")
    static let discussion: String? = """
        Events (path changes, download events, control requests) are printed as NDJSON on stdout and \
        appended to STATE_DIR/agent.log. Control it with 'reachability queue add|list|pause|resume|cancel' \
        and 'reachability agent status' over STATE_DIR/agent.sock (0600; only the same user or root); \
        'reachability agent metrics' prints the path and download metrics in OpenMetrics text. \
        --limit-rate, --cacert and --proxy (or --no-proxy) apply to every download the agent runs (a \
        job's own 'queue add --proxy' wins); request headers \
        are not kept (see 'reachability help queue add').

        SIGTERM/SIGINT checkpoint every transfer and exit. SIGHUP re-reads STATE_DIR/agent.conf \
        (lines \(agentConfigurationLines); values there override the command line; no-expensive and no-roaming \
        apply to downloads queued afterwards). Queued files go \
        to STATE_DIR/files (named from the URL, sanitized) or, with -o, into a download-dir= directory; \
        an existing file is never replaced without 'queue add --replace'. With NOTIFY_SOCKET set the agent speaks \
        sd_notify (READY=1, STATUS=, WATCHDOG=1 at half of WATCHDOG_USEC); started by a systemd .socket unit \
        (LISTEN_FDS) it serves the socket systemd passes instead of binding agent.sock.

        The agent also runs ResumableURLSession's background sessions: their transfers go on when the \
        program that started them exits, their events wait in STATE_DIR/background until a process of the \
        session attaches, and the agent can start the session's program for them (a command, or a systemd \
        user unit). 'queue list' and 'agent status' show them with their session identifier.

        Exit status: 0 after SIGTERM/SIGINT; 1 when the agent cannot start (another agent holds \
        the state directory, socket or monitor failure); 66 when --cacert cannot be read; 73 when the \
        --metrics-file directory cannot be used; 78 for a bad agent.conf line or an unsafe state directory (another user's, or \
        writable by others: the message says how to fix it).
        """ + "\n\n" + MetricsOptions.discussion + "\n\n" + MonitorOptions.discussion

    /// `--state-dir`, as the control commands take it.
    var control = ControlOptions()
    var settings = AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true, allowsRoaming: true)
    var logSizeLimit = 1 << 20
    var monitor = MonitorOptions()
    var metrics = MetricsOptions()
    /// `--limit-rate`, `--cacert`, `--proxy`: for every download, restored ones too.
    var transport = TransportOptions()

    /// Hands the parsed options to `AgentDaemon.run`, which owns the agent's whole life, with this
    /// context's seams (scripted paths, clocks, signals and files in tests); the CLI-only parts
    /// (the `--cacert` check, `--metrics-file`, `--limit-rate`/`--proxy`) go in as closures.
    func run(in context: CommandContext) async throws -> ExitCode {
        // The agent serves each control connection on a thread of its own and builds large
        // transient replies; with glibc's defaults every arena kept its high-water mark: 73.5
        // MiB peak at 3,000 jobs against 53.4 MiB bounded (docs/benchmarks.md, issue 29).
        CurrentProcess.boundHeap(arenas: 2, mapThreshold: 256 << 10)
        let errorOutput = context.errorOutput
        let logger = monitor.isVerbose
            ? Logger(label: "agent", minimumLevel: .debug, sink: { errorOutput.line(TerminalText.escaped($0)) }) : Logger.silent
        let (monitor, transport, metrics, workingDirectory) = (monitor, transport, metrics, context.currentDirectory)
        let options = AgentDaemon.Options(
            stateDirectory: control.stateDirectoryArgument, settings: settings, logSizeLimit: logSizeLimit, logger: logger,
            startPaths: {
                let source = try monitor.startPathSource(in: context)
                return AgentDaemon.PathFeed(paths: { source.paths }, hostPaths: { source.paths(to: $0) }, cancel: { source.cancel() })
            },
            configureDownloads: { transport.apply(to: &$0, workingDirectory: workingDirectory) },
            openMetrics: {
                // A CA file that cannot be read would fail every TLS download later, one by one: say so now.
                if let authorities = transport.certificateAuthorityURL(workingDirectory: workingDirectory),
                   !FileManager.default.isReadableFile(atPath: authorities.path) {
                    throw CommandFailure(message: "cannot read --cacert \(authorities.path)", exitCode: .noInput)
                }
                return try metrics.open(in: context).map { AgentMetricsFile(file: $0, interval: metrics.interval, sleep: context.sleep) }
            })
        try await AgentDaemon.run(options, host: AgentDaemon.Host(
            output: { context.output.line($0) }, errorOutput: { errorOutput.line($0) },
            environment: context.environment, now: context.now, readFile: context.readFile,
            onSignals: context.onSignals, effectiveUserID: context.effectiveUserID,
            currentDirectory: context.currentDirectory))
        return .success
    }
}

/// `--metrics-file` as the agent keeps it: a `MetricsPublisher` every `--metrics-interval`.
struct AgentMetricsFile: AgentMetricsTarget {
    let file: MetricsFile
    let interval: Duration
    let sleep: @Sendable (Duration) async throws -> Void

    var path: String { file.path }

    func publish(render: @escaping @Sendable () async -> String,
                 report: @escaping @Sendable (String?) -> Void) async throws -> any AgentMetricsPublication {
        try await MetricsPublisher(file: file, interval: interval, sleep: sleep, render: render, report: report)
    }
}

extension MetricsPublisher: AgentMetricsPublication {}
