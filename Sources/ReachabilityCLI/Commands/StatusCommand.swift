import LinuxReachability

/// `reachability status`: print the current path once; exit 0 when satisfied, 1 when not.
struct StatusCommand: Command {
    static let name = "status"
    static let abstract = "Print whether and how the network is reachable now."
    static let json = Option.flag("json", help: "Print one JSON object instead of text.")
    static let explain = Option.flag(
        "explain", help: "Also print the routes and every interface with its type, the evidence for it, state and addresses.")
    static let options = [json, explain, MonitorOptions.allInterfaces] + MonitorOptions.all
    static let discussion: String? = """
        EXIT STATUS: 0 when the network is reachable, 1 when it is not or the monitor failed, \
        64 for a usage error, 66 when --netns names no namespace, 77 when --netns lacks privilege, \
        78 for a bad classify.conf line.
        """ + "\n\n" + MonitorOptions.discussion

    var isJSON: Bool
    var isExplaining: Bool
    var monitor: MonitorOptions

    init(arguments: ParsedArguments) throws {
        isJSON = arguments.isSet(Self.json)
        isExplaining = arguments.isSet(Self.explain)
        monitor = try MonitorOptions(arguments: arguments)
        // --explain shows every interface with its evidence.
        monitor.includesAllInterfaces = isExplaining || arguments.isSet(MonitorOptions.allInterfaces)
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        let path = source.currentPath
        if isJSON {
            // The JSON object carries the routes and interface evidence already.
            context.output.line(PathJSON.line(path, at: context.now()))
        } else {
            context.output.line(isExplaining ? PathText.explanation(path) : PathText.summary(path))
        }
        return path.isSatisfied ? .success : .failure
    }
}
