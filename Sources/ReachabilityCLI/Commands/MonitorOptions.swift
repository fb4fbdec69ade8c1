import LinuxReachability

/// Options shared by every command that runs a `PathMonitor`, and how they become its configuration.
struct MonitorOptions: OptionTable, Equatable {
    static let table: [OptionRow<Self>] = [
        .custom(.value("netns", valueName: "name", help: "Use the network namespace NAME (see 'ip netns list') instead of the current one. Needs CAP_SYS_ADMIN (root)."),
                into: \.networkNamespace, read: namespaceName),
        .custom(.repeating("classify", valueName: "pattern=type", help: "Report interfaces whose name matches the glob PATTERN as TYPE (wired, wifi, cellular, loopback, other). Repeatable; wins over classify.conf."),
                into: \.overrides, read: classifyRules),
        .flag("verbose", help: "Log the monitor's diagnostics to stderr.", sets: \.isVerbose),
        .custom(.value("connectivity-url", valueName: "url", help: "Also check the Internet beyond the route with an HTTP GET of URL (http:// only; 'none' turns off a check from the config files): full on 204, or on 200 with --connectivity-response's text; portal on a redirect or another page; limited on no answer."),
                into: \.connectivity, read: connectivityURL),
        .custom(.value("connectivity-response", valueName: "text", help: "The text a 200 answer to --connectivity-url must start with (default: expect 204 No Content)."),
                into: \.connectivity.response, read: connectivityResponse),
    ]

    /// Help paragraph on the classify.conf files every monitor command reads.
    static let discussion = """
        Classification overrides are also read from /etc/reachability/classify.conf and \
        $XDG_CONFIG_HOME/reachability/classify.conf (default ~/.config): one PATTERN=TYPE per line, \
        '#' starts a comment. The first matching rule wins: --classify, then the user file, then the system file.

        The connectivity check is off unless configured: --connectivity-url, else connectivity-url= \
        (with connectivity-response=, connectivity-interval= and connectivity-timeout= in seconds) in \
        $XDG_CONFIG_HOME/reachability/reachability.conf or /etc/reachability/reachability.conf, else the \
        [connectivity] section of NetworkManager's configuration (uri, response, interval). Without one, \
        connectivity is 'unknown' and nothing is sent.
        """

    /// `--netns`, validated.
    var networkNamespace: String?
    /// `--classify` rules, in command-line order.
    var overrides: [ClassificationOverride] = []
    /// `--verbose`.
    var isVerbose = false
    /// Set by commands that show every interface (`--all-interfaces`, `status --explain`).
    var includesAllInterfaces = false
    /// `--connectivity-url` / `--connectivity-response`.
    var connectivity = ConnectivitySettings()

    /// `--all-interfaces`, for the commands that print paths.
    static func allInterfaces<Command>(sets path: WritableKeyPath<Command, Bool> & Sendable) -> OptionRow<Command> {
        .flag("all-interfaces", help: "List every interface in --json output, not only the usable ones (and print a line when any of them changes).",
              sets: path)
    }

    init() {}

    /// `--netns NAME`: ip-netns keeps namespaces as files under /run/netns, so a name is one path component.
    private static func namespaceName(_ arguments: ParsedArguments, _ option: Option) throws -> String? {
        guard let name = arguments.value(option) else { return nil }
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else {
            throw UsageError.invalidValue(name, for: option, "expected a namespace name as listed by 'ip netns'")
        }
        return name
    }

    private static func classifyRules(_ arguments: ParsedArguments, _ option: Option) throws -> [ClassificationOverride] {
        try arguments.values(option).map { rule in
            do throws(ClassifyRules.RuleError) {
                return try ClassifyRules.parseRule(rule, source: "--classify")
            } catch {
                throw UsageError.invalidValue(rule, for: option, error.reason)
            }
        }
    }

    private static func connectivityURL(_ arguments: ParsedArguments, _ option: Option) throws -> ConnectivitySettings {
        var connectivity = ConnectivitySettings()
        guard let url = arguments.value(option) else { return connectivity }
        connectivity.url = url
        connectivity.source = "--connectivity-url"
        if !["", "none", "off"].contains(url) {
            do {
                _ = try ConnectivityCheck(url: url)
            } catch {
                throw UsageError.invalidValue(url, for: option, error.description)
            }
        }
        return connectivity
    }

    private static func connectivityResponse(_ arguments: ParsedArguments, _ option: Option) throws -> String? {
        guard let response = arguments.value(option) else { return nil }
        guard response.utf8.count <= 4096 else {
            throw UsageError.invalidValue(response, for: option, "longer than 4096 bytes")
        }
        return response
    }

    /// The monitor configuration: checks namespace privilege and loads classify.conf files.
    /// Throws `CommandFailure` (exit 77 without privilege, 78 for a bad config line).
    func configuration(in context: CommandContext) throws -> PathMonitor.Configuration {
        if let networkNamespace, !context.canEnterNetworkNamespace() {
            throw CommandFailure(
                message: "--netns \(networkNamespace) needs CAP_SYS_ADMIN to enter another network namespace; run as root (e.g. with sudo)",
                exitCode: .noPermission)
        }
        var fileOverrides: [ClassificationOverride] = []
        for path in ClassifyRules.configurationFiles(environment: context.environment) {
            guard let text = try context.readFile(path) else { continue }
            do {
                fileOverrides += try ClassifyRules.parseFile(text, path: path)
            } catch {
                throw CommandFailure(message: error.description, exitCode: .configuration)
            }
        }
        return PathMonitor.Configuration(
            networkNamespace: networkNamespace,
            classificationOverrides: overrides + fileOverrides,
            logger: logger(in: context),
            includesAllInterfaces: includesAllInterfaces,
            connectivityCheck: try connectivityCheck(in: context))
    }

    /// The connectivity check from the command line, reachability.conf, or NetworkManager's
    /// `[connectivity]`; nil when none is configured. Throws `CommandFailure` (exit 78) for a
    /// bad line or value in a file.
    func connectivityCheck(in context: CommandContext) throws -> ConnectivityCheck? {
        var settings = connectivity
        for path in ConnectivityConfiguration.reachabilityFiles(environment: context.environment) {
            guard let text = try context.readFile(path) else { continue }
            do {
                settings = settings.merged(over: try ConnectivityConfiguration.parseReachabilityConf(text, path: path))
            } catch {
                throw CommandFailure(message: error.description, exitCode: .configuration)
            }
        }
        if settings.url == nil {
            let files = ConnectivityConfiguration.networkManagerFiles(environment: context.environment,
                                                                     listDirectory: context.listDirectory)
            // NetworkManager's files are its own: one we cannot read is skipped, as if absent.
            let texts = files.compactMap { path in (try? context.readFile(path)).flatMap { $0 }.map { (path: path, text: $0) } }
            if let networkManager = ConnectivityConfiguration.parseNetworkManager(texts) {
                settings = settings.merged(over: networkManager)
            }
        }
        do {
            return try ConnectivityConfiguration.check(from: settings)
        } catch {
            throw CommandFailure(message: error.description, exitCode: .configuration)
        }
    }

    /// Debug-level lines on stderr with `--verbose`, otherwise silent.
    func logger(in context: CommandContext) -> Logger {
        guard isVerbose else { return .silent }
        let errorOutput = context.errorOutput
        return Logger(label: "reachability", minimumLevel: .debug, sink: { errorOutput.line(TerminalText.escaped($0)) })
    }

    /// Builds the source for `configuration(in:)` and starts it; the caller cancels it when done.
    func startPathSource(in context: CommandContext) throws -> any PathSource {
        try startPathSource(in: context, validate: { _ in }).source
    }

    /// Like `startPathSource(in:)`, with the configuration used; `validate` may refuse it (a
    /// command that needs a connectivity check) before anything starts.
    /// `prepare` runs between creating the source and starting it (to subscribe before the first
    /// path, so no update is missed).
    func startPathSource(in context: CommandContext, validate: (PathMonitor.Configuration) throws -> Void,
                         prepare: (any PathSource) -> Void = { _ in })
        throws -> (source: any PathSource, configuration: PathMonitor.Configuration) {
        let configuration = try configuration(in: context)
        try validate(configuration)
        let source = context.makePathSource(configuration)
        prepare(source)
        do {
            try source.start()
        } catch {
            source.cancel()
            throw error
        }
        return (source, configuration)
    }
}
