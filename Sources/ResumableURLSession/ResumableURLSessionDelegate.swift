import Foundation

/// URLSessionDelegate's shape: what every delegate of a `ResumableURLSession` may hear, whatever
/// its tasks. `ResumableURLSessionDownloadDelegate` and `ResumableURLSessionDataDelegate` refine
/// it, as URLSessionDownloadDelegate and URLSessionDataDelegate refine URLSessionDelegate.
public protocol ResumableURLSessionDelegate: AnyObject, Sendable {
    /// The session was invalidated and will call the delegate no more. A background session
    /// whose identifier another live process holds ends here at once, with
    /// `URLError.backgroundSessionInUseByAnotherProcess` (-996), as does one that cannot reach or
    /// start the agent (`backgroundSessionWasDisconnected`, -997, the message says why).
    func urlSession(_ session: ResumableURLSession, didBecomeInvalidWithError error: (any Error)?)

    /// Background sessions: every event that waited for this process (tasks that finished or
    /// failed while nobody had the session) has been handed to the delegate. Apple's
    /// `urlSessionDidFinishEvents(forBackgroundURLSession:)`; a program started for launch
    /// events (`REACHABILITY_BACKGROUND_SESSION`) may exit once it is called.
    func urlSessionDidFinishEvents(forBackgroundURLSession session: ResumableURLSession)
}

extension ResumableURLSessionDelegate {
    /// Does nothing.
    public func urlSession(_ session: ResumableURLSession, didBecomeInvalidWithError error: (any Error)?) {}
    /// Does nothing.
    public func urlSessionDidFinishEvents(forBackgroundURLSession session: ResumableURLSession) {}
}
