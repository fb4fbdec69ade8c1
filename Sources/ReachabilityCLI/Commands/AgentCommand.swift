import Dispatch
import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import Synchronization
import ReachabilityAgent

/// `reachability agent`: the long-running download agent with a control socket.
struct AgentCommand: Command {
    static let name = "agent"
    static let abstract = "Run the download agent: resume unfinished downloads, follow the network path, accept queue commands."
    static let stateDirectory = Option.value(
        "state-dir", valueName: "dir",
        help: "State directory (socket, lock, log, resume records). Default: $REACHABILITY_STATE_DIR, else $XDG_STATE_HOME/reachability, else /var/lib/reachability as root, else ~/.local/state/reachability.")
    static let maximumConcurrent = Option.value(
        "max-concurrent", valueName: "n", help: "Downloads transferring at once (1...64, default 4).")
    static let connections = Option.value(
        "connections", valueName: "n",
        help: "Open at most this many connections to one server at once, over every download (1-\(DownloadAgent.maximumConnectionsPerHostLimit), default \(DownloadAgent.defaultConnectionsPerHost)); see 'reachability help download'.")
    static let noExpensive = Option.flag(
        "no-expensive", help: "Keep new downloads off expensive paths (cellular-like, or metered per NetworkManager): they pin to a cheaper interface or wait, and stop (checkpointed) when their path turns expensive.")
    static let noRoaming = Option.flag(
        "no-roaming", help: "Keep new downloads off modems registered on a visited network (roaming, per ModemManager).")
    static let logSize = Option.value(
        "log-size", valueName: "bytes", help: "Rotate agent.log at this size (default 1m; k, m, g, t suffixes); three old files are kept.")
    static let logSizeValue = ByteCount(1024...(1 << 40))
    static let options = [stateDirectory, maximumConcurrent, connections, noExpensive, noRoaming, logSize] + TransportOptions.all
        + MetricsOptions.all + MonitorOptions.all
    static let discussion: String? = """
        Events (path changes, download events, control requests) are printed as NDJSON on stdout and \
        appended to STATE_DIR/agent.log. Control it with 'reachability queue add|list|pause|resume|cancel' \
        and 'reachability agent status' over STATE_DIR/agent.sock (0600; only the same user or root); \
        'reachability agent metrics' prints the path and download metrics in OpenMetrics text. \
        --limit-rate, --cacert and --proxy apply to every download the agent runs; request headers \
        are not kept (see 'reachability help queue add').

        SIGTERM/SIGINT checkpoint every transfer and exit. SIGHUP re-reads STATE_DIR/agent.conf \
        (lines 'max-concurrent=N', 'connections=N', 'no-expensive=true|false', 'no-roaming=true|false' and \
        'download-dir=/abs/dir'; values there override the command line; no-expensive and no-roaming \
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

    var stateDirectoryArgument: String?
    var settings: AgentSettings
    var logSizeLimit: Int
    var monitor: MonitorOptions
    var metrics: MetricsOptions
    /// `--limit-rate`, `--cacert`, `--proxy`: for every download, restored ones too.
    var transport: TransportOptions

    init(arguments: ParsedArguments) throws {
        stateDirectoryArgument = arguments.value(Self.stateDirectory)
        settings = AgentSettings(
            maximumConcurrentDownloads: try arguments.value(Self.maximumConcurrent, as: AgentSettings.concurrency) ?? 4,
            allowsExpensive: !arguments.isSet(Self.noExpensive),
            allowsRoaming: !arguments.isSet(Self.noRoaming))
        settings.maximumConnectionsPerHost = try arguments.value(Self.connections, as: AgentSettings.connections)
            ?? DownloadAgent.defaultConnectionsPerHost
        logSizeLimit = Int(try arguments.value(Self.logSize, as: Self.logSizeValue) ?? 1 << 20)
        monitor = try MonitorOptions(arguments: arguments)
        metrics = try MetricsOptions(arguments: arguments)
        transport = try TransportOptions(arguments: arguments)
    }

    /// Test knob (not in --help): how long a control request may take from its first byte.
    static let requestDeadline = EnvironmentValue("REACHABILITY_CONTROL_REQUEST_DEADLINE", Seconds.positive(upTo: .seconds(86_400)))

    func run(in context: CommandContext) async throws -> ExitCode {
        let plan = try AgentPlan.prepare(self, in: context)
        return try await AgentRun(command: self, plan: plan, context: context).execute()
    }

    /// Reads `agent.conf` over the command line's settings (at start and on SIGHUP).
    func loadSettings(_ path: String, in context: CommandContext) throws -> AgentSettings {
        guard let text = try context.readFile(path) else { return settings }
        return try AgentSettings.parse(text, base: settings, path: path)
    }

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

