import Dispatch
import FoundationEssentials
import Glibc
import LinuxReachability
import ResumableDownloads
import Synchronization

/// `reachability agent`: the long-running download agent with a control socket.
struct AgentCommand: Command {
    static let name = "agent"
    static let abstract = "Run the download agent: resume unfinished downloads, follow the network path, accept queue commands."
    static let stateDirectory = Option.value(
        "state-dir", valueName: "dir",
        help: "State directory (socket, lock, log, resume records). Default: /var/lib/reachability as root, else $XDG_STATE_HOME/reachability (~/.local/state/reachability).")
    static let maximumConcurrent = Option.value(
        "max-concurrent", valueName: "n", help: "Downloads transferring at once (1...64, default 4).")
    static let noExpensive = Option.flag(
        "no-expensive", help: "Keep new downloads off expensive (cellular-like) paths: they pin to a cheaper interface or wait.")
    static let logSize = Option.value(
        "log-size", valueName: "bytes", help: "Rotate agent.log at this size (default 1048576); three old files are kept.")
    static let options = [stateDirectory, maximumConcurrent, noExpensive, logSize] + MonitorOptions.all
    static let discussion: String? = """
        Events (path changes, download events, control requests) are printed as NDJSON on stdout and \
        appended to STATE_DIR/agent.log. Control it with 'reachability queue add|list|pause|resume|cancel' \
        and 'reachability agent status' over STATE_DIR/agent.sock (0600; only the same user or root).

        SIGTERM/SIGINT checkpoint every transfer and exit. SIGHUP re-reads STATE_DIR/agent.conf \
        (lines 'max-concurrent=N' and 'no-expensive=true|false'; values there override the command line; \
        no-expensive applies to downloads queued afterwards). With NOTIFY_SOCKET set the agent speaks \
        sd_notify (READY=1, STATUS=, WATCHDOG=1 at half of WATCHDOG_USEC).

        Exit status: 0 after SIGTERM/SIGINT; 1 when the agent cannot start (another agent holds \
        the state directory, socket or monitor failure); 78 for a bad agent.conf line.
        """ + "\n\n" + MonitorOptions.discussion

    var stateDirectoryArgument: String?
    var settings: AgentSettings
    var logSizeLimit: Int
    var monitor: MonitorOptions

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
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let directory = AgentStateDirectory.resolve(stateDirectoryArgument, environment: context.environment, isRoot: geteuid() == 0)
        try AgentStateDirectory.prepare(directory)
        let lock = try AgentStateDirectory.lock(directory)
        _ = lock   // held until the process exits; flock is released by the kernel even after SIGKILL

        let configurationPath = AgentStateDirectory.configurationPath(in: directory)
        func loadSettings() throws -> AgentSettings {
            guard let text = try context.readFile(configurationPath) else { return settings }
            return try AgentSettings.parse(text, base: settings, path: configurationPath)
        }
        let initialSettings = try loadSettings()

        let log = try RotatingLogFile(path: AgentStateDirectory.logPath(in: directory), maximumSize: logSizeLimit)
        let output = context.output
        let now = context.now
        let emit: @Sendable (String, [JSONValue.Member]) -> Void = { event, fields in
            let line = JSONValue.object([.init(key: "time", value: .string(PathText.timestamp(now()))),
                                         .init(key: "event", value: .string(event))] + fields).serialized
            output.line(line)
            log.append(line)
        }
        let notifier = SystemdNotifier(environment: context.environment)

        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        let records = URL(fileURLWithPath: AgentStateDirectory.recordsDirectory(in: directory))
        let logger = monitor.isVerbose
            ? Logger(label: "agent", minimumLevel: .debug, sink: { context.errorOutput.line($0) }) : Logger.silent
        let service = try AgentService(settings: initialSettings, environment: .init(
            stateDirectory: directory,
            makeAgent: { settings in
                try DownloadAgent(configuration: .init(stateDirectory: records,
                                                       maximumConcurrentDownloads: settings.maximumConcurrentDownloads,
                                                       logger: logger),
                                  paths: source.paths)
            },
            emit: emit,
            summaryChanged: { summary in notifier.notify("STATUS=\(summary)") },
            now: now))

        emit("agent", [.init(key: "kind", value: .string("started")), .init(key: "pid", value: .integer(Int(getpid()))),
                       .init(key: "stateDirectory", value: .string(directory)),
                       .init(key: "maxConcurrent", value: .integer(initialSettings.maximumConcurrentDownloads)),
                       .init(key: "allowsExpensive", value: .bool(initialSettings.allowsExpensive))])
        let pathTask = Task {
            for await path in source.paths { await service.pathChanged(path) }
        }
        defer { pathTask.cancel() }
        await service.start()

        let server: ControlServer
        do {
            server = try ControlServer(
                path: AgentStateDirectory.socketPath(in: directory),
                handler: { command, id in await service.handle(command, id: id) },
                observer: { event in emit("control", Self.fields(event)) })
        } catch {
            await service.shutdown()
            throw CommandFailure(message: "cannot listen on \(AgentStateDirectory.socketPath(in: directory)): \(error)", exitCode: .failure)
        }
        defer { server.stop() }
        emit("agent", [.init(key: "kind", value: .string("listening")),
                       .init(key: "socket", value: .string(server.path))])
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

        // A parent may hand down a mask blocking these (Foundation's Process started from a
        // dispatch thread does); a process-directed signal needs one thread that accepts it.
        var mask = sigset_t()
        sigemptyset(&mask)
        for number in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&mask, number) }
        pthread_sigmask(SIG_UNBLOCK, &mask, nil)
        let (signals, signalContinuation) = AsyncStream.makeStream(of: AgentSignal.self)
        let removeInterrupt = await context.onInterrupt { signalContinuation.yield(.terminate) }
        defer { removeInterrupt() }
        let removeHangup = await HangupSignal.install { signalContinuation.yield(.reload) }
        defer { removeHangup() }

        for await signal in signals {
            switch signal {
            case .reload:
                do {
                    let newSettings = try loadSettings()
                    notifier.notify("RELOADING=1")
                    await service.reload(newSettings)
                } catch {
                    emit("agent", [.init(key: "kind", value: .string("reloadFailed")),
                                   .init(key: "message", value: .string("\(error)"))])
                }
                notifier.notify("READY=1")
            case .terminate:
                notifier.notify("STOPPING=1")
                emit("agent", [.init(key: "kind", value: .string("stopping"))])
                server.stop()
                // Checkpointing is quick (fsync + record per transfer); bound it anyway so the
                // process always exits within systemd's and the 2 s.
                let finished = await withTaskGroup(of: Bool.self) { group in
                    group.addTask { await service.shutdown(); return true }
                    group.addTask { try? await Task.sleep(for: .milliseconds(1500)); return false }
                    let first = await group.next() ?? false
                    group.cancelAll()
                    return first
                }
                emit("agent", [.init(key: "kind", value: .string("stopped")), .init(key: "checkpointed", value: .bool(finished))])
                signalContinuation.finish()
            }
        }
        return .success
    }

    private enum AgentSignal: Sendable { case terminate, reload }

    static func fields(_ event: ControlServerEvent) -> [JSONValue.Member] {
        switch event {
        case .refused(let peer):
            return [.init(key: "kind", value: .string("refused")), .init(key: "uid", value: .integer(Int(peer.uid))),
                    .init(key: "pid", value: .integer(Int(peer.pid)))]
        case .request(let command, let peer):
            return [.init(key: "kind", value: .string("request")), .init(key: "command", value: .string(ControlRequest(id: nil, command: command).command)),
                    .init(key: "uid", value: .integer(Int(peer.uid))), .init(key: "pid", value: .integer(Int(peer.pid)))]
        case .rejected(let error, let peer):
            return [.init(key: "kind", value: .string("rejected")), .init(key: "code", value: .string(error.code)),
                    .init(key: "message", value: .string(error.message)), .init(key: "uid", value: .integer(Int(peer.uid)))]
        case .error(let message):
            return [.init(key: "kind", value: .string("error")), .init(key: "message", value: .string(message))]
        }
    }
}

/// SIGHUP through a DispatchSource (the default action, terminate, is switched off while installed).
enum HangupSignal {
    /// SIGHUP through the same registration-aware installer as SIGINT/SIGTERM.
    static func install(_ handler: @escaping @Sendable () -> Void) async -> @Sendable () -> Void {
        await InterruptSignals.installReportingNumber(for: [SIGHUP]) { _ in handler() }
    }
}
