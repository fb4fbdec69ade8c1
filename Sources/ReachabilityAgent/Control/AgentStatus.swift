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
    /// Whether new downloads may use expensive (cellular-like or metered) paths.
    public var allowsExpensive: Bool
    /// Whether new downloads may use a roaming modem (nil from older agents: yes).
    public var allowsRoaming: Bool?
    /// `satisfied` or `unsatisfied`; nil before the first path.
    public var pathStatus: String?
    /// `wired`, `wifi`, `cellular`, `other` or `unavailable`.
    public var connection: String?
    /// The primary interface's name while the path is satisfied.
    public var interface: String?
    /// Whether the path is expensive.
    public var isExpensive: Bool?
    /// Whether the path is roaming (nil from older agents).
    public var isRoaming: Bool?
    /// Downloads per state name (`AgentDownload.State` raw values).
    public var counts: [String: Int]
    /// The sd_notify STATUS text, e.g. `3 downloading, 1 waiting for network`.
    public var summary: String
    /// Background sessions (of the asking user; root sees every user's); nil from older agents.
    public var backgroundSessions: [BackgroundSessionStatus]?
    /// Every download the agent holds, every user's: only in root's status (`counts` and
    /// `summary` are the asking user's own downloads); nil otherwise and from older agents.
    public var totalDownloads: Int?
    /// Unfinished downloads (the asking user's) per priority class (`DownloadPriority` names),
    /// classes without any left out; nil from older agents.
    public var priorities: [String: Int]?
    /// UPower's facts as text (`on battery (54 %)`, `on AC power`, `unknown (UPower is not
    /// running)`); nil from older agents.
    public var power: String?
    /// True on battery, false on AC power; nil when unknown or from older agents.
    public var isOnBattery: Bool?
    /// The agent's one bandwidth limit in force, in bytes per second (nil: none, or an older agent).
    public var limitBytesPerSecond: Int64?
    /// The limit in force as `agent status` prints it: `limit 2 MiB/s (09:00-17:00)`,
    /// `limit 4 MiB/s (agent limit)`, `no limit`; nil from older agents.
    public var limit: String?

    /// A status report (the agent makes these).
    public init(pid: Int32, stateDirectory: String, startedAt: String, maximumConcurrentDownloads: Int, allowsExpensive: Bool,
                pathStatus: String?, connection: String?, interface: String?, isExpensive: Bool?,
                allowsRoaming: Bool? = nil, isRoaming: Bool? = nil, counts: [String: Int], summary: String,
                totalDownloads: Int? = nil, priorities: [String: Int]? = nil) {
        self.priorities = priorities
        self.pid = pid
        self.stateDirectory = stateDirectory
        self.startedAt = startedAt
        self.maximumConcurrentDownloads = maximumConcurrentDownloads
        self.allowsExpensive = allowsExpensive
        self.pathStatus = pathStatus
        self.connection = connection
        self.interface = interface
        self.isExpensive = isExpensive
        self.allowsRoaming = allowsRoaming
        self.isRoaming = isRoaming
        self.counts = counts
        self.summary = summary
        self.totalDownloads = totalDownloads
    }
}

/// A background session as `agent status` shows it: who it is, whether a process holds it, what
/// waits, and whether its launcher is failing.
public struct BackgroundSessionStatus: Codable, Sendable, Hashable {
    /// The session's identifier.
    public var identifier: String
    /// The user it belongs to.
    public var uid: UInt32
    /// The attached process, if any.
    public var attachedPID: Int32?
    /// Tasks that have not completed.
    public var tasks: Int
    /// Events waiting for the session's program.
    public var pendingEvents: Int
    /// `unit NAME` or `command ARGV0`, when the session sends launch events.
    public var launcher: String?
    /// Launches made by this agent.
    public var launches: Int
    /// Launches that failed in a row (0: fine).
    public var consecutiveLaunchFailures: Int
    /// Why the last launch failed.
    public var lastLaunchFailure: String?
    /// When the next launch is due (ISO 8601), while waiting to launch.
    public var nextLaunch: String?

    /// A session report (the agent makes these).
    public init(identifier: String, uid: UInt32, attachedPID: Int32?, tasks: Int, pendingEvents: Int, launcher: String?,
                launches: Int, consecutiveLaunchFailures: Int, lastLaunchFailure: String?, nextLaunch: String?) {
        self.identifier = identifier
        self.uid = uid
        self.attachedPID = attachedPID
        self.tasks = tasks
        self.pendingEvents = pendingEvents
        self.launcher = launcher
        self.launches = launches
        self.consecutiveLaunchFailures = consecutiveLaunchFailures
        self.lastLaunchFailure = lastLaunchFailure
        self.nextLaunch = nextLaunch
    }
}
