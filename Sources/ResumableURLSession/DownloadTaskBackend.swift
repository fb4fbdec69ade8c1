import Foundation

/// What runs a `ResumableDownloadTask`'s transfer: this process's engine
/// (`LocalDownloadBackend`) or, for a background session's task, the agent (`BackgroundTask`,
/// which mirrors the agent's state). The task's public surface asks its backend and never which
/// kind it is, as swift-nio's channels share one protocol over their transports.
protocol DownloadTaskBackend: AnyObject, Sendable {
    /// The owning task, for the delegate calls the backend makes (held weakly: the task owns it).
    func adopt(_ owner: ResumableDownloadTask)

    /// running, suspended, canceling or completed.
    var publicState: ResumableDownloadTask.State { get }
    /// Bytes of the file received so far, resumed bytes included.
    var bytesReceived: Int64 { get }
    /// The file's length, or -1 while unknown.
    var expectedBytes: Int64 { get }
    /// The error the task completed with, once it has.
    var error: URLError? { get }

    /// Starts the transfer, or continues it after `suspend()`.
    func resume()
    /// Pauses the transfer, keeping what arrived.
    func suspend()
    /// Stops for good; with a callback, producing resume data, which it gets (on the delegate
    /// queue, before didCompleteWithError) or nil when the download cannot be continued.
    func cancel(producingResumeData callback: (@Sendable (Data?) -> Void)?)
    /// The task's hints changed (its description, date, expected bytes or priority).
    func hintsChanged(_ hints: ResumableDownloadTask.Hints)
}
