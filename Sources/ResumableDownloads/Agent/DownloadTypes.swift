import FoundationEssentials

/// The four classes of BITS (`BG_JOB_PRIORITY`) a queued download is in: a higher class takes
/// the transfer slots first; within one, first come first served. A `foreground` download that
/// finds every slot taken makes the latest admitted download of the lowest class give its slot
/// up (checkpointed and queued again, nothing lost). `DownloadOptions.priority` carries the
/// class as a number in URLSessionTask.priority's range.
public enum DownloadPriority: String, Sendable, Hashable, Codable, CaseIterable {
    /// Starts at once, taking a slot from a lower class when none is free (priority 1).
    case foreground
    /// Before normal and low ones (0.75, `URLSessionTask.highPriority`).
    case high
    /// The default (0.5, `URLSessionTask.defaultPriority`).
    case normal
    /// After every other class (0.25, `URLSessionTask.lowPriority`).
    case low

    /// The class as `DownloadOptions.priority`.
    public var value: Float {
        switch self {
        case .foreground: 1
        case .high: 0.75
        case .normal: 0.5
        case .low: 0.25
        }
    }

    /// The class of a `DownloadOptions.priority` (a `URLSessionTask.priority`): 1 is foreground,
    /// 0.75 (`highPriority`) and above high, 0.25 (`lowPriority`) and below low, normal between,
    /// so a task nudged a little from the default stays in the default class.
    public init(value: Float) {
        let value = DownloadOptions.clampedPriority(value)
        self = value >= 1 ? .foreground : value >= 0.75 ? .high : value <= 0.25 ? .low : .normal
    }
}

/// Per-download choices.
public struct DownloadOptions: Sendable, Hashable, Codable {
    /// Lowercase or uppercase hex SHA-256 the finished file must have; nil skips the check.
    public var expectedSHA256: String?
    /// Length the finished file must have; nil trusts the server's announced length.
    public var expectedLength: Int64?
    /// Whether expensive paths may carry this download: cellular-like interfaces, and links
    /// NetworkManager reports metered (a phone's hotspot, a connection marked metered). When false
    /// the download pins itself to a non-expensive interface if one is up, and otherwise waits;
    /// a transfer running when its path turns expensive stops at once (checkpointed) and resumes
    /// when a path it may use is back.
    public var allowsExpensive: Bool
    /// Whether a modem registered on a visited network (roaming, per ModemManager) may carry this
    /// download; true by default, as Android's `setAllowedOverRoaming` is. When false it is kept
    /// off roaming paths the way `allowsExpensive` keeps it off expensive ones.
    public var allowsRoaming: Bool = true
    /// Whether a link the user asked to save data on (NetworkManager `Metered=yes`, set on the
    /// connection; `NetworkPath.isConstrained`) may carry this download; true by default, as
    /// Apple's `allowsConstrainedNetworkAccess` is. When false it is kept off such links the
    /// way `allowsExpensive` keeps it off expensive ones.
    public var allowsConstrained: Bool = true
    /// Whether it waits for AC power: while the machine runs on battery (UPower's `OnBattery`,
    /// fed to `DownloadAgent.updatePower`) it stays queued with `JobWaitReason.onBattery`, and a
    /// transfer is checkpointed when the battery takes over (`queue add --not-on-battery`).
    public var waitsForACPower: Bool = false
    /// Whether the finished file may replace a file that exists at the destination when it
    /// completes. By default it never does: the download fails with `destinationExists` and
    /// keeps the verified bytes in `NAME.part`.
    public var replacesExistingFile: Bool = false
    /// Most connections this download opens at once (within the agent's
    /// `maximumConnectionsPerHost`, which bounds all downloads to one server together); nil
    /// takes that bound. 1 fetches over one connection.
    public var maximumConnections: Int?
    /// Whether `maximumConnections` is a count asked for (`--connections N`): all of them open as
    /// soon as the server has answered a range, as `aria2c -x N`. False (the default, and a
    /// background session's `httpMaximumConnectionsPerHost`): a bound, ramped up to while each
    /// added connection helps (docs/segments.md).
    public var opensAllConnections: Bool = false
    /// Interfaces the download may use, by name (`--interface`); empty lets the monitor's usable
    /// paths decide (several when the host has several uplinks, see `docs/downloads.md`).
    public var interfaces: [String] = []
    /// Whether an expensive path carries connections only while no other path is usable (true),
    /// or also beside cheap ones while it adds throughput (false, the default). Without
    /// `allowsExpensive` expensive paths are never used.
    public var usesExpensivePathsOnlyAsFallback = false
    /// Where the download waits for a transfer slot: 0...1, higher first, equal ones in the order
    /// they were queued (URLSessionTask.priority's range; 0.5 by default).
    public var priority: Float = 0.5
    /// Request headers (`Name: value`) of this download only, sent after the agent's
    /// `additionalHeaders`; checked like them (`HeaderValidation`). Kept in memory, never in the
    /// resume record: a restored download gets them again from whoever restores it.
    public var requestHeaders: [String] = []
    /// This download's own limit for connecting and for going without data (a URLRequest's
    /// `timeoutInterval`), when shorter than the agent's.
    public var requestTimeout: Duration?
    /// When the download must be done (BITS' `MaxDownloadTime` counted from the job's creation,
    /// `timeoutIntervalForResource`): at this wall-clock time it fails with `timedOut`, whatever
    /// it is doing, and keeps its resume data. Nil: no deadline.
    public var deadline: Date?
    /// How long the download may go without a byte once something went wrong (BITS'
    /// `NoProgressTimeout`): counted from the first transient error or lost path, reset by each
    /// byte; when it runs out the download fails with `timedOut` and keeps its resume data.
    /// Nil: the agent's `maximumOutageWait` alone.
    public var noProgressTimeout: Duration?
    /// Other sources of the same file (mirrors, issue 34). Ranges are fetched from them beside
    /// the download's URL, the faster ones getting more, when they are proven the same file:
    /// `expectedSHA256` or `pieceHashes` given, or else each range's answer carries the first
    /// source's strong validator and length (a mirror that does not is dropped). Kept in the
    /// resume record (`JobSources`) for an agent restart; a caller restoring gives them again.
    public var mirrors: [URL] = []
    /// SHA-256 hashes of the file's pieces (a Metalink's): each piece is checked as it lands, and
    /// a mirror whose bytes fail is dropped and its pieces fetched from another source.
    public var pieceHashes: PieceHashes?
    /// The proxy for this download's requests (a `ProxyURL`'s text; "" for none), nil for the
    /// agent's setting. The agent fills in its own when nil, so a created `Download`'s options
    /// say what it uses (nil there: libcurl's environment variables). Not encoded here (it may
    /// carry a password, and a client's options travel over the control socket); the job's own
    /// is kept in its resume record (`JobSources`, mode 0600), so a restored job keeps it.
    public var proxy: String?
    /// The agent's `--on-complete` command, carried into the resume record (not encoded here:
    /// it is the agent's, not a client's to send).
    package var completionCommand: CompletionCommand?

    /// Creates options.
    public init(expectedSHA256: String? = nil, expectedLength: Int64? = nil, allowsExpensive: Bool = true,
                replacesExistingFile: Bool = false, allowsRoaming: Bool = true, allowsConstrained: Bool = true,
                maximumConnections: Int? = nil, interfaces: [String] = [],
                usesExpensivePathsOnlyAsFallback: Bool = false, priority: Float = 0.5, requestHeaders: [String] = [],
                requestTimeout: Duration? = nil) {
        self.expectedSHA256 = expectedSHA256
        self.expectedLength = expectedLength
        self.allowsExpensive = allowsExpensive
        self.replacesExistingFile = replacesExistingFile
        self.allowsRoaming = allowsRoaming
        self.allowsConstrained = allowsConstrained
        self.maximumConnections = maximumConnections
        self.interfaces = interfaces
        self.usesExpensivePathsOnlyAsFallback = usesExpensivePathsOnlyAsFallback
        self.priority = Self.clampedPriority(priority)
        self.requestHeaders = requestHeaders
        self.requestTimeout = requestTimeout
    }

    /// These options with `proxy` set.
    func withProxy(_ proxy: String?) -> DownloadOptions {
        var options = self
        options.proxy = proxy
        return options
    }

    /// A priority within 0...1 (NaN is the default, 0.5).
    static func clampedPriority(_ priority: Float) -> Float { priority.isNaN ? 0.5 : min(1, max(0, priority)) }

    private enum CodingKeys: String, CodingKey {
        case expectedSHA256, expectedLength, allowsExpensive, replacesExistingFile, allowsRoaming, allowsConstrained,
             maximumConnections, interfaces, usesExpensivePathsOnlyAsFallback, priority, requestHeaders, requestTimeout,
             deadline, noProgressTimeout, mirrors, pieceHashes, opensAllConnections
    }

    /// Decodes options; keys added later may be absent.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        expectedSHA256 = try container.decodeIfPresent(String.self, forKey: .expectedSHA256)
        expectedLength = try container.decodeIfPresent(Int64.self, forKey: .expectedLength)
        allowsExpensive = try container.decodeIfPresent(Bool.self, forKey: .allowsExpensive) ?? true
        replacesExistingFile = try container.decodeIfPresent(Bool.self, forKey: .replacesExistingFile) ?? false
        allowsRoaming = try container.decodeIfPresent(Bool.self, forKey: .allowsRoaming) ?? true
        allowsConstrained = try container.decodeIfPresent(Bool.self, forKey: .allowsConstrained) ?? true
        maximumConnections = try container.decodeIfPresent(Int.self, forKey: .maximumConnections)
        opensAllConnections = try container.decodeIfPresent(Bool.self, forKey: .opensAllConnections) ?? false
        interfaces = try container.decodeIfPresent([String].self, forKey: .interfaces) ?? []
        usesExpensivePathsOnlyAsFallback = try container.decodeIfPresent(Bool.self, forKey: .usesExpensivePathsOnlyAsFallback) ?? false
        priority = Self.clampedPriority(try container.decodeIfPresent(Float.self, forKey: .priority) ?? 0.5)
        requestHeaders = try container.decodeIfPresent([String].self, forKey: .requestHeaders) ?? []
        requestTimeout = try container.decodeIfPresent(Duration.self, forKey: .requestTimeout)
        deadline = try container.decodeIfPresent(Date.self, forKey: .deadline)
        noProgressTimeout = try container.decodeIfPresent(Duration.self, forKey: .noProgressTimeout)
        mirrors = try container.decodeIfPresent([URL].self, forKey: .mirrors) ?? []
        pieceHashes = try container.decodeIfPresent(PieceHashes.self, forKey: .pieceHashes)
    }
}

/// The connections a download holds while it transfers, by path.
public struct DownloadConnections: Sendable, Hashable {
    /// One path and its connections.
    public struct Path: Sendable, Hashable {
        /// The interface the connections are bound to; nil when the routing table chooses.
        public var interface: String?
        /// Connections on it.
        public var connections: Int

        /// Creates a path share.
        public init(interface: String?, connections: Int) {
            self.interface = interface
            self.connections = connections
        }
    }

    /// Connections fetching bytes now (0 between attempts).
    public var count: Int
    /// The paths in use, best first.
    public var paths: [Path]

    /// Creates a connection summary.
    public init(count: Int = 0, paths: [Path] = []) {
        self.count = count
        self.paths = paths
    }
}

/// Where a download is in its life.
public enum DownloadState: Sendable, Hashable {
    /// Waiting for a free slot (see `maximumConcurrentDownloads`).
    case queued
    /// Transferring, or between attempts (retry backoff, waiting for an unreachable server).
    case running
    /// No usable path; it restarts by itself when one appears.
    case waitingForConnectivity
    /// Stopped by `pause()`; the partial file and resume record are kept.
    case paused
    /// The file is verified and in place.
    case completed
    /// Stopped for good, or until `resume()` when `error.isResumable`.
    case failed(DownloadError)

    /// Whether the download will not change state without a call to `resume()`.
    public var isFinal: Bool {
        switch self {
        case .completed, .failed: true
        case .queued, .running, .waitingForConnectivity, .paused: false
        }
    }
}

/// Something that happened to a download, in order.
public enum DownloadEvent: Sendable, Hashable {
    /// The first attempt started from byte zero.
    case started
    /// An attempt continued stored data from this offset.
    case resumed(at: Int64)
    /// No usable path; waiting for one.
    case waitingForConnectivity
    /// The path works but the server does not answer (refused, reset, timed out, DNS failing):
    /// waiting for it without spending the retry budget, probing on a short schedule (one probe
    /// per host however many downloads wait), bounded only by `maximumOutageWait`. The error is
    /// the failure that started the wait. The state stays `running`.
    case waitingForServer(DownloadError)
    /// Held back in line by a rule (disk space, power, a time window); it starts by itself when
    /// the rule lets it. The state stays `queued` (`Download.waitReason` has the reason).
    case waiting(JobWaitReason)
    /// The stored bytes were dropped and the download starts over (the resource changed or the
    /// server broke the range rules).
    case restartedFromZero(reason: String)
    /// An attempt failed and another follows after `delay`.
    case retrying(after: Duration, error: DownloadError)
    /// Paused; resume data kept.
    case paused
    /// Done: the verified file is at this URL.
    case completed(URL)
    /// Failed with this error.
    case failed(DownloadError)
    /// A mirror (`DownloadOptions.mirrors`) is no longer used, and why: its bytes failed a piece
    /// hash or differed from another source's (they are fetched again elsewhere), or it did not
    /// serve the file as the first source does.
    case sourceDropped(URL, reason: String)
}

/// How far a download has come.
public struct DownloadProgress: Sendable, Hashable {
    /// Bytes stored so far (from the start of the file, including resumed data).
    public var bytesReceived: Int64
    /// The entity's full length, when known.
    public var totalBytes: Int64?
    /// Smoothed receive rate in bytes per second.
    public var bytesPerSecond: Double
    /// Estimated time to finish at the current rate, when both total and rate are known.
    public var estimatedTimeRemaining: Duration?
    /// The connections and paths carrying it now (a progress update follows every change).
    public var connections = DownloadConnections()

    /// 0...1 when the total is known.
    public var fractionCompleted: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return min(1, Double(bytesReceived) / Double(totalBytes))
    }

    /// Creates a progress value.
    public init(bytesReceived: Int64 = 0, totalBytes: Int64? = nil, bytesPerSecond: Double = 0,
                estimatedTimeRemaining: Duration? = nil) {
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.estimatedTimeRemaining = estimatedTimeRemaining
    }
}
