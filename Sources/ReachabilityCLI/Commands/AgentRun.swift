import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ReachabilityAgent
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// What an agent run needs before it listens, checked first: the state directory (made, checked
/// and locked for the life of the process), the settings with `agent.conf`, a readable `--cacert`,
/// the metrics file's directory, the request deadline knob.
struct AgentPlan: Sendable {
    var directory: CheckedDirectory
    /// Held until the process exits; flock is released by the kernel even after SIGKILL.
    var lock: FileDescriptor
    var settings: AgentSettings
    var metricsFile: MetricsFile?
    var requestDeadline: Duration
    /// Other spellings of the state directory (`AgentService.Environment.directoryAliases`).
    var directoryAliases: [String: String]
    /// A listening socket systemd passed (a .socket unit), served instead of binding agent.sock.
    var activation: SocketActivation.Outcome

    var path: String { directory.path }
    var configurationPath: String { AgentStateDirectory.configurationPath(in: path) }

    static func prepare(_ command: AgentCommand, in context: CommandContext) throws -> AgentPlan {
        let requestDeadline = try AgentCommand.requestDeadline.value(in: context) ?? .seconds(10)
        let requested = try AgentStateDirectory.resolve(command.stateDirectoryArgument, environment: context.environment,
                                                        system: .current(context))
        let directory = try AgentStateDirectory.prepare(requested)
        // The spelling the agent was given stays valid for `queue add -o` when links lead from it
        // (systemd's DynamicUser= link /var/lib/reachability -> private/reachability): the
        // control commands name the state directory as their user knows it.
        let aliases = AgentDestination.normalizedAbsolutePath(requested).flatMap { $0 == directory.path ? nil : [$0: directory.path] } ?? [:]
        let lock = try AgentStateDirectory.lock(directory)
        let settings = try command.loadSettings(AgentStateDirectory.configurationPath(in: directory.path), in: context)
        // A CA file that cannot be read would fail every TLS download later, one by one: say so now.
        if let authorities = command.transport.certificateAuthorityURL(workingDirectory: context.currentDirectory),
           !FileManager.default.isReadableFile(atPath: authorities.path) {
            throw CommandFailure(message: "cannot read --cacert \(authorities.path)", exitCode: .noInput)
        }
        let metricsFile = try command.metrics.open(in: context)
        let activation = SocketActivation.take(environment: context.environment)
        if case .unusable(let message) = activation {
            throw CommandFailure(message: message, exitCode: .configuration)
        }
        return AgentPlan(directory: directory, lock: lock, settings: settings, metricsFile: metricsFile,
                         requestDeadline: requestDeadline, directoryAliases: aliases, activation: activation)
    }
}

/// One run of `reachability agent` carrying out its plan: the log and events, the service over
/// the path monitor, metrics, the control server, signals, sd_notify and the watchdog, until
/// SIGTERM or SIGINT.
final class AgentRun: Sendable {
    /// Test hook: `renamed` makes the agent SIGKILL itself right after a verified file is renamed
    /// into place, before its record is removed (the crash window of issue 29).
    static let killPointVariable = "REACHABILITY_AGENT_TEST_KILL_AT"
    let command: AgentCommand
    let plan: AgentPlan
    let context: CommandContext
    private let log: RotatingLogFile
    private let notifier: SystemdNotifier
    /// Set once the metrics file has its first contents; path changes rewrite it.
    private let metricsPublisher = Mutex<MetricsPublisher?>(nil)

    private enum AgentSignal: Sendable { case terminate, reload }

    init(command: AgentCommand, plan: AgentPlan, context: CommandContext) throws {
        self.command = command
        self.plan = plan
        self.context = context
        log = try RotatingLogFile(directory: plan.directory, maximumSize: command.logSizeLimit)
        notifier = SystemdNotifier(environment: context.environment)
    }

    /// An event line to stdout and to `agent.log`.
    @Sendable private func emitLine(_ line: String) {
        context.output.line(line)
        log.append(line)
    }

    @Sendable private func emit(_ kind: EventSchema.Kind, _ event: String, _ fields: [JSONValue.Member]) {
        emitLine(EventSchema.line(kind, event, at: context.now(), fields))
    }

    func execute() async throws -> ExitCode {
        let source = try command.monitor.startPathSource(in: context)
        defer { source.cancel() }
        let service = try makeService(source: source)
        emit(.agent, "started", [.init(key: "pid", value: .integer(Int(CurrentProcess.id))),
                                 .init(key: "stateDirectory", value: .string(plan.path)),
                                 .init(key: "maxConcurrent", value: .integer(plan.settings.maximumConcurrentDownloads)),
                                 .init(key: "maxConnectionsPerHost", value: .integer(plan.settings.maximumConnectionsPerHost)),
                                 .init(key: "allowsExpensive", value: .bool(plan.settings.allowsExpensive)),
                                 .init(key: "allowsRoaming", value: .bool(plan.settings.allowsRoaming))])
        let pathTask = Task { [self] in
            for await path in source.paths {
                await service.pathChanged(path)
                metricsPublisher.withLock { $0 }?.refresh()
            }
        }
        defer { pathTask.cancel() }
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
        return .success
    }

    /// The service over a download agent that follows the monitor's paths, rebuilt when a reload
    /// changes the concurrency limit.
    private func makeService(source: any PathSource) throws -> AgentService {
        let records = URL(fileURLWithPath: AgentStateDirectory.recordsDirectory(in: plan.path))
        let errorOutput = context.errorOutput
        let logger = command.monitor.isVerbose
            ? Logger(label: "agent", minimumLevel: .debug, sink: { errorOutput.line(TerminalText.escaped($0)) }) : Logger.silent
        let (transport, workingDirectory, notifier) = (command.transport, context.currentDirectory, notifier)
        // Crash tests stop the agent at an exact instant (docs/agent.md, "Test hooks").
        let killsAfterRename = context.environment[Self.killPointVariable] == "renamed"
        if killsAfterRename { context.errorOutput.line("warning: \(Self.killPointVariable)=renamed: the agent kills itself after finishing a download") }
        return try AgentService(settings: plan.settings, environment: .init(
            stateDirectory: plan.path,
            directoryAliases: plan.directoryAliases,
            makeAgent: { settings in
                var configuration = DownloadAgent.Configuration(stateDirectory: records,
                                                                maximumConcurrentDownloads: settings.maximumConcurrentDownloads,
                                                                logger: logger)
                transport.apply(to: &configuration, workingDirectory: workingDirectory)
                configuration.maximumConnectionsPerHost = settings.maximumConnectionsPerHost
                if killsAfterRename {
                    configuration.afterRenameHook = { try? CurrentProcess.send(signal: SIGKILL, to: CurrentProcess.id) }
                }
                return try DownloadAgent(configuration: configuration, paths: source.paths, hostPaths: { source.paths(to: $0) })
            },
            emit: emitLine,
            summaryChanged: { summary in notifier.notify("STATUS=\(summary)") },
            now: context.now))
    }

    /// Writes the metrics file once (a file that cannot be written stops the agent at start),
    /// then on every path change, every interval and at exit.
    private func publishMetrics(_ service: AgentService) async throws {
        guard let file = plan.metricsFile else { return }
        let publisher = try await MetricsPublisher(
            file: file, interval: command.metrics.interval, sleep: context.sleep,
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
        let closed: ControlServer.Closed = { peer in await service.connectionClosed(peer) }
        let observer: ControlServer.Observer = { [self] event in
            let (name, fields) = AgentCommand.describe(event)
            emit(.control, name, fields)
        }
        if case .listener(let descriptor, let path) = plan.activation {
            return ControlServer(listener: descriptor, path: path, isInherited: true, requestDeadline: plan.requestDeadline,
                                 handler: handler, closed: closed, observer: observer)
        }
        do {
            return try ControlServer(path: socket, requestDeadline: plan.requestDeadline,
                                     handler: handler, closed: closed, observer: observer)
        } catch {
            throw CommandFailure(message: "cannot listen on \(socket): \(error)", exitCode: .failure)
        }
    }

    /// Handlers before "listening" and READY=1: a stop sent as soon as the agent says it is
    /// ready (systemd, a script waiting for the event) shuts it down cleanly instead of meeting
    /// the default action. `main` unblocked these for the process (a parent may hand down a mask
    /// blocking them); a signal before the loop below waits in the stream.
    private func serve(_ service: AgentService, server: ControlServer) async {
        let (signals, signalContinuation) = AsyncStream.makeStream(of: AgentSignal.self)
        let removeHandlers = await context.onSignals([SIGINT, SIGTERM, SIGHUP]) { number in
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
            let settings = try command.loadSettings(plan.configurationPath, in: context)
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
        let finished = await AgentCommand.finishes(within: .milliseconds(1500)) { await service.shutdown() }
        if let publisher = metricsPublisher.withLock({ $0 }) {
            _ = await AgentCommand.finishes(within: .milliseconds(300)) { await publisher.finish() }
        }
        emit(.agent, "stopped", [.init(key: "checkpointed", value: .bool(finished))])
    }
}
