import Foundation

// Foundation on Linux has neither the resume-data key nor its URLError accessor (its URLSession
// produces no resume data), so ported code would not compile; these keep Apple's spelling.

/// The `userInfo` key under which a failed or cancelled download task's resume data is stored,
/// as on Apple platforms.
public let NSURLSessionDownloadTaskResumeData = "NSURLSessionDownloadTaskResumeData"

/// The `userInfo` key under which a failed or cancelled upload task's resume data is stored, as
/// on Apple platforms (iOS 17 and later).
public let NSURLSessionUploadTaskResumeData = "NSURLSessionUploadTaskResumeData"

/// The `userInfo` key for why no network was usable (`URLError.NetworkUnavailableReason`'s raw
/// value), as on Apple platforms.
public let NSURLErrorNetworkUnavailableReasonKey = "NSURLErrorNetworkUnavailableReasonKey"

extension URLError {
    /// Why a task could not use the network, as on Apple platforms.
    public enum NetworkUnavailableReason: Int, Sendable {
        /// Only a cellular path exists and the configuration forbids cellular access.
        case cellular = 0
        /// Only an expensive path exists and the configuration forbids expensive access.
        case expensive = 1
        /// Only a constrained path exists (Low Data Mode; on Linux a link NetworkManager has
        /// `Metered=yes` set on) and the configuration forbids constrained access.
        case constrained = 2
    }

    /// The resume data of a download task that failed or was cancelled, when it can be resumed:
    /// pass it to `ResumableURLSession.downloadTask(withResumeData:)`.
    public var downloadTaskResumeData: Data? {
        userInfo[NSURLSessionDownloadTaskResumeData] as? Data
    }

    /// The resume data of an upload task that failed or was cancelled, when the server keeps
    /// what it received (IETF resumable upload draft or tus): pass it to
    /// `ResumableURLSession.uploadTask(withResumeData:)`.
    public var uploadTaskResumeData: Data? {
        userInfo[NSURLSessionUploadTaskResumeData] as? Data
    }

    /// Why the network was unavailable, when the configuration's access rules were the cause.
    public var networkUnavailableReason: NetworkUnavailableReason? {
        (userInfo[NSURLErrorNetworkUnavailableReasonKey] as? Int).flatMap(NetworkUnavailableReason.init(rawValue:))
    }
}
