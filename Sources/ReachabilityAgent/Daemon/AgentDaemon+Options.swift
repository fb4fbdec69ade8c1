import FoundationEssentials
import LinuxReachability
import ReachabilityBase
import ResumableDownloads

/// What the caller of `AgentDaemon.run` hands in: the parsed options and the parts it owns, and
/// the seams to the process, so the daemon itself parses nothing and the CLI's tests script it.
extension AgentDaemon {
    /// What the command line decided: the state directory asked for, the settings before
    /// `agent.conf`, and the parts the caller owns (paths, downloads' transport, metrics file).
    package struct Options: Sendable {
        /// `--state-dir`, nil for the default (`AgentStateDirectory.resolve`).
        package var stateDirectory: String?
        /// The command line's settings; `agent.conf` lines override them.
        package var settings: AgentSettings
        /// `agent.log` rotates at this size.
        package var logSizeLimit: Int
        /// The download engine's log (silent unless verbose).
        package var logger: Logger
        /// Starts the path monitor (throws `ReachabilityError` when it cannot).
        package var startPaths: @Sendable () throws -> PathFeed
        /// Applies the caller's transport options (rate limit, CA file, proxy) to every download agent.
        package var configureDownloads: @Sendable (inout DownloadAgent.Configuration) -> Void
        /// The caller's checks at start, after `agent.conf` and before the control socket; returns
        /// the metrics file to keep, nil for none. What it throws stops the start.
        package var openMetrics: @Sendable () throws -> (any AgentMetricsTarget)?

        /// Options with every part given.
        package init(stateDirectory: String?, settings: AgentSettings, logSizeLimit: Int, logger: Logger,
                     startPaths: @escaping @Sendable () throws -> PathFeed,
                     configureDownloads: @escaping @Sendable (inout DownloadAgent.Configuration) -> Void,
                     openMetrics: @escaping @Sendable () throws -> (any AgentMetricsTarget)?) {
            self.stateDirectory = stateDirectory
            self.settings = settings
            self.logSizeLimit = logSizeLimit
            self.logger = logger
            self.startPaths = startPaths
            self.configureDownloads = configureDownloads
            self.openMetrics = openMetrics
        }
    }

    /// A started path monitor as the agent uses it.
    package struct PathFeed: Sendable {
        /// The current path first, then every change (a new stream per call).
        package var paths: @Sendable () -> AsyncStream<NetworkPath>
        /// The path to one host.
        package var hostPaths: @Sendable (String) -> AsyncStream<HostPath>
        /// Stops watching and finishes every stream.
        package var cancel: @Sendable () -> Void

        /// A feed from its three parts.
        package init(paths: @escaping @Sendable () -> AsyncStream<NetworkPath>,
                     hostPaths: @escaping @Sendable (String) -> AsyncStream<HostPath>,
                     cancel: @escaping @Sendable () -> Void) {
            self.paths = paths
            self.hostPaths = hostPaths
            self.cancel = cancel
        }
    }

    /// Everything the daemon touches outside itself, so tests run it with scripted clocks,
    /// signals and files (the command line passes its `CommandContext`'s).
    package struct Host: Sendable {
        /// Event lines (stdout), one whole line per call.
        package var output: @Sendable (String) -> Void
        /// Diagnostics (stderr).
        package var errorOutput: @Sendable (String) -> Void
        /// The process environment (state directory, NOTIFY_SOCKET, LISTEN_FDS, test knobs).
        package var environment: [String: String]
        /// The wall clock for event timestamps.
        package var now: @Sendable () -> Date
        /// A file's contents, nil when it does not exist (`agent.conf`).
        package var readFile: @Sendable (String) throws -> String?
        /// Calls the handler with each signal's number until the returned closure is called.
        package var onSignals: @Sendable (_ signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) async -> (@Sendable () -> Void)
        /// The effective user (root's default state directory is /var/lib/reachability).
        package var effectiveUserID: UInt32
        /// The working directory a relative `--state-dir` is resolved against.
        package var currentDirectory: String

        /// A host from its parts.
        package init(output: @escaping @Sendable (String) -> Void, errorOutput: @escaping @Sendable (String) -> Void,
                     environment: [String: String], now: @escaping @Sendable () -> Date,
                     readFile: @escaping @Sendable (String) throws -> String?,
                     onSignals: @escaping @Sendable ([Int32], @escaping @Sendable (Int32) -> Void) async -> (@Sendable () -> Void),
                     effectiveUserID: UInt32, currentDirectory: String) {
            self.output = output
            self.errorOutput = errorOutput
            self.environment = environment
            self.now = now
            self.readFile = readFile
            self.onSignals = onSignals
            self.effectiveUserID = effectiveUserID
            self.currentDirectory = currentDirectory
        }
    }
}

/// A metrics file the agent keeps (`--metrics-file`); the command line owns the file and its
/// options, the daemon says what to write and when.
package protocol AgentMetricsTarget: Sendable {
    /// The file, for events.
    var path: String { get }
    /// Writes once (throws when that fails, which stops the agent at start), then rewrites the
    /// file every interval and on `refresh()`; `report` hears of a failed write (a message) and
    /// of the first good one after it (nil).
    func publish(render: @escaping @Sendable () async -> String,
                 report: @escaping @Sendable (_ failure: String?) -> Void) async throws -> any AgentMetricsPublication
}

/// A metrics file being kept up to date.
package protocol AgentMetricsPublication: Sendable {
    /// Asks for a write soon (a path changed).
    func refresh()
    /// Writes the final state and returns once no write is under way.
    func finish() async
}
