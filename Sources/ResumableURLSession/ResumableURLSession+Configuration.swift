import Foundation
import LinuxReachability
import ResumableDownloads

extension ResumableURLSession {
    /// URLSessionConfiguration's download-relevant settings, plus where the session keeps its
    /// files (partial downloads and the key that authenticates resume data).
    public struct Configuration: Sendable {
        /// The default configuration: `defaultStateDirectory`, Apple's defaults otherwise.
        public static var `default`: Configuration { Configuration(stateDirectory: defaultStateDirectory) }

        /// `/var/lib/reachability/url-session` for root, else
        /// `$XDG_STATE_HOME/reachability/url-session` (`~/.local/state/...` when unset).
        public static var defaultStateDirectory: URL {
            if geteuid() == 0 { return URL(fileURLWithPath: "/var/lib/reachability/url-session", isDirectory: true) }
            let environment = ProcessInfo.processInfo.environment
            if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
                return URL(fileURLWithPath: state, isDirectory: true).appendingPathComponent("reachability/url-session")
            }
            let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? NSHomeDirectory()
            return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".local/state/reachability/url-session")
        }

        /// Where partial downloads, finished files (until the delegate moves them) and the
        /// resume-data key live; created 0700 and refused if another user owns it or can write to it.
        /// Resume data is accepted only by sessions using the same directory.
        public var stateDirectory: URL
        /// Off by default, as on Apple platforms: a task with no usable path fails at once
        /// (`notConnectedToInternet`), and one whose path drops fails with `networkConnectionLost`
        /// and resume data. On: the task waits for a usable path instead (the delegate hears
        /// `taskIsWaitingForConnectivity` once) and continues from its stored bytes, for drops in
        /// the middle of the transfer too, and rides out resets and server errors with backoff.
        public var waitsForConnectivity = false
        /// Whether expensive (cellular-like) paths may be used; on by default, as on Apple platforms.
        /// Off: the transfer uses a non-expensive interface that is up (binding to it needs root)
        /// or waits/fails with `notConnectedToInternet` and `networkUnavailableReason == .expensive`.
        public var allowsExpensiveNetworkAccess = true
        /// Whether cellular paths may be used; on by default. Off acts like the expensive rule for
        /// cellular paths (`networkUnavailableReason == .cellular`).
        public var allowsCellularAccess = true
        /// Seconds a transfer may go without data (and the limit for connecting) before it is
        /// dropped; 60 by default, as on Apple platforms. A stalled transfer ends with
        /// `networkConnectionLost` and resume data.
        public var timeoutIntervalForRequest: TimeInterval = 60
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

        /// Test hook: adjusts the engine's configuration (shorter backoffs, say).
        var adjustAgent: (@Sendable (inout DownloadAgent.Configuration) -> Void)?

        func agentConfiguration(stateDirectory records: URL) -> DownloadAgent.Configuration {
            let requestTimeout = Duration.milliseconds(Int64(max(0.001, timeoutIntervalForRequest) * 1000))
            var agent = DownloadAgent.Configuration(
                stateDirectory: records,
                maximumConcurrentDownloads: max(1, httpMaximumConnectionsPerHost),
                maximumOutageWait: waitsForConnectivity
                    ? .milliseconds(Int64(max(0.001, timeoutIntervalForResource) * 1000)) : nil,
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
            return nil
        }
    }
}
