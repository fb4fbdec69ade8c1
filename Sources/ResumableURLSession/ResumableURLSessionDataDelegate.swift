import Foundation
import FoundationNetworking

/// URLSessionDataDelegate's shape for `ResumableURLSession`'s data (and upload) tasks: the same
/// method names and parameters, so a delegate ported from iOS keeps its bodies. Every method has
/// a default: the response is allowed, the rest does nothing.
///
/// Calls arrive on the session's `delegateQueue`, in order per task when that queue is serial
/// (the default): `didReceive response` first, body bytes only after its handler allowed them,
/// `didCompleteWithError` last. Tasks made with a completion handler call the handler instead.
public protocol ResumableURLSessionDataDelegate: ResumableURLSessionDelegate {
    /// The response head arrived: call `completionHandler` with `.allow` to receive the body, or
    /// `.cancel` to end the task with `URLError.cancelled` (other dispositions act as `.allow`:
    /// a data task here does not become a download or a stream). Body bytes that arrive meanwhile
    /// are held until it is called.
    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void)

    /// Part of the body, in order; the parts together are the whole body.
    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive data: Data)

    /// Request body bytes went out: `bytesSent` since the last call, `totalBytesSent` in all,
    /// `totalBytesExpectedToSend` or -1 when unknown. Never goes back, even when a retried
    /// request sends its body again.
    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didSendBodyData bytesSent: Int64,
                    totalBytesSent: Int64, totalBytesExpectedToSend: Int64)

    /// The task ended: nil after the whole body, else a `URLError` (-1005 at once when the
    /// network path went away under the request, -1009 when it was started with no path and
    /// without `waitsForConnectivity`).
    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?)

    /// With `waitsForConnectivity`, the task is waiting for a usable network path (at most once
    /// per task).
    func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDataTask)
}

extension ResumableURLSessionDataDelegate {
    /// Allows the response.
    public func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive response: URLResponse,
                           completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        completionHandler(.allow)
    }
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive data: Data) {}
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didSendBodyData bytesSent: Int64,
                           totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?) {}
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDataTask) {}
}
