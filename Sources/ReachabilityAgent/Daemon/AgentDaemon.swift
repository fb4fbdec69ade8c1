import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import Synchronization
import ReachabilityEvents

/// What an agent run needs before it listens, checked first: the state directory (made, checked
/// and locked for the life of the process), the settings with `agent.conf`, the caller's own
/// checks (a readable `--cacert`, the metrics file's directory), the request deadline knob.
struct AgentPlan: Sendable {
    var directory: CheckedDirectory
    /// Held until the process exits; flock is released by the kernel even after SIGKILL.
    var lock: FileDescriptor
    var settings: AgentSettings
    var metricsFile: (any AgentMetricsTarget)?
    var requestDeadline: Duration
    /// The control server's threads' nice value (nil: as the process's).
    var controlThreadNice: Int32?
    /// Other spellings of the state directory (`AgentService.Environment.directoryAliases`).
    var directoryAliases: [String: String]
    /// A listening socket systemd passed (a .socket unit), served instead of binding agent.sock.
    var activation: SocketActivation.Outcome

    var path: String { directory.path }
    var configurationPath: String { AgentStateDirectory.configurationPath(in: path) }

    static func prepare(_ options: AgentDaemon.Options, host: AgentDaemon.Host) throws -> AgentPlan {
        let requestDeadline: Duration
        do {
            requestDeadline = try AgentDaemon.requestDeadline.value(in: host.environment) ?? .seconds(10)
        } catch {
            throw AgentFailure(error.message(for: AgentDaemon.requestDeadline.name), kind: .configuration)
        }
        let controlPriority: Int
        do {
            controlPriority = try AgentDaemon.controlPriority.value(in: host.environment) ?? 10
        } catch {
            throw AgentFailure(error.message(for: AgentDaemon.controlPriority.name), kind: .configuration)
        }
        let requested = try AgentStateDirectory.resolve(options.stateDirectory, environment: host.environment,
                                                        system: .current(effectiveUserID: host.effectiveUserID,
                                                                                 workingDirectory: host.currentDirectory))
        let directory = try AgentStateDirectory.prepare(requested)
        // The spelling the agent was given stays valid for `queue add -o` when links lead from it
        // (systemd's DynamicUser= link /var/lib/reachability -> private/reachability): the
        // control commands name the state directory as their user knows it.
        let aliases = AgentDestination.normalizedAbsolutePath(requested).flatMap { $0 == directory.path ? nil : [$0: directory.path] } ?? [:]
        let lock = try AgentStateDirectory.lock(directory)
        let settings = try AgentDaemon.loadSettings(AgentStateDirectory.configurationPath(in: directory.path),
                                                    base: options.settings, host: host)
        // The caller's checks (a CA file that cannot be read would fail every TLS download later,
        // one by one) and its metrics file, in the order the command always made them.
        let metricsFile = try options.openMetrics()
        let activation = SocketActivation.take(environment: host.environment)
        if case .unusable(let message) = activation {
            throw AgentFailure(message, kind: .configuration)
        }
        return AgentPlan(directory: directory, lock: lock, settings: settings, metricsFile: metricsFile,
                         requestDeadline: requestDeadline, controlThreadNice: controlPriority == 0 ? nil : -Int32(controlPriority),
                         directoryAliases: aliases, activation: activation)
    }
}

/// The agent daemon: `run` is the one entry point, and owns the whole life of an agent process:
/// the state directory and its lock, `agent.conf`, the log and events, the service over the
/// path monitor, metrics, the control server, signals, sd_notify and the watchdog, until
/// SIGTERM or SIGINT checkpoints every transfer. The command line only parses its options into
/// `Options` and calls it.
package final class AgentDaemon: Sendable {
    /// Test hook: `renamed` makes the agent SIGKILL itself right after a verified file is renamed
    /// into place, before its record is removed (the crash window of issue 29).
    static let killPointVariable = "REACHABILITY_AGENT_TEST_KILL_AT"
    /// Test knob (not in --help): how long a control request may take from its first byte.
    static let requestDeadline = EnvironmentValue("REACHABILITY_CONTROL_REQUEST_DEADLINE", Seconds.positive(upTo: .seconds(86_400)))
    /// Tuning knob (not in --help): how many nice steps above the process the control server's
    /// threads run (nice -N; 0: as the process). Default 10, where permitted.
    static let controlPriority = EnvironmentValue("REACHABILITY_CONTROL_PRIORITY", Count(0...20, of: "nice steps"))

    let options: Options
    let plan: AgentPlan
    let host: Host
    private let log: RotatingLogFile
    private let notifier: SystemdNotifier
    /// Set once the metrics file has its first contents; path changes rewrite it.
    private let metricsPublisher = Mutex<(any AgentMetricsPublication)?>(nil)

    private enum AgentSignal: Sendable { case terminate, reload }

    /// Runs an agent until SIGTERM or SIGINT: prepares and locks the state directory, reads
    /// `agent.conf`, serves the control socket, follows signals and speaks sd_notify, and
    /// returns after checkpointing every transfer. Throws `AgentFailure` (or what `options`'
    /// parts throw) when the agent cannot start.
    package static func run(_ options: Options, host: Host) async throws {
        let plan = try AgentPlan.prepare(options, host: host)
        try await AgentDaemon(options: options, plan: plan, host: host).execute()
    }

    private init(options: Options, plan: AgentPlan, host: Host) throws {
        self.options = options
        self.plan = plan
        self.host = host
        log = try RotatingLogFile(directory: plan.directory, maximumSize: options.logSizeLimit)
        notifier = SystemdNotifier(environment: host.environment)
    }

    /// Reads `agent.conf` over the command line's settings (at start and on SIGHUP).
    static func loadSettings(_ path: String, base: AgentSettings, host: Host) throws -> AgentSettings {
        guard let text = try host.readFile(path) else { return base }
        return try AgentSettings.parse(text, base: base, path: path)
    }

    /// An event line to stdout and to `agent.log`.
    @Sendable private func emitLine(_ line: String) {
        host.output(line)
        log.append(line)
    }

    @Sendable private func emit(_ kind: EventSchema.Kind, _ event: String, _ fields: [JSONValue.Member]) {
        emitLine(EventSchema.line(kind, event, at: host.now(), fields))
    }

    private func execute() async throws {
        let source = try options.startPaths()
        defer { source.cancel() }
        let service = try makeService(source: source)
        emit(.agent, "started", [.init(key: "pid", value: .integer(Int(CurrentProcess.id))),
                                 .init(key: "stateDirectory", value: .string(plan.path)),
                                 .init(key: "maxConcurrent", value: .integer(plan.settings.maximumConcurrentDownloads)),
                                 .init(key: "maxConnectionsPerHost", value: .integer(plan.settings.maximumConnectionsPerHost)),
                                 .init(key: "allowsExpensive", value: .bool(plan.settings.allowsExpensive)),
                                 .init(key: "allowsRoaming", value: .bool(plan.settings.allowsRoaming))])
        let pathTask = Task { [self] in
            for await path in source.paths() {
                await service.pathChanged(path)
                metricsPublisher.withLock { $0 }?.refresh()
            }
        }
        defer { pathTask.cancel() }
        // `limit-rate=` windows begin and end on the minute: a look every second is within 1 s.
        let limitTask = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                await service.evaluateRateLimit()
            }
        }
        defer { limitTask.cancel() }
        await service.start()
        let server: ControlServer
        do {
            try await publishMetrics(service)
            server = try listen(service)
        } catch {
            await service.shutdown()
            throw error
        }
        defer { server.stop() }
        await serve(service, server: server)
    }

    /// The service over a download agent that follows the monitor's paths, rebuilt when a reload
    /// changes the concurrency limit.
    private func makeService(source: PathFeed) throws -> AgentService {
        let records = URL(fileURLWithPath: AgentStateDirectory.recordsDirectory(in: plan.path))
        let (logger, configureDownloads, notifier) = (options.logger, options.configureDownloads, notifier)
        // Crash tests stop the agent at an exact instant (docs/agent.md, "Test hooks").
        let killsAfterRename = host.environment[Self.killPointVariable] == "renamed"
        if killsAfterRename { host.errorOutput("warning: \(Self.killPointVariable)=renamed: the agent kills itself after finishing a download") }
        let rateLimit = AgentRateLimitControl(policy: plan.settings.rateLimit, now: host.now)
        var environment = AgentService.Environment(
            stateDirectory: plan.path,
            directoryAliases: plan.directoryAliases,
            makeAgent: { settings in
                var configuration = DownloadAgent.Configuration(stateDirectory: records,
                                                                maximumConcurrentDownloads: settings.maximumConcurrentDownloads,
                                                                logger: logger)
                configureDownloads(&configuration)
                if let proxy = settings.proxy { configuration.proxy = proxy }
                configuration.maximumConnectionsPerHost = settings.maximumConnectionsPerHost
                configuration.spacePolicy = SpacePolicy(minimumFree: settings.minimumFreeSpace)
                configuration.agentRateLimit = rateLimit.limit
                if killsAfterRename {
                    configuration.afterRenameHook = { try? CurrentProcess.send(signal: SIGKILL, to: CurrentProcess.id) }
                }
                return try DownloadAgent(configuration: configuration, paths: source.paths(), hostPaths: { source.hostPaths($0) })
            },
            emit: emitLine,
            summaryChanged: { summary in notifier.notify("STATUS=\(summary)") },
            now: host.now)
        environment.rateLimit = rateLimit
        return try AgentService(settings: plan.settings, environment: environment)
    }

    /// Writes the metrics file once (a file that cannot be written stops the agent at start),
    /// then on every path change, every interval and at exit.
    private func publishMetrics(_ service: AgentService) async throws {
        guard let file = plan.metricsFile else { return }
        let publisher = try await file.publish(
            render: { await service.metricsText(.prometheus) },
            report: { [self] failure in
                if let failure {
                    emit(.agent, "metricsFailed", [.init(key: "file", value: .string(file.path)), .init(key: "message", value: .string(failure))])
                } else {
                    emit(.agent, "metricsRecovered", [.init(key: "file", value: .string(file.path))])
                }
            })
        metricsPublisher.withLock { $0 = publisher }
    }

    private func listen(_ service: AgentService) throws -> ControlServer {
        let socket = AgentStateDirectory.socketPath(in: plan.path)
        let handler: ControlServer.Handler = { command, id, peer in await service.handle(command, id: id, peer: peer) }
        let immediate: ControlServer.Immediate = { command, id, peer in service.answerWithoutWaiting(command, id: id, peer: peer) }
        let closed: ControlServer.Closed = { peer in await service.connectionClosed(peer) }
        let observer: ControlServer.Observer = { [self] event in
            let (name, fields) = Self.describe(event)
            emit(.control, name, fields)
        }
        if case .listener(let descriptor, let path) = plan.activation {
            return ControlServer(listener: descriptor, path: path, isInherited: true, requestDeadline: plan.requestDeadline,
                                 threadNice: plan.controlThreadNice, immediate: immediate, handler: handler, closed: closed, observer: observer)
        }
        do {
            return try ControlServer(path: socket, requestDeadline: plan.requestDeadline, threadNice: plan.controlThreadNice,
                                     immediate: immediate, handler: handler, closed: closed, observer: observer)
        } catch {
            throw AgentFailure("cannot listen on \(socket): \(error)", kind: .unavailable)
        }
    }

    /// Handlers before "listening" and READY=1: a stop sent as soon as the agent says it is
    /// ready (systemd, a script waiting for the event) shuts it down cleanly instead of meeting
    /// the default action. `main` unblocked these for the process (a parent may hand down a mask
    /// blocking them); a signal before the loop below waits in the stream.
    private func serve(_ service: AgentService, server: ControlServer) async {
        let (signals, signalContinuation) = AsyncStream.makeStream(of: AgentSignal.self)
        let removeHandlers = await host.onSignals([SIGINT, SIGTERM, SIGHUP]) { number in
            signalContinuation.yield(number == SIGHUP ? .reload : .terminate)
        }
        defer { removeHandlers() }
        emit(.agent, "listening", [.init(key: "socket", value: .string(server.path)),
                                   .init(key: "activated", value: .bool(server.isInherited))])
        notifier.notify("READY=1")
        let watchdog = startWatchdog(service)
        defer { watchdog?.cancel() }
        for await signal in signals {
            switch signal {
            case .reload:
                await reload(service)
            case .terminate:
                await stop(service, server: server)
                signalContinuation.finish()
            }
        }
    }

    /// Pings systemd through the actor: a wedged service stops the pings and gets restarted.
    private func startWatchdog(_ service: AgentService) -> Task<Void, Never>? {
        notifier.watchdogInterval.map { [notifier] interval in
            Task {
                while !Task.isCancelled {
                    if await service.ping() { notifier.notify("WATCHDOG=1") }
                    try? await Task.sleep(for: interval)
                }
            }
        }
    }

    /// SIGHUP: `agent.conf` again.
    private func reload(_ service: AgentService) async {
        do {
            let settings = try Self.loadSettings(plan.configurationPath, base: options.settings, host: host)
            notifier.notify("RELOADING=1")
            await service.reload(settings)
        } catch {
            emit(.agent, "reloadFailed", [.init(key: "message", value: .string("\(error)"))])
        }
        notifier.notify("READY=1")
    }

    /// SIGTERM/SIGINT: stop listening and checkpoint every transfer. Checkpointing is quick (an
    /// fsync and a record per transfer); bounded anyway, so the process always exits within
    /// systemd's and the 2 s. The last metrics (downloads checkpointed, paused or
    /// waiting) outlive the process.
    private func stop(_ service: AgentService, server: ControlServer) async {
        notifier.notify("STOPPING=1")
        emit(.agent, "stopping", [])
        server.stop()
        let finished = await Self.finishes(within: .milliseconds(1500)) { await service.shutdown() }
        if let publisher = metricsPublisher.withLock({ $0 }) {
            _ = await Self.finishes(within: .milliseconds(300)) { await publisher.finish() }
        }
        emit(.agent, "stopped", [.init(key: "checkpointed", value: .bool(finished))])
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
        case .request(let command, let peer, let answeredIn):
            var fields: [JSONValue.Member] = [.init(key: "command", value: .string(ControlRequest(id: nil, command: command).command.rawValue)),
                                              .init(key: "uid", value: .integer(Int(peer.uid))), .init(key: "pid", value: .integer(Int(peer.pid)))]
            // The agent's share of a round trip (issue 29: where a `status` under load waits).
            if case .list(let rows?) = command { fields.append(.init(key: "rows", value: .integer(rows))) }
            if let answeredIn { fields.append(.init(key: "answeredInMicroseconds", value: .integer(Int(answeredIn / .microseconds(1))))) }
            return ("request", fields)
        case .rejected(let error, let peer):
            return ("rejected", [.init(key: "code", value: .string(error.code.rawValue)),
                                 .init(key: "message", value: .string(error.message)), .init(key: "uid", value: .integer(Int(peer.uid)))])
        case .error(let message):
            return ("error", [.init(key: "message", value: .string(message))])
        case .threadPriority(let nice, let refused):
            var fields: [JSONValue.Member] = [.init(key: "nice", value: .integer(Int(nice)))]
            if let refused {
                fields.append(.init(key: "message", value: .string(
                    "setpriority: \(refused); the control server's threads keep the normal priority (a nice value below 0 needs CAP_SYS_NICE, or LimitNICE= in the agent's unit; \(controlPriority.name)=0 stops trying)")))
            }
            return ("controlPriority", fields)
        }
    }
}
