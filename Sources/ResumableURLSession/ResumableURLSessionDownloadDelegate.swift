import Foundation

/// URLSessionDownloadDelegate's shape for `ResumableURLSession`: the same method names and
/// parameters, so a delegate ported from iOS keeps its bodies. Every method but
/// `didFinishDownloadingTo` has a default that does nothing.
///
/// Calls arrive on the session's `delegateQueue`, one at a time and in order per task when that
/// queue is serial (the default). The session holds its delegate strongly until it is
/// invalidated, as URLSession does.
public protocol ResumableURLSessionDownloadDelegate: ResumableURLSessionDelegate {
    /// The download finished: `location` is a temporary file the delegate must move or open
    /// before returning; it is deleted afterwards.
    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didFinishDownloadingTo location: URL)

    /// Bytes arrived: `bytesWritten` since the last call, `totalBytesWritten` in all (including
    /// resumed bytes), `totalBytesExpectedToWrite` or -1 when the length is unknown
    /// (`NSURLSessionTransferSizeUnknown`).
    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didWriteData bytesWritten: Int64,
                    totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)

    /// A task made from resume data continues at `fileOffset` (0 when the stored bytes could not
    /// be used, for example because the resource changed); `totalBytesWritten` counts from there.
    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didResumeAtOffset fileOffset: Int64,
                    expectedTotalBytes: Int64)

    /// The task ended: nil after `didFinishDownloadingTo`, else a `URLError` whose `userInfo`
    /// holds resume data under `NSURLSessionDownloadTaskResumeData` when it can be continued.
    func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?)

    /// With `waitsForConnectivity`, the task is waiting for a usable network path (at most once
    /// per task).
    func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDownloadTask)
}

extension ResumableURLSessionDownloadDelegate {
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didWriteData bytesWritten: Int64,
                           totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {}
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didResumeAtOffset fileOffset: Int64,
                           expectedTotalBytes: Int64) {}
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?) {}
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDownloadTask) {}
}
