import FoundationEssentials

/// A download as the agent reports it (`AgentClient`, `queue list --json`).
public struct AgentDownload: Codable, Sendable, Hashable {
    /// Where a download is in its life.
    public enum State: String, Codable, Sendable, CaseIterable {
        /// Waiting for a transfer slot.
        case queued
        /// Transferring, or between attempts.
        case running
        /// Waiting for a usable network path (or a portal login).
        case waitingForConnectivity
        /// Paused by a user; its resume data is kept.
        case paused
        /// Complete and verified, at its destination.
        case completed
        /// Failed (`AgentDownload.error` says why).
        case failed
        /// A state this client does not know (an agent newer than it).
        case unknown

        public init(from decoder: any Decoder) throws {
            self = State(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .unknown
        }

        /// Whether the download has ended (completed or failed).
        public var isFinal: Bool { self == .completed || self == .failed }
    }

    /// The download's UUID in lowercase; any unique prefix names it in requests.
    public var id: String
    /// Where the bytes come from.
    public var url: String
    /// Where the finished file goes (absolute).
    public var destination: String
    /// Where it is in its life.
    public var state: State
    /// Bytes stored so far.
    public var bytesReceived: Int64
    /// The file's length, when the server announced it.
    public var totalBytes: Int64?
    /// The current rate (0 when not transferring).
    public var bytesPerSecond: Int64
    /// Why it failed, for failed downloads.
    public var error: String?
    /// The background session whose tasks it carries (`ResumableURLSession`'s identifier); nil
    /// for downloads queued with `queue add`.
    public var session: String?
    /// The session's task identifiers riding on it (several when duplicate requests were joined).
    public var taskIdentifiers: [Int]?
    /// Why it does not transfer yet, as `queue list` shows it after `waiting: `
    /// (`JobWaitReason.description`: `0.8 GiB free, needs 1 GiB`, `on battery`).
    public var waitingReason: String?
    /// The reason's stable name (`JobWaitReason.Kind`: `lowDiskSpace`, `onBattery`, ...); nil
    /// when it does not wait, or from older agents.
    public var waitingFor: String?
    /// Its class in the line for transfer slots (`DownloadPriority`'s names); nil from older agents.
    public var priority: String?
    /// The most connections it opens, when the job set a bound of its own.
    public var connections: Int?
    /// False when it is kept off constrained paths; nil when they may carry it.
    public var allowsConstrained: Bool?
    /// True when it waits for AC power (`--not-on-battery`); nil otherwise.
    public var waitsForACPower: Bool?
    /// `upload` for an upload job (`queue add --upload`: `destination` is the local file, `url`
    /// where it goes); nil for a download.
    public var direction: String?
    /// An upload's file bytes handed to the connection, counted from the file's start.
    public var bytesSent: Int64?
    /// An upload's protocol once known: `ietf`, `tus` or `put`.
    public var uploadProtocol: String?

    /// A download report (the agent makes these; tests and other agents may too).
    public init(id: String, url: String, destination: String, state: State, bytesReceived: Int64, totalBytes: Int64?,
                bytesPerSecond: Int64, error: String? = nil, session: String? = nil, taskIdentifiers: [Int]? = nil,
                waitingReason: String? = nil, priority: String? = nil, connections: Int? = nil,
                allowsConstrained: Bool? = nil, direction: String? = nil, bytesSent: Int64? = nil, uploadProtocol: String? = nil) {
        self.direction = direction
        self.bytesSent = bytesSent
        self.uploadProtocol = uploadProtocol
        self.priority = priority
        self.connections = connections
        self.allowsConstrained = allowsConstrained
        self.session = session
        self.taskIdentifiers = taskIdentifiers
        self.waitingReason = waitingReason
        self.id = id
        self.url = url
        self.destination = destination
        self.state = state
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.error = error
    }
}
