import FoundationEssentials
import LinuxReachability
import Synchronization
import ReachabilityBase

/// Knobs for every request, from `DownloadAgent.Configuration`.
struct TransferSettings: Sendable, Hashable {
    var connectTimeout: Duration
    var stallTimeout: Duration
    var stallBytesPerSecond: Int
    var maximumRedirects: Int
    var keepAliveIdle: Duration
    var receiveBufferSize: Int
    var userAgent: String
    /// PEM CA bundle replacing the system one, when set.
    var certificateAuthorityFile: String? = nil
    /// `Name: value` lines added to every request.
    var additionalHeaders: [String] = []
    /// The receive limit per transfer (`ReceiveRateLimiter`), when set.
    var maximumBytesPerSecond: Int64? = nil
    /// false turns off peer and host verification (`--insecure`).
    var verifiesCertificates = true
    /// CURLOPT_PROXY when set ("" disables the environment's proxies).
    var proxy: String? = nil
    /// The shortest silence after which a receiving transfer is suspected of stalling.
    var stallSuspicion: Duration = .seconds(1)
    /// How long a request may go unanswered before it is suspected (raced): `stallSuspicion`, or
    /// longer for a host known to be slow to answer (`ServerProbeScheduler.answerSuspicion`).
    var answerSuspicion: Duration = .seconds(1)
    /// Most connections to one server at once, over every transfer of the engine
    /// (segmented attempts share what the others leave).
    var maximumConnectionsPerHost = 6
}

/// One HTTP attempt for a download.
struct TransferRequest: Sendable {
    var url: URL
    /// Where the stored bytes end; the request starts `overlap` bytes earlier.
    var offset: Int64
    /// The If-Range validator (strong ETag or Last-Modified).
    var ifRange: String?
    /// The strong ETag, when that is what If-Range carries.
    var entityTag: String?
    var knownTotalLength: Int64?
    /// The recorded strong Last-Modified and any ETag seen (weak too), to notice a change.
    var lastModified: String? = nil
    var observedEntityTag: String? = nil
    /// Bytes before `offset` fetched again and compared with the disk before appending.
    var overlap: Int64 = 0
    /// Interface to pin to (`CURLOPT_INTERFACE "if!name"`), nil to follow the routing table.
    var interfaceName: String?
    /// Open a new connection instead of reusing one from before a path change.
    var freshConnection: Bool
    var settings: TransferSettings
    /// When set, the attempt may fetch ranges over several connections and paths
    /// (`SegmentGroup`); the request above is then the template of every connection.
    var segmentation: Segmentation? = nil
    /// One past the last byte asked for (a segment's range with its seam overlap); nil asks for
    /// everything from the offset on.
    var rangeEnd: Int64? = nil
    /// The agent's limit over every download (`AgentRateLimit`) and whose bytes these are; nil
    /// outside an agent that has one.
    var agentRate: AgentRateShare? = nil
    /// A segment beside others: only a 206 for exactly the bytes asked will do.
    var isSegment = false
    /// With `isSegment`: the 206 must carry the recorded strong validator.
    var requiresValidator = false
    /// Asks only for the byte at `offset` and reads the answer's validators, writing nothing
    /// (`ResponseStateMachine.Request.isSeamProbe`).
    var isSeamProbe = false
}

/// What an attempt that may use several connections starts from (`TransferEngine`'s segment
/// groups, planned by `SegmentPlanner`).
struct Segmentation: Sendable {
    var configuration: SegmentPlanner.Configuration
    /// Bytes already stored, and the unverified seams kept with them.
    var stored: RangeSet<Int64>
    var seams: Set<Int64>
    /// Whether splitting is allowed, when the resume data already says (a validator or an
    /// expected SHA-256, and a length); nil lets the first answer decide.
    var allowsSegments: Bool?
    /// Whether an expected SHA-256 guards the file (then a range needs no validator of its own).
    var hasExpectedDigest: Bool
    /// Whether requests carry the record's validators (not when they vary per response and a
    /// digest proves the file; then one connection fills the gaps).
    var usesValidators = true
    /// The most bytes before a range's start fetched again to compare (`ResumeOverlap`).
    var overlap: Int64 = ResumeOverlap.maximum
    /// The usable paths, best first.
    var paths: [SegmentPlanner.Path]
    /// The download's sources when it has mirrors proven the same file (a path's `source`
    /// indexes them), with the piece hashes checked as pieces land; nil: the request's URL only.
    var sources: SourceLedger? = nil
}

/// What the engine reports when an attempt ends.
struct TransferOutcome: Sendable {
    var result: AttemptResult
    /// Body bytes accepted during this attempt.
    var bytesReceived: Int64
    /// The server answered ranges inconsistently (another entity on another connection, or a
    /// seam that does not match): later attempts use one connection.
    var disablesSegments = false
}

/// What the engine reports while an attempt runs, besides progress.
enum TransferEvent: Sendable, Hashable {
    /// The first response line arrived (the server answers); `connectTime` is how long the
    /// connection took to set up and `waited` how long the answer took once the request could be
    /// sent, when libcurl knows.
    case responseStarted(connectTime: Duration?, waited: Duration?)
    /// The response rewound the partial file to zero (a 200 to a range: the entity changed or
    /// the server ignores ranges).
    case restartedFromZero(reason: String)
    /// No body byte for longer than this transfer's recent pace explains (`StallDetector`).
    case stallSuspected
    /// A race started by `race(_:connectTimeout:)` ended.
    case raceEnded(DownloadStateMachine.RaceOutcome)
    /// A response carried another ETag than the recorded one for an entity of the same length
    /// (reported once per attempt).
    case entityTagChanged
    /// The connections of a segmented attempt changed (count or paths).
    case connectionsChanged(TransferConnections)
    /// A source of the file (a mirror) is no longer used, and why (bytes that failed a check,
    /// a range refused).
    case sourceDropped(URL, reason: String)
}

/// The connections an attempt holds, for events and metrics.
struct TransferConnections: Sendable, Hashable {
    /// Connections fetching bytes now.
    var count: Int
    /// Connections per path (interface name, or nil for the routing table's choice), best first.
    var paths: [PathShare]

    struct PathShare: Sendable, Hashable {
        var interface: String?
        var connections: Int
    }
}
