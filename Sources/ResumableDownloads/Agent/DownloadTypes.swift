import FoundationEssentials
import Glibc

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
    /// Whether the finished file may replace a file that exists at the destination when it
    /// completes. By default it never does: the download fails with `destinationExists` and
    /// keeps the verified bytes in `NAME.part`.
    public var replacesExistingFile: Bool = false
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

    /// Creates options.
    public init(expectedSHA256: String? = nil, expectedLength: Int64? = nil, allowsExpensive: Bool = true,
                replacesExistingFile: Bool = false, allowsRoaming: Bool = true, allowsConstrained: Bool = true,
                priority: Float = 0.5,
                requestHeaders: [String] = [], requestTimeout: Duration? = nil) {
        self.expectedSHA256 = expectedSHA256
        self.expectedLength = expectedLength
        self.allowsExpensive = allowsExpensive
        self.replacesExistingFile = replacesExistingFile
        self.allowsRoaming = allowsRoaming
        self.allowsConstrained = allowsConstrained
        self.priority = priority.isNaN ? 0.5 : min(1, max(0, priority))
        self.requestHeaders = requestHeaders
        self.requestTimeout = requestTimeout
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
