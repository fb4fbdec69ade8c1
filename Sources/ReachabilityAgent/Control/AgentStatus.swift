/// The agent itself, as `AgentClient.status()` and `agent status` show it.
public struct AgentStatus: Codable, Sendable, Hashable {
    /// The agent's process.
    public var pid: Int32
    /// Its state directory (absolute).
    public var stateDirectory: String
    /// When it started, ISO 8601 in UTC (`2026-11-30T07:02:39.726Z`).
    public var startedAt: String
    /// Downloads transferring at once.
    public var maximumConcurrentDownloads: Int
    /// Whether new downloads may use expensive (cellular-like) paths.
    public var allowsExpensive: Bool
    /// `satisfied` or `unsatisfied`; nil before the first path.
    public var pathStatus: String?
    /// `wired`, `wifi`, `cellular`, `other` or `unavailable`.
    public var connection: String?
    /// The primary interface's name while the path is satisfied.
    public var interface: String?
    /// Whether the path is expensive.
    public var isExpensive: Bool?
    /// Downloads per state name (`AgentDownload.State` raw values).
    public var counts: [String: Int]
    /// The sd_notify STATUS text, e.g. `3 downloading, 1 waiting for network`.
    public var summary: String

    /// A status report (the agent makes these).
    public init(pid: Int32, stateDirectory: String, startedAt: String, maximumConcurrentDownloads: Int, allowsExpensive: Bool,
                pathStatus: String?, connection: String?, interface: String?, isExpensive: Bool?, counts: [String: Int],
                summary: String) {
        self.pid = pid
        self.stateDirectory = stateDirectory
        self.startedAt = startedAt
        self.maximumConcurrentDownloads = maximumConcurrentDownloads
        self.allowsExpensive = allowsExpensive
        self.pathStatus = pathStatus
        self.connection = connection
        self.interface = interface
        self.isExpensive = isExpensive
        self.counts = counts
        self.summary = summary
    }
}
