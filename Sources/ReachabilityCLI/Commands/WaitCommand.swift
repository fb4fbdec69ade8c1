import LinuxReachability
import ReachabilityBase

/// `reachability wait`: exit 0 as soon as the path qualifies, 1 on timeout.
struct WaitCommand: Command {
    static let name = "wait"
    static let abstract = "Exit 0 once the network path qualifies, 1 on timeout."
    static let timeout = Option.value(
        "timeout", valueName: "seconds",
        help: "Give up after this many seconds (fractions allowed; 0 checks once; 'inf', or more than 100 years, waits forever). Default: 30.")
    static let require = Option.value(
        "require", valueName: "kind",
        help: "Only a path over this kind of link qualifies: wired, wifi, cellular or any; 'internet' needs the connectivity check to read full. Default: any.")
    static let notExpensive = Option.flag(
        "not-expensive", help: "Only a path that is not expensive (cellular-like, or metered per NetworkManager) qualifies.")
    static let notRoaming = Option.flag(
        "not-roaming", help: "Only a path that is not over a roaming modem (per ModemManager) qualifies.")
    static let host = Option.value(
        "host", valueName: "name",
        help: "Wait for the route to this host (a name or an IP address) instead of the default route, as SCNetworkReachability did for a name: a server on the local network, a link-local address or this host needs no default route.")
    static let options = [timeout, require, notExpensive, notRoaming, host] + MonitorOptions.all
    static let discussion: String? = """
        EXIT STATUS: 0 as soon as the path qualifies, 1 on timeout or when the monitor stops, \
        64 for a usage error, 66 when --netns names no namespace, 77 when --netns lacks privilege, \
        78 for a bad classify.conf line.
        """ + "\n\n" + MonitorOptions.discussion

    /// Used when `--timeout` is not given.
    static let defaultTimeout = Duration.seconds(30)

    var requirement: PathRequirement
    /// nil waits forever.
    var timeoutDuration: Duration?
    var monitor: MonitorOptions

    init(arguments: ParsedArguments) throws {
        requirement = PathRequirement()
        if let kind = arguments.value(Self.require) {
            guard let connection = PathRequirement.Connection(rawValue: kind.lowercased()) else {
                throw UsageError.invalidValue(kind, for: Self.require, "expected one of wired, wifi, cellular, any, internet")
            }
            requirement.connection = connection
        }
        requirement.allowsExpensive = !arguments.isSet(Self.notExpensive)
        requirement.allowsRoaming = !arguments.isSet(Self.notRoaming)
        if let host = arguments.value(Self.host) {
            guard HostPath.isValidHost(host) else {
                throw UsageError.invalidValue(host, for: Self.host, "expected a host name or an IP address")
            }
            guard requirement.connection != .internet else {
                throw UsageError.invalidValue(host, for: Self.host,
                                              "--require internet asks about the default route's Internet; with --host, require wired, wifi, cellular or any")
            }
            requirement.host = host
        }
        timeoutDuration = Self.defaultTimeout
        if let limit = try arguments.value(Self.timeout, as: SecondsOrForever()) {
            timeoutDuration = limit.duration
        }
        monitor = try MonitorOptions(arguments: arguments)
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let requirement = requirement
        let noCheck = "--require internet needs a connectivity check: give --connectivity-url URL, set connectivity-url= in reachability.conf, or configure NetworkManager's [connectivity] uri"
        let (source, configuration) = try monitor.startPathSource(in: context) { configuration in
            if requirement.connection == .internet, configuration.connectivityCheck == nil, configuration.systemBus == .disabled {
                throw CommandFailure(message: noCheck, exitCode: .usage)
            }
        }
        defer { source.cancel() }
        if requirement.connection == .internet, configuration.connectivityCheck == nil,
           !source.currentPath.factSources.contains(where: { $0.service == .networkManager && $0.state == .used }) {
            // Without a check of ours, NetworkManager's own answer (over D-Bus) is the only source.
            throw CommandFailure(message: noCheck + " (NetworkManager, whose own check would do, is not in use here)", exitCode: .usage)
        }
        var timeout = timeoutDuration
        if requirement.connection == .internet, timeout == .zero, let check = configuration.connectivityCheck {
            // "Check once" includes the one connectivity check that runs at start.
            timeout = check.timeout + .seconds(1)
        }
        let outcome: PathRequirement.Outcome
        let lastPath: @Sendable () -> String
        if let host = requirement.host {
            let follower = HostFollower(source.paths(to: host))
            defer { follower.stop() }
            // "Check once" waits for the host's first answer (a name must resolve first).
            if timeout == .zero { timeout = HostFollower.firstAnswerWait }
            outcome = await requirement.firstQualifyingPath(current: .unsatisfied(.noRoute), updates: follower.paths,
                                                            timeout: timeout, sleep: context.sleep)
            lastPath = { follower.lastDescription }
        } else {
            outcome = await requirement.firstQualifyingPath(
                current: source.currentPath, updates: source.paths, timeout: timeout, sleep: context.sleep)
            lastPath = { PathText.summary(source.currentPath) }
        }
        switch outcome {
        case .qualified:
            return .success
        case .timedOut:
            let waited = timeoutDuration.map { " after \($0.formattedSeconds)s" } ?? ""
            context.errorOutput.line(
                "\(Self.commandPath): timed out\(waited) waiting for \(requirement); last path: \(lastPath())")
            return .failure
        case .ended:
            context.errorOutput.line(
                "\(Self.commandPath): the monitor stopped before finding \(requirement); last path: \(lastPath())")
            return .failure
        }
    }
}
