import Dispatch
import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization

/// `reachability agent`: the long-running download agent with a control socket.
struct AgentCommand: Command {
    static let name = "agent"
    static let abstract = "Run the download agent: resume unfinished downloads, follow the network path, accept queue commands."
    static let stateDirectory = Option.value(
        "state-dir", valueName: "dir",
        help: "State directory (socket, lock, log, resume records). Default: $REACHABILITY_STATE_DIR, else $XDG_STATE_HOME/reachability, else /var/lib/reachability as root, else ~/.local/state/reachability.")
    static let maximumConcurrent = Option.value(
        "max-concurrent", valueName: "n", help: "Downloads transferring at once (1...64, default 4).")
    static let noExpensive = Option.flag(
        "no-expensive", help: "Keep new downloads off expensive (cellular-like) paths: they pin to a cheaper interface or wait.")
    static let logSize = Option.value(
        "log-size", valueName: "bytes", help: "Rotate agent.log at this size (default 1048576); three old files are kept.")
    static let options = [stateDirectory, maximumConcurrent, noExpensive, logSize] + TransportOptions.all
        + MetricsOptions.all + MonitorOptions.all
    static let discussion: String? = """
        Events (path changes, download events, control requests) are printed as NDJSON on stdout and \
        appended to STATE_DIR/agent.log. Control it with 'reachability queue add|list|pause|resume|cancel' \
        and 'reachability agent status' over STATE_DIR/agent.sock (0600; only the same user or root); \
        'reachability agent metrics' prints the path and download metrics in OpenMetrics text. \
        --limit-rate, --cacert and --proxy apply to every download the agent runs; request headers \
        are not kept (see 'reachability help queue add').

        SIGTERM/SIGINT checkpoint every transfer and exit. SIGHUP re-reads STATE_DIR/agent.conf \
        (lines 'max-concurrent=N', 'no-expensive=true|false' and 'download-dir=/abs/dir'; values there \
        override the command line; no-expensive applies to downloads queued afterwards). Queued files go \
        to STATE_DIR/files (named from the URL, sanitized) or, with -o, into a download-dir= directory; \
        an existing file is never replaced without 'queue add --replace'. With NOTIFY_SOCKET set the agent speaks \
        sd_notify (READY=1, STATUS=, WATCHDOG=1 at half of WATCHDOG_USEC).

        Exit status: 0 after SIGTERM/SIGINT; 1 when the agent cannot start (another agent holds \
        the state directory, socket or monitor failure); 66 when --cacert cannot be read; 73 when the \
        --metrics-file directory cannot be used; 78 for a bad agent.conf line or an unsafe state directory (another user's, or \
        writable by others: the message says how to fix it).
        """ + "\n\n" + MetricsOptions.discussion + "\n\n" + MonitorOptions.discussion

    var stateDirectoryArgument: String?
    var settings: AgentSettings
    var logSizeLimit: Int
    var monitor: MonitorOptions
    var metrics: MetricsOptions
    /// `--limit-rate`, `--cacert`, `--proxy`: for every download, restored ones too.
    var transport: TransportOptions

    init(arguments: ParsedArguments) throws {
        stateDirectoryArgument = arguments.value(Self.stateDirectory)
        var maximum = 4
        if let text = arguments.value(Self.maximumConcurrent) {
            guard let value = Int(text), (1...64).contains(value) else {
                throw UsageError.invalidValue(text, for: Self.maximumConcurrent, "expected a number from 1 to 64")
            }
            maximum = value
        }
        settings = AgentSettings(maximumConcurrentDownloads: maximum, allowsExpensive: !arguments.isSet(Self.noExpensive))
        logSizeLimit = 1 << 20
        if let text = arguments.value(Self.logSize) {
            guard let value = Int(text), value >= 1024 else {
                throw UsageError.invalidValue(text, for: Self.logSize, "expected a number of bytes, at least 1024")
            }
            logSizeLimit = value
        }
        monitor = try MonitorOptions(arguments: arguments)
        metrics = try MetricsOptions(arguments: arguments)
        transport = try TransportOptions(arguments: arguments)
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let checked = try AgentStateDirectory.prepare(
            try AgentStateDirectory.resolve(stateDirectoryArgument, environment: context.environment,
                                                               system: .current(context)))
        let directory = checked.path
        let lock = try AgentStateDirectory.lock(checked)
        _ = lock   // held until the process exits; flock is released by the kernel even after SIGKILL

        let configurationPath = AgentStateDirectory.configurationPath(in: directory)
        func loadSettings() throws -> AgentSettings {
            guard let text = try context.readFile(configurationPath) else { return settings }
            return try AgentSettings.parse(text, base: settings, path: configurationPath)
        }
        let initialSettings = try loadSettings()
        // A CA file that cannot be read would fail every TLS download later, one by one: say so now.
        if let authorities = transport.certificateAuthorityURL(workingDirectory: context.currentDirectory),
           !FileManager.default.isReadableFile(atPath: authorities.path) {
            throw CommandFailure(message: "cannot read --cacert \(authorities.path)", exitCode: .noInput)
        }
        let metricsFile = try metrics.open(in: context)

        let log = try RotatingLogFile(directory: checked, maximumSize: logSizeLimit)
        let output = context.output
        let now = context.now
        let emitLine: @Sendable (String) -> Void = { line in
            output.line(line)
            log.append(line)
        }
        let emit: @Sendable (EventSchema.Kind, String, [JSONValue.Member]) -> Void = { kind, event, fields in
            emitLine(EventSchema.line(kind, event, at: now(), fields))
        }
        let notifier = SystemdNotifier(environment: context.environment)

        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        let records = URL(fileURLWithPath: AgentStateDirectory.recordsDirectory(in: directory))
        let logger = monitor.isVerbose
            ? Logger(label: "agent", minimumLevel: .debug, sink: { context.errorOutput.line(TerminalText.escaped($0)) }) : Logger.silent
        let service = try AgentService(settings: initialSettings, environment: .init(
            stateDirectory: directory,
            makeAgent: { [transport] settings in
                var configuration = DownloadAgent.Configuration(stateDirectory: records,
                                                                maximumConcurrentDownloads: settings.maximumConcurrentDownloads,
                                                                logger: logger)
                transport.apply(to: &configuration, workingDirectory: context.currentDirectory)
                return try DownloadAgent(configuration: configuration, paths: source.paths,
                                         hostPaths: { source.paths(to: $0) })
            },
            emit: emitLine,
            summaryChanged: { summary in notifier.notify("STATUS=\(summary)") },
            now: now))

        emit(.agent, "started", [.init(key: "pid", value: .integer(Int(getpid()))),
                       .init(key: "stateDirectory", value: .string(directory)),
                       .init(key: "maxConcurrent", value: .integer(initialSettings.maximumConcurrentDownloads)),
                       .init(key: "allowsExpensive", value: .bool(initialSettings.allowsExpensive))])
        // Set once the metrics file has its first contents; path changes rewrite it.
        let metricsPublisher = Mutex<MetricsPublisher?>(nil)
        let pathTask = Task {
            for await path in source.paths {
                await service.pathChanged(path)
                metricsPublisher.withLock { $0 }?.refresh()
            }
        }
        defer { pathTask.cancel() }
        await service.start()
        if let metricsFile {
            do {
                let publisher = try await MetricsPublisher(
                    file: metricsFile, interval: metrics.interval, sleep: context.sleep,
                    render: { await service.metricsText(.prometheus) },
                    report: { failure in
                        if let failure {
                            emit(.agent, "metricsFailed", [.init(key: "file", value: .string(metricsFile.path)),
                                                           .init(key: "message", value: .string(failure))])
                        } else {
                            emit(.agent, "metricsRecovered", [.init(key: "file", value: .string(metricsFile.path))])
                        }
                    })
                metricsPublisher.withLock { $0 = publisher }
            } catch {
                await service.shutdown()
                throw error
            }
        }

        let server: ControlServer
        do {
            // Test knob (not in --help): REACHABILITY_CONTROL_REQUEST_DEADLINE seconds.
            var deadline = Duration.seconds(10)
            if let text = context.environment["REACHABILITY_CONTROL_REQUEST_DEADLINE"], let seconds = Double(text), seconds > 0 {
                deadline = .milliseconds(Int64(seconds * 1000))
            }
            server = try ControlServer(
                path: AgentStateDirectory.socketPath(in: directory), requestDeadline: deadline,
                handler: { command, id in await service.handle(command, id: id) },
                observer: { event in
                    let (name, fields) = Self.describe(event)
                    emit(.control, name, fields)
                })
        } catch {
            await service.shutdown()
            throw CommandFailure(message: "cannot listen on \(AgentStateDirectory.socketPath(in: directory)): \(error)", exitCode: .failure)
        }
        defer { server.stop() }
        // Handlers before "listening" and READY=1: a stop sent as soon as the agent says it is
        // ready (systemd, a script waiting for the event) shuts it down cleanly instead of
        // meeting the default action. `main` unblocked these for the process (a parent may hand
        // down a mask blocking them); a signal before the loop below waits in the stream.
        let (signals, signalContinuation) = AsyncStream.makeStream(of: AgentSignal.self)
        let removeHandlers = await context.onSignals([SIGINT, SIGTERM, SIGHUP]) { number in
            signalContinuation.yield(number == SIGHUP ? .reload : .terminate)
        }
        defer { removeHandlers() }
        emit(.agent, "listening", [.init(key: "socket", value: .string(server.path))])
        notifier.notify("READY=1")

        let watchdog = notifier.watchdogInterval.map { interval in
            Task {
                while !Task.isCancelled {
                    // Ping through the actor: a wedged service should stop the pings and get restarted.
                    if await service.ping() { notifier.notify("WATCHDOG=1") }
                    try? await Task.sleep(for: interval)
                }
            }
        }
        defer { watchdog?.cancel() }

        for await signal in signals {
            switch signal {
            case .reload:
                do {
                    let newSettings = try loadSettings()
                    notifier.notify("RELOADING=1")
                    await service.reload(newSettings)
                } catch {
                    emit(.agent, "reloadFailed", [.init(key: "message", value: .string("\(error)"))])
                }
                notifier.notify("READY=1")
            case .terminate:
                notifier.notify("STOPPING=1")
                emit(.agent, "stopping", [])
                server.stop()
                // Checkpointing is quick (fsync + record per transfer); bound it anyway so the
                // process always exits within systemd's and the 2 s.
                let finished = await Self.finishes(within: .milliseconds(1500)) { await service.shutdown() }
                // The last numbers (downloads checkpointed, paused or waiting) outlive the process.
                if let publisher = metricsPublisher.withLock({ $0 }) {
                    _ = await Self.finishes(within: .milliseconds(300)) { await publisher.finish() }
                }
                emit(.agent, "stopped", [.init(key: "checkpointed", value: .bool(finished))])
                signalContinuation.finish()
            }
        }
        return .success
    }

    private enum AgentSignal: Sendable { case terminate, reload }

    /// Runs `work` and says whether it ended within `limit`, returning at the limit either way.
    /// (A task group would not do: leaving its scope waits for every child, so a stuck
    /// `shutdown()` would hold the process past systemd's stop timeout.) Work still running is
    /// left behind; the process exits soon after.
    static func finishes(within limit: Duration, _ work: @escaping @Sendable () async -> Void) async -> Bool {
        let (outcome, continuation) = AsyncStream.makeStream(of: Bool.self)
        Task {
            await work()
            continuation.yield(true)
        }
        let timer = Task {
            try? await Task.sleep(for: limit)
            continuation.yield(false)
        }
        var iterator = outcome.makeAsyncIterator()
        let finished = await iterator.next() ?? false
        timer.cancel()
        continuation.finish()
        return finished
    }

    /// A control-server event as an event name and fields.
    static func describe(_ event: ControlServerEvent) -> (String, [JSONValue.Member]) {
        switch event {
        case .refused(let peer):
            return ("refused", [.init(key: "uid", value: .integer(Int(peer.uid))), .init(key: "pid", value: .integer(Int(peer.pid)))])
        case .request(let command, let peer):
            return ("request", [.init(key: "command", value: .string(ControlRequest(id: nil, command: command).command.rawValue)),
                                .init(key: "uid", value: .integer(Int(peer.uid))), .init(key: "pid", value: .integer(Int(peer.pid)))])
        case .rejected(let error, let peer):
            return ("rejected", [.init(key: "code", value: .string(error.code.rawValue)),
                                 .init(key: "message", value: .string(error.message)), .init(key: "uid", value: .integer(Int(peer.uid)))])
        case .error(let message):
            return ("error", [.init(key: "message", value: .string(message))])
        }
    }
}

