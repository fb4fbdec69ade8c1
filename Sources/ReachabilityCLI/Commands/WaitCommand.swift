import FoundationEssentials
import LinuxReachability
import ReachabilityBase
import ReachabilityEvents

/// `reachability wait`: exit 0 as soon as every condition holds, 1 on timeout; while waiting, say
/// every 5 s what is still missing. Built to run at boot as a wait-online service
/// (packaging/reachability-wait-online.service).
struct WaitCommand: Command, OptionTable {
    static let name = "wait"
    static let abstract = "Exit 0 once the network is online as asked, 1 on timeout."
    static let table: [OptionRow<Self>] = [
        .custom(.value("timeout", valueName: "seconds", help: "Give up after this many seconds (fractions allowed; 0 or 'inf' waits for ever). Default: 120."),
                into: \.timeoutDuration) { arguments, option in
            guard let limit = try arguments.value(option, as: SecondsOrForever()) else { return defaultTimeout }
            // 0 waits for ever, as systemd-networkd-wait-online's --timeout=0 does.
            return limit.duration == .zero ? nil : limit.duration
        },
        .custom(.repeating("interface", valueName: "name[:state]", help: "Wait for this interface to reach STATE: carrier, address (any address, link-local too) or routable (an address beyond the link; the default). Repeatable: all of them, or one with --any."),
                into: \.plan.interfaces, read: interfaceConditions),
        .flag("any", help: "One of the --interface conditions is enough.", sets: \.plan.needsAnyInterface),
        .reading(.flag("ipv4", help: "Wait for an IPv4 default route (and count only IPv4 addresses for --interface).")) { arguments, option, command in
            if arguments.isSet(option) { command.plan.families.append(.ipv4) }
        },
        .reading(.flag("ipv6", help: "Wait for an IPv6 default route (and count only IPv6 addresses for --interface).")) { arguments, option, command in
            if arguments.isSet(option) { command.plan.families.append(.ipv6) }
        },
        .flag("dns", help: "Also wait until a resolver of /etc/resolv.conf answers a query (NOERROR or NXDOMAIN).", sets: \.plan.checksDNS),
        .reading(.value("dns-name", valueName: "name", help: "The name --dns asks for (implies --dns). Default: the connectivity check's host when one is configured, else the root's NS records.")) {
            arguments, option, command in
            guard let name = arguments.value(option) else { return }
            guard ResolverProbe.query(identifier: 1, name: name) != nil,
                  !name.contains(where: { $0.isWhitespace || $0.isASCII && $0.asciiValue! < 0x20 }) else {
                throw UsageError.invalidValue(name, for: option, "expected a DNS name (labels of 1 to 63 bytes, at most 253 in all), or '.' for the root")
            }
            command.plan.dnsName = name
            command.plan.checksDNS = true
        },
        .custom(.repeating("ignore", valueName: "glob", help: "A default route through an interface whose name matches the glob does not count (docker0, virbr*). Repeatable."),
                into: \.plan.ignored, read: ignoredGlobs),
        .custom(.value("require", valueName: "kind", help: "Only a path over this kind of link qualifies: wired, wifi, cellular or any; 'internet' needs the connectivity check to read full. Default: any."),
                into: \.plan.requirement.connection) { arguments, option in
            guard let kind = arguments.value(option) else { return .any }
            guard let connection = PathRequirement.Connection(rawValue: kind.lowercased()) else {
                throw UsageError.invalidValue(kind, for: option, "expected one of wired, wifi, cellular, any, internet")
            }
            return connection
        },
        .flag("not-expensive", help: "Only a path that is not expensive (cellular-like, or metered per NetworkManager) qualifies.",
              clears: \.plan.requirement.allowsExpensive),
        .flag("not-roaming", help: "Only a path that is not over a roaming modem (per ModemManager) qualifies.",
              clears: \.plan.requirement.allowsRoaming),
        .reading(.value("host", valueName: "name", help: "Wait for the route to this host (a name or an IP address) instead of the default route, as SCNetworkReachability did for a name: a server on the local network, a link-local address or this host needs no default route.")) {
            arguments, option, command in
            guard let host = arguments.value(option) else { return }
            guard HostPath.isValidHost(host) else {
                throw UsageError.invalidValue(host, for: option, "expected a host name or an IP address")
            }
            guard command.plan.requirement.connection != .internet else {
                throw UsageError.invalidValue(host, for: option,
                                              "--require internet asks about the default route's Internet; with --host, require wired, wifi, cellular or any")
            }
            command.plan.requirement.host = host
        },
        .flag("json", help: "Print the waiting, online and timedOut events as NDJSON on stdout (docs/events.md, type wait).", sets: \.isJSON),
    ] + MonitorOptions.rows(at: \.monitor) + [
        // Interface conditions read interfaces without carrier or address too.
        .then { _, command in command.monitor.includesAllInterfaces = !command.plan.interfaces.isEmpty },
    ]
    static let discussion: String? = """
        Conditions combine with AND. With none, wait for a routable default path: any interface, \
        either family, as networkd-wait-online --any means it. An unplugged second interface never \
        delays that; name interfaces with --interface only when they must all be up.

        While waiting, a line every 5 s on stderr names what is still missing, per condition \
        ("eth1: no carrier; DNS: 10.0.0.1 did not answer"); at the timeout the last line says the same.

        At boot: packaging/reachability-wait-online.service (in the .deb, not enabled) runs \
        'reachability wait' with the arguments of /etc/reachability/wait-online.conf before \
        network-online.target; see docs/command-line.md for switching from \
        systemd-networkd-wait-online or NetworkManager-wait-online.

        EXIT STATUS: 0 as soon as every condition holds, 1 on timeout or when the monitor stops, \
        64 for a usage error, 66 when --netns names no namespace, 77 when --netns lacks privilege, \
        78 for a bad classify.conf line.
        """ + "\n\n" + MonitorOptions.discussion

    /// Used when `--timeout` is not given: a Pi joining wifi at boot can take a minute.
    static let defaultTimeout = Duration.seconds(120)

    var plan = WaitPlan()
    /// nil waits for ever.
    var timeoutDuration: Duration? = defaultTimeout
    var isJSON = false
    var monitor = MonitorOptions()

    /// `--require` and friends, part of the plan.
    var requirement: PathRequirement { plan.requirement }

    private static func interfaceConditions(_ arguments: ParsedArguments, _ option: Option) throws -> [WaitPlan.InterfaceCondition] {
        try arguments.values(option).map { text in
            switch WaitPlan.InterfaceCondition.parse(text) {
            case .success(let condition): return condition
            case .failure(let error): throw UsageError.invalidValue(text, for: option, error.reason)
            }
        }
    }

    private static func ignoredGlobs(_ arguments: ParsedArguments, _ option: Option) throws -> [String] {
        try arguments.values(option).map { glob in
            guard !glob.isEmpty, glob.utf8.count <= 64, !glob.contains(where: { $0 == "/" || $0.isWhitespace }) else {
                throw UsageError.invalidValue(glob, for: option, "expected a glob over interface names (at most 64 bytes, no '/' or spaces)")
            }
            return glob
        }
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        if plan.checksDNS, let namespace = monitor.networkNamespace, context.environment[NamespaceReexec.marker] != namespace,
           NamespaceReexec.isToolProcess {
            // The query's socket and /etc/resolv.conf must be the namespace's: setns on the
            // monitor's thread alone would leave both outside.
            try NamespaceReexec.execute(inNamespace: namespace, environment: context.environment)
        }
        let (source, configuration, paths) = try startMonitor(in: context)
        defer { source.cancel() }
        var machine = WaitStateMachine(plan: plan, timeout: timeoutDuration, path: source.currentPath)
        let report = WaitReport(isJSON: isJSON, context: context, started: context.now())
        if case .online = machine.start() {
            report.online()
            return .success
        }
        report.waiting(elapsed: .zero, missing: machine.missing, isFirst: true)

        let (events, sink) = AsyncStream.makeStream(of: WaitStateMachine.Event.self)
        let (dnsKicks, kick) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        // Unstructured, cancelled and not awaited: the answer (and the exit a boot is waiting
        // for) must not wait until every feeder has wound down.
        let feeders = startFeeders(source: source, paths: paths, configuration: configuration, context: context,
                                   sink: sink, dnsKicks: dnsKicks, kick: kick)
        defer {
            for feeder in feeders { feeder.cancel() }
            kick.finish()
            sink.finish()
        }
        return await answer(events, machine: machine, report: report, kick: kick)
    }

    /// Starts the path source, subscribed before it starts so no change between the first path
    /// and the loop is missed; refuses `--require internet` when nothing could check it.
    private func startMonitor(in context: CommandContext) throws
        -> (source: any PathSource, configuration: PathMonitor.Configuration, paths: AsyncStream<NetworkPath>) {
        let requirement = requirement
        let noCheck = "--require internet needs a connectivity check: give --connectivity-url URL, set connectivity-url= in reachability.conf, or configure NetworkManager's [connectivity] uri"
        var subscription: AsyncStream<NetworkPath>?
        let (source, configuration) = try monitor.startPathSource(in: context, validate: { configuration in
            if requirement.connection == .internet, configuration.connectivityCheck == nil, configuration.systemBus == .disabled {
                throw CommandFailure(message: noCheck, exitCode: .usage)
            }
        }, prepare: { subscription = $0.paths })
        if requirement.connection == .internet, configuration.connectivityCheck == nil,
           !source.currentPath.factSources.contains(where: { $0.service == .networkManager && $0.state == .used }) {
            source.cancel()
            // Without a check of ours, NetworkManager's own answer (over D-Bus) is the only source.
            throw CommandFailure(message: noCheck + " (NetworkManager, whose own check would do, is not in use here)", exitCode: .usage)
        }
        return (source, configuration, subscription ?? source.paths)
    }

    /// The tasks that turn paths, host paths, ticks and DNS rounds into the machine's events.
    private func startFeeders(source: any PathSource, paths: AsyncStream<NetworkPath>, configuration: PathMonitor.Configuration,
                              context: CommandContext, sink: AsyncStream<WaitStateMachine.Event>.Continuation,
                              dnsKicks: AsyncStream<Void>, kick: AsyncStream<Void>.Continuation) -> [Task<Void, Never>] {
        let dnsCheck = WaitDNSCheck(
            name: plan.dnsName ?? configuration.connectivityCheck?.hostName ?? ".", readFile: context.readFile,
            ask: { server, name, timeout in await ResolverProbe.ask(server, name: name, timeout: timeout) })
        let (plan, timeout) = (plan, timeoutDuration)
        let pause = context.sleep
        var feeders: [Task<Void, Never>] = []
        feeders.append(Task {
            for await path in paths { sink.yield(.path(path)) }
            sink.yield(.monitorStopped)
        })
        if let host = plan.requirement.host {
            let hostPaths = source.paths(to: host)
            feeders.append(Task {
                for await hostPath in hostPaths { sink.yield(.host(hostPath)) }
                sink.yield(.monitorStopped)
            })
        }
        feeders.append(Task {
            // Ticks fall on whole multiples of 5 s and on the timeout, whatever the events did.
            var elapsed = Duration.zero
            while let next = WaitStateMachine.nextTick(after: elapsed, timeout: timeout) {
                do { try await pause(next - elapsed) } catch { return }
                elapsed = next
                sink.yield(.tick(elapsed: elapsed))
            }
        })
        if plan.checksDNS {
            if source.currentPath.isSatisfied { kick.yield() }
            feeders.append(Task {
                // A round when a path appears, then one a second while nobody answers.
                for await _ in dnsKicks {
                    while !Task.isCancelled {
                        let state = await dnsCheck.round()
                        sink.yield(.dns(state))
                        if case .answered = state { return }
                        do { try await pause(WaitDNSCheck.retryInterval) } catch { return }
                        if !source.currentPath.isSatisfied { break }
                    }
                }
            })
        }
        return feeders
    }

    /// Hands the machine each event until it answers online, timed out or stopped.
    private func answer(_ events: AsyncStream<WaitStateMachine.Event>, machine: WaitStateMachine, report: WaitReport,
                        kick: AsyncStream<Void>.Continuation) async -> ExitCode {
        var machine = machine
        for await event in events {
            if case .path(let path) = event, plan.checksDNS, path.isSatisfied { kick.yield() }
            switch machine.handle(event) {
            case .keepWaiting:
                continue
            case .report(let elapsed, let missing):
                report.waiting(elapsed: elapsed, missing: missing, isFirst: false)
            case .online:
                report.online()
                return .success
            case .timedOut(let elapsed, let missing):
                report.timedOut(elapsed: elapsed, missing: missing)
                return .failure
            case .stopped(let missing):
                report.stopped(missing: missing)
                return .failure
            }
        }
        return .failure
    }
}

/// How `wait` says why it waits: text lines on stderr, or `type: wait` events on stdout with `--json`.
struct WaitReport: Sendable {
    var isJSON: Bool
    var context: CommandContext
    var started: Date

    /// The first line (JSON only: a text line at once would be noise on a machine that is online
    /// a moment later) and the one every 5 s.
    func waiting(elapsed: Duration, missing: [String], isFirst: Bool) {
        if isJSON {
            context.output.line(event("waiting", elapsed: elapsed, missing: missing))
        } else if !isFirst {
            context.errorOutput.line("\(WaitCommand.commandPath): waiting \(elapsed.formattedSeconds)s: \(missing.joined(separator: "; "))")
        }
    }

    /// Exit 0 (JSON only; success is silent in text).
    func online() {
        guard isJSON else { return }
        let elapsed = Duration.seconds(max(0, context.now().timeIntervalSince(started)))
        context.output.line(event("online", elapsed: elapsed, missing: nil))
    }

    /// The last line says what was missing, in text even with `--json`, for the journal.
    func timedOut(elapsed: Duration, missing: [String]) {
        if isJSON { context.output.line(event("timedOut", elapsed: elapsed, missing: missing)) }
        context.errorOutput.line("\(WaitCommand.commandPath): timed out after \(elapsed.formattedSeconds)s: \(missing.joined(separator: "; "))")
    }

    /// The monitor ended first.
    func stopped(missing: [String]) {
        if isJSON { context.output.line(event("stopped", elapsed: nil, missing: missing)) }
        context.errorOutput.line("\(WaitCommand.commandPath): the monitor stopped while waiting: \(missing.joined(separator: "; "))")
    }

    private func event(_ name: String, elapsed: Duration?, missing: [String]?) -> String {
        var fields: [JSONValue.Member] = []
        if let elapsed { fields.append(.init(key: "elapsedMilliseconds", value: .integer(Int(elapsed.milliseconds)))) }
        if let missing { fields.append(.init(key: "missing", value: .array(missing.map { .string($0) }))) }
        return EventSchema.line(.wait, name, at: context.now(), fields)
    }
}
