import FoundationEssentials
import LinuxReachability
import Glibc
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
}

/// What the engine reports when an attempt ends.
struct TransferOutcome: Sendable {
    var result: AttemptResult
    /// Body bytes accepted during this attempt.
    var bytesReceived: Int64
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
}
