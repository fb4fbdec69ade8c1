import LinuxReachability

/// Options shared by every command that runs a `PathMonitor`, and how they become its configuration.
struct MonitorOptions: Sendable, Equatable {
    static let networkNamespace = Option.value(
        "netns", valueName: "name",
        help: "Use the network namespace NAME (see 'ip netns list') instead of the current one. Needs CAP_SYS_ADMIN (root).")
    static let classify = Option.repeating(
        "classify", valueName: "pattern=type",
        help: "Report interfaces whose name matches the glob PATTERN as TYPE (wired, wifi, cellular, loopback, other). Repeatable; wins over classify.conf.")
    static let verbose = Option.flag("verbose", help: "Log the monitor's diagnostics to stderr.")

    /// The three options, for a command's option table.
    static let all = [networkNamespace, classify, verbose]

    /// Help paragraph on the classify.conf files every monitor command reads.
    static let discussion = """
        Classification overrides are also read from /etc/reachability/classify.conf and \
        $XDG_CONFIG_HOME/reachability/classify.conf (default ~/.config): one PATTERN=TYPE per line, \
        '#' starts a comment. The first matching rule wins: --classify, then the user file, then the system file.
        """

    /// `--netns`, validated.
    var networkNamespace: String?
    /// `--classify` rules, in command-line order.
    var overrides: [ClassificationOverride]
    /// `--verbose`.
    var isVerbose: Bool
    /// Set by commands that show every interface (`--all-interfaces`, `status --explain`).
    var includesAllInterfaces = false

    /// `--all-interfaces`, for the commands that print paths.
    static let allInterfaces = Option.flag(
        "all-interfaces", help: "List every interface in --json output, not only the usable ones (and print a line when any of them changes).")

    /// Reads and validates the shared options.
    init(arguments: ParsedArguments) throws {
        if let name = arguments.value(Self.networkNamespace) {
            // ip-netns keeps namespaces as files under /run/netns, so a name is one path component.
            guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else {
                throw UsageError.invalidValue(name, for: Self.networkNamespace, "expected a namespace name as listed by 'ip netns'")
            }
            networkNamespace = name
        }
        overrides = try arguments.values(Self.classify).map { rule in
            do throws(ClassifyRules.RuleError) {
                return try ClassifyRules.parseRule(rule, source: "--classify")
            } catch {
                throw UsageError.invalidValue(rule, for: Self.classify, error.reason)
            }
        }
        isVerbose = arguments.isSet(Self.verbose)
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
            includesAllInterfaces: includesAllInterfaces)
    }

    /// Debug-level lines on stderr with `--verbose`, otherwise silent.
    func logger(in context: CommandContext) -> Logger {
        guard isVerbose else { return .silent }
        let errorOutput = context.errorOutput
        return Logger(label: "reachability", minimumLevel: .debug, sink: { errorOutput.line($0) })
    }

    /// Builds the source for `configuration(in:)` and starts it; the caller cancels it when done.
    func startPathSource(in context: CommandContext) throws -> any PathSource {
        let source = context.makePathSource(try configuration(in: context))
        do {
            try source.start()
        } catch {
            source.cancel()
            throw error
        }
        return source
    }
}
