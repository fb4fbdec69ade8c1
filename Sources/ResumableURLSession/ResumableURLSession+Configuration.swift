import Foundation
import LinuxReachability
import ReachabilityAgent
import ReachabilityBase
import ResumableDownloads

extension ResumableURLSession {
    /// URLSessionConfiguration's download-relevant settings, plus where the session keeps its
    /// files (partial downloads and the key that authenticates resume data).
    public struct Configuration: Sendable {
        /// The default configuration: `defaultStateDirectory`, Apple's defaults otherwise.
        public static var `default`: Configuration { Configuration(stateDirectory: defaultStateDirectory) }

        /// `url-session` in the state directory every product of the package uses (the agent,
        /// the command line): `$REACHABILITY_STATE_DIR`, else `$XDG_STATE_HOME/reachability` when
        /// that directory is the effective user's (so `sudo -E` never puts root's files in
        /// another user's directory), else `/var/lib/reachability` for root, else
        /// `~/.local/state/reachability`. Where no rule applies (a relative
        /// `$REACHABILITY_STATE_DIR`, which the command line refuses; no home directory), the
        /// home directory Foundation reports.
        public static var defaultStateDirectory: URL {
            defaultStateDirectory(environment: ProcessInfo.processInfo.environment)
        }

        static func defaultStateDirectory(environment: [String: String],
                                          system: StateDirectoryLocation.System = .current) -> URL {
            defaultAgentDirectory(environment: environment, system: system).appendingPathComponent("url-session", isDirectory: true)
        }

        /// Where partial downloads, finished files (until the delegate moves them) and the
        /// resume-data key live; created 0700 and refused if another user owns it or can write to it.
        /// Resume data is accepted only by sessions using the same directory.
        public var stateDirectory: URL
        /// Off by default, as on Apple platforms (always on in background sessions): a task with no usable path fails at once
        /// (`notConnectedToInternet`), and one whose path drops fails with `networkConnectionLost`
        /// and resume data. On: the task waits for a usable path instead (the delegate hears
        /// `taskIsWaitingForConnectivity` once) and continues from its stored bytes, for drops in
        /// the middle of the transfer too, and rides out resets and server errors with backoff.
        public var waitsForConnectivity = false
        /// Whether expensive paths may be used: cellular-like interfaces, and links NetworkManager
        /// reports metered (a phone's hotspot, as Apple platforms count a Personal Hotspot); on by
        /// default, as on Apple platforms. Off: the transfer uses a non-expensive interface that is
        /// up (binding to it needs root) or waits/fails with `notConnectedToInternet` and
        /// `networkUnavailableReason == .expensive`; a transfer whose path turns expensive stops
        /// (checkpointed) and goes on when a cheap path is back.
        public var allowsExpensiveNetworkAccess = true
        /// Whether cellular paths may be used; on by default. Off acts like the expensive rule for
        /// cellular paths (`networkUnavailableReason == .cellular`); the engine has one rule for
        /// both, so it also keeps tasks off metered links.
        public var allowsCellularAccess = true
        /// Whether a modem registered on a visited network (roaming, per ModemManager) may be
        /// used; on by default. Not in Apple's API, whose platforms leave data roaming to a system
        /// setting; off acts like `allowsCellularAccess` for roaming paths only.
        public var allowsRoaming = true
        /// Whether links the user asked to save data on may be used: NetworkManager's
        /// `Metered=yes`, set on the connection, Linux's nearest to Apple's Low Data Mode
        /// (`NetworkPath.isConstrained`); on by default, as on Apple platforms. Off: such a link
        /// is avoided as `allowsExpensiveNetworkAccess` avoids expensive ones
        /// (`networkUnavailableReason == .constrained`).
        public var allowsConstrainedNetworkAccess = true
        /// Off by default, as on Apple platforms. On: the tasks are background work that waits for
        /// good conditions, here a path that is neither expensive nor roaming (Apple also waits
        /// for power; BITS and Android's `setRequiredNetworkType(UNMETERED)` do the same). For
        /// background sessions too: the agent's tasks then wait for such a path.
        public var isDiscretionary = false
        /// Seconds a transfer may go without data (and the limit for connecting) before it is
        /// dropped; 60 by default, as on Apple platforms. A stalled transfer ends with
        /// `networkConnectionLost` and resume data.
        public var timeoutIntervalForRequest: TimeInterval = 60
        /// Data tasks with an idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE): when the
        /// network path goes away or moves under the request before its response reached the
        /// delegate, try it once more on the next path instead of failing with -1005. Off by
        /// default, as URLSession never repeats a request on its own; a POST is never repeated.
        /// Upload tasks do not use it: they continue from the server's offset where it keeps one.
        public var retriesIdempotentRequestsAfterPathChange = false
        /// With `waitsForConnectivity`, seconds a task may wait for a usable path before it fails
        /// with `timedOut` (and resume data); 7 days by default.
        public var timeoutIntervalForResource: TimeInterval = 7 * 24 * 3600
        /// Most connections to one server at once, as on Apple platforms: a task adds connections
        /// beside its first (ranges of the file in parallel, over several paths when the host has
        /// several uplinks) only while that makes it faster and the server answered a range with
        /// the entity's validator; all tasks to one server share the bound. It also bounds how many
        /// tasks transfer at once (the rest wait their turn). 1 fetches every file over one
        /// connection.
        public var httpMaximumConnectionsPerHost = 6
        /// Headers sent with every request, as on Apple platforms. They stay in memory: credentials
        /// here are never written to the engine's records or to resume data. Headers the resume
        /// rules own (`Range`, `If-Range`, `Accept-Encoding`, ...) and values with control
        /// characters make every task fail with the reason.
        public var httpAdditionalHeaders: [String: String]?
        /// A PEM bundle of certificate authorities trusted instead of the system's (for private
        /// servers; on Apple platforms a server-trust challenge does this); nil trusts the system's.
        public var certificateAuthorityFile: URL?
        /// How long the partial file behind resume data is kept once nothing touches it; older
        /// ones (and files a killed process left) are removed when a session starts, and resume
        /// data for them then restarts from zero. 7 days by default; nil keeps them forever.
        public var resumeDataLifetime: TimeInterval? = 7 * 24 * 3600
        /// The path monitor's settings (interface classification overrides, for example).
        public var pathMonitor = PathMonitor.Configuration()
        /// Where the session's and the engine's diagnostics go; silent by default.
        public var logger = Logger.silent

        /// A configuration keeping its files in `stateDirectory`.
        public init(stateDirectory: URL) {
            self.stateDirectory = stateDirectory
        }

        // MARK: background sessions

        /// A background session's configuration (URLSessionConfiguration's): its tasks belong to
        /// the user's download agent, not to this process. They go on when the process exits, is
        /// killed or loses its terminal; a session made later with the same identifier, in any
        /// process of this user, gets them back (`allTasks`) and hears what happened meanwhile.
        /// `stateDirectory` names the agent's state directory (by default the agent's own:
        /// `$REACHABILITY_STATE_DIR`, else `$XDG_STATE_HOME/reachability`, else
        /// `~/.local/state/reachability`, `/var/lib/reachability` for root); an agent is started
        /// there when none runs (see docs/url-session.md, "Background sessions").
        /// `waitsForConnectivity` is always on.
        public static func background(withIdentifier identifier: String) -> Configuration {
            var configuration = Configuration(stateDirectory: defaultAgentDirectory(environment: ProcessInfo.processInfo.environment))
            configuration.identifier = identifier
            return configuration
        }

        /// The background session's identifier; nil for other sessions.
        public private(set) var identifier: String?
        /// Background sessions: when a task finishes or fails for good while no process has the
        /// session, the agent starts the program (`launchUnit`, else `launchCommand`) with the
        /// identifier in `REACHABILITY_BACKGROUND_SESSION`; true by default, as on Apple platforms.
        public var sessionSendsLaunchEvents = true
        /// Background sessions: the program the agent runs for launch events (argv, no shell;
        /// `launchCommand[0]` is looked up on the agent's PATH unless it is a path).
        public var launchCommand: [String]?
        /// Background sessions: a systemd user unit the agent starts for launch events instead
        /// (`NAME.service`, or a template `NAME@.service`, started as `NAME@IDENTIFIER.service`
        /// with the identifier escaped as systemd-escape does).
        public var launchUnit: String?
        /// Background sessions: the agent binary started when none runs; nil is `reachability`
        /// found on `PATH`.
        public var agentExecutable: URL?

        /// Whether this is a background session's configuration.
        var isBackground: Bool { identifier != nil }

        /// `waitsForConnectivity` as tasks apply it: always on for background sessions.
        var effectiveWaitsForConnectivity: Bool { isBackground || waitsForConnectivity }

        /// `timeoutIntervalForRequest` as a duration, held to 1 ms...1 day (NaN and negative
        /// values are the default 60 s), so no caller's value traps in a conversion.
        var requestTimeout: Duration {
            timeoutIntervalForRequest.isFinite && timeoutIntervalForRequest > 0
                ? max(.milliseconds(1), Duration(clampingTimeInterval: min(timeoutIntervalForRequest, 86_400))) : .seconds(60)
        }

        /// `timeoutIntervalForResource` as a duration, held to 1 ms...100 years (default 7 days).
        var resourceTimeout: Duration {
            timeoutIntervalForResource.isFinite && timeoutIntervalForResource > 0
                ? max(.milliseconds(1), Duration(clampingTimeInterval: min(timeoutIntervalForResource, 100 * 365 * 86_400)))
                : .seconds(7 * 24 * 3600)
        }

        /// The agent's own default state directory (the one resolver's).
        static func defaultAgentDirectory(environment: [String: String], system: StateDirectoryLocation.System = .current) -> URL {
            let root = (try? StateDirectoryLocation.resolve(explicit: nil, environment: environment, system: system))
                ?? NSHomeDirectory() + "/.local/state/reachability"
            return URL(fileURLWithPath: root, isDirectory: true)
        }

        /// What the agent keeps of this background configuration.
        var backgroundSettings: BackgroundSessionSettings {
            var settings = BackgroundSessionSettings()
            settings.sendsLaunchEvents = sessionSendsLaunchEvents
            settings.isDiscretionary = isDiscretionary
            settings.allowsExpensiveNetworkAccess = allowsExpensiveNetworkAccess && allowsCellularAccess
            settings.allowsRoaming = allowsRoaming
            settings.allowsConstrainedNetworkAccess = allowsConstrainedNetworkAccess
            settings.maximumConnectionsPerHost = max(1, min(httpMaximumConnectionsPerHost, DownloadAgent.maximumConnectionsPerHostLimit))
            settings.launchCommand = launchCommand
            settings.launchUnit = launchUnit
            settings.timeoutIntervalForResource = timeoutIntervalForResource.isFinite && timeoutIntervalForResource > 0
                ? min(timeoutIntervalForResource, 100 * 365 * 86_400) : 7 * 24 * 3600
            settings.timeoutIntervalForRequest = timeoutIntervalForRequest.isFinite && timeoutIntervalForRequest > 0
                ? min(timeoutIntervalForRequest, 86_400) : 60
            settings.additionalHeaders = headerLines
            return settings
        }

        /// Test hook: adjusts the engine's configuration (shorter backoffs, say).
        var adjustAgent: (@Sendable (inout DownloadAgent.Configuration) -> Void)?

        func agentConfiguration(stateDirectory records: URL) -> DownloadAgent.Configuration {
            // TimeIntervals from the caller: NaN, negative, infinite and huge ones are held to
            // 1 ms...100 years rather than trapping in a conversion.
            let requestTimeout = max(.milliseconds(1), Duration(clampingTimeInterval: timeoutIntervalForRequest))
            var agent = DownloadAgent.Configuration(
                stateDirectory: records,
                maximumConcurrentDownloads: max(1, httpMaximumConnectionsPerHost),
                maximumOutageWait: waitsForConnectivity
                    ? max(.milliseconds(1), Duration(clampingTimeInterval: timeoutIntervalForResource)) : nil,
                stallTimeout: requestTimeout,
                connectTimeout: requestTimeout,
                userAgent: "reachability-urlsession/1",
                certificateAuthorityFile: certificateAuthorityFile,
                logger: logger)
            agent.additionalHeaders = headerLines
            agent.maximumConnectionsPerHost = max(1, min(httpMaximumConnectionsPerHost, DownloadAgent.maximumConnectionsPerHostLimit))
            adjustAgent?(&agent)
            return agent
        }

        /// `httpAdditionalHeaders` as `Name: value` lines, sorted by name.
        var headerLines: [String] {
            (httpAdditionalHeaders ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
        }

        /// Why the configuration cannot be used, or nil.
        var problem: String? {
            for line in headerLines {
                if let problem = HeaderValidation.problem(with: line) {
                    return "httpAdditionalHeaders: \(line.prefix(while: { $0 != ":" })): \(problem)"
                }
            }
            if let identifier {
                if let problem = BackgroundSessionKey.problem(with: identifier) { return problem }
                if let problem = backgroundSettings.problem { return problem }
            }
            return nil
        }
    }
}
