import LinuxReachability

/// `reachability status`: print the current path once; exit 0 when satisfied, 1 when not.
struct StatusCommand: Command, OptionTable {
    static let name = "status"
    static let abstract = "Print whether and how the network is reachable now."
    static let table: [OptionRow<Self>] = [
        .flag("json", help: "Print one JSON object instead of text.", sets: \.isJSON),
        .flag("explain", help: "Also print the routes and every interface with its type, the evidence for it, state and addresses.",
              sets: \.isExplaining),
        MonitorOptions.allInterfaces(sets: \.monitor.includesAllInterfaces),
    ] + MonitorOptions.rows(at: \.monitor) + [
        // --explain shows every interface with its evidence.
        .then { _, command in command.monitor.includesAllInterfaces = command.monitor.includesAllInterfaces || command.isExplaining },
    ]
    static let discussion: String? = """
        EXIT STATUS: 0 when the network is reachable, 1 when it is not or the monitor failed, \
        64 for a usage error, 66 when --netns names no namespace, 77 when --netns lacks privilege, \
        78 for a bad classify.conf line.
        """ + "\n\n" + MonitorOptions.discussion

    var isJSON = false
    var isExplaining = false
    var monitor = MonitorOptions()

    func run(in context: CommandContext) async throws -> ExitCode {
        let (source, configuration) = try monitor.startPathSource(in: context, validate: { _ in })
        defer { source.cancel() }
        var path = source.currentPath
        if let check = configuration.connectivityCheck, path.isSatisfied, path.connectivity == .unknown {
            // The route is known at once; the check's answer follows within its timeout.
            path = await firstAnswer(from: source, within: check.timeout + .seconds(1), sleep: context.sleep) ?? source.currentPath
        }
        if isJSON {
            // The JSON object carries the routes and interface evidence already.
            context.output.line(PathJSON.line(path, at: context.now()))
        } else {
            context.output.line(isExplaining ? PathText.explanation(path) : PathText.summary(path))
            // UPower's facts (issue 32 item 3): what the agent's power rules would read.
            if isExplaining { context.output.line("power: \(PowerFacts.read())") }
        }
        return path.isSatisfied ? .success : .failure
    }

    /// The first path whose connectivity is answered (or that lost its route), nil at the deadline.
    private func firstAnswer(from source: any PathSource, within timeout: Duration,
                             sleep: @escaping @Sendable (Duration) async throws -> Void) async -> NetworkPath? {
        let updates = source.paths
        return await withTaskGroup(of: NetworkPath?.self) { group in
            group.addTask {
                for await path in updates where path.connectivity != .unknown || !path.isSatisfied { return path }
                return nil
            }
            group.addTask {
                try? await sleep(timeout)
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }
}
