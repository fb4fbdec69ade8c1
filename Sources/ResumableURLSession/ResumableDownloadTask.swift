import Foundation
import FoundationNetworking
import LinuxReachability
import ResumableDownloads
import Synchronization

/// A download task of a `ResumableURLSession`, shaped like `URLSessionDownloadTask`: created
/// suspended, started with `resume()`, observed through the session's delegate, `progress` and
/// the byte counts.
///
/// The transfer is its backend's (`DownloadTaskBackend`): this process's engine
/// (`LocalDownloadBackend`) or, in a background session, the agent (`BackgroundTask`); this
/// class is URLSessionDownloadTask's surface over either, and the delegate calls both make.
public final class ResumableDownloadTask: ResumableURLSessionTask {
    /// URLSessionTask.State's cases and raw values.
    public enum State: Int, Sendable {
        /// Transferring, waiting for a path (with `waitsForConnectivity`), or delivering its file.
        case running = 0
        /// Created and not resumed yet, or suspended.
        case suspended = 1
        /// `cancel()` was called; the delegate hears about it soon.
        case canceling = 2
        /// Finished, failed or cancelled; the delegate has been (or is being) told.
        case completed = 3
    }

    /// The request type (`URLRequest`); kept so code naming it still compiles.
    @available(*, deprecated, renamed: "URLRequest")
    public typealias Request = URLRequest

    /// `URLSessionTask.defaultPriority` and friends.
    public static let defaultPriority: Float = 0.5
    /// The lowest priority.
    public static let lowPriority: Float = 0
    /// The highest priority.
    public static let highPriority: Float = 1

    /// Unique within its session; in a background session, the same in every process that
    /// attaches it.
    public let taskIdentifier: Int
    /// What the task was created for (for a task from resume data, a GET of the URL recorded in
    /// it; nil when the data could not be read).
    public let originalRequest: URLRequest?
    /// Progress in bytes: `completedUnitCount` is `countOfBytesReceived`, `totalUnitCount` the
    /// expected length (-1 while unknown).
    public let progress: Progress

    let session: ResumableURLSession
    /// `downloadTask(with:completionHandler:)`: called instead of the delegate (the file is
    /// valid during the call), once.
    let completionHandler: (@Sendable (URL?, URLResponse?, (any Error)?) -> Void)?
    /// Who runs the transfer: this process's engine, or the agent.
    let backend: any DownloadTaskBackend
    /// A background session's task: its state is the agent's, mirrored here.
    var remote: BackgroundTask? { backend as? BackgroundTask }

    enum Source: Sendable {
        case request(URLRequest)
        case resumeData(Result<ResumeData, ResumeDataError>, original: Data)

        /// Resume data that was refused: such a task fails here, in any session.
        var isUnreadableResumeData: Bool {
            if case .resumeData(.failure, _) = self { true } else { false }
        }

        /// The URL asked for (from resume data: the one recorded in it).
        var url: URL? {
            switch self {
            case .request(let request): request.url
            case .resumeData(.success(let data), _): data.state.url
            case .resumeData(.failure, _): nil
            }
        }
    }

    /// What every task can be told before (and while) it runs.
    struct Hints: Sendable {
        var taskDescription: String?
        var earliestBeginDate: Date?
        var countOfBytesClientExpectsToReceive: Int64 = -1
        var priority: Float = ResumableDownloadTask.defaultPriority
    }

    let source: Source
    let hints: Mutex<Hints>

    init(session: ResumableURLSession, identifier: Int, source: Source,
         completionHandler: (@Sendable (URL?, URLResponse?, (any Error)?) -> Void)? = nil, remote: BackgroundTask? = nil,
         hints: Hints = Hints()) {
        self.session = session
        taskIdentifier = identifier
        self.source = source
        self.completionHandler = completionHandler
        self.hints = Mutex(hints)
        originalRequest = switch source {
        case .request(let request): request
        case .resumeData(.success(let data), _): URLRequest(url: data.state.url)
        case .resumeData(.failure, _): nil
        }
        var stored: (bytes: Int64, expected: Int64?) = (0, nil)
        if case .resumeData(.success(let data), _) = source { stored = (data.state.verifiedOffset, data.state.totalLength) }
        progress = Progress(totalUnitCount: stored.expected ?? -1)
        progress.completedUnitCount = stored.bytes
        backend = remote ?? LocalDownloadBackend(session: session, source: source)
        backend.adopt(self)
    }

    // MARK: URLSessionTask's surface

    /// running, suspended, canceling or completed.
    public var state: State { backend.publicState }

    /// Bytes of the file received so far, resumed bytes included.
    public var countOfBytesReceived: Int64 { backend.bytesReceived }
    /// The file's length, or -1 (`NSURLSessionTransferSizeUnknown`) while unknown.
    public var countOfBytesExpectedToReceive: Int64 { backend.expectedBytes }
    /// Always 0: download tasks send no body.
    public var countOfBytesSent: Int64 { 0 }
    /// Always 0: download tasks send no body.
    public var countOfBytesExpectedToSend: Int64 { 0 }
    /// The error the task completed with, once it has (what `didCompleteWithError` got).
    public var error: (any Error)? { backend.error }

    /// A label of your choosing; a background session's tasks keep it in the agent, so a later
    /// process finds it on the task it gets back.
    public var taskDescription: String? {
        get { hints.withLock { $0.taskDescription } }
        set { changeHints { $0.taskDescription = newValue } }
    }

    /// Background sessions: the task does not start before this date (it waits in the agent,
    /// `queue list` saying until when). Ignored by other sessions, as on Apple platforms.
    public var earliestBeginDate: Date? {
        get { hints.withLock { $0.earliestBeginDate } }
        set { changeHints { $0.earliestBeginDate = newValue } }
    }

    /// Background sessions: how many bytes the task expects (-1, unknown, by default). The agent
    /// starts it only when that many bytes (less what it has) fit the free disk space beside
    /// what other running tasks still expect; otherwise it waits with that reason, checked
    /// every 30 s, instead of filling the disk.
    public var countOfBytesClientExpectsToReceive: Int64 {
        get { hints.withLock { $0.countOfBytesClientExpectsToReceive } }
        set { changeHints { $0.countOfBytesClientExpectsToReceive = max(-1, newValue) } }
    }

    /// 0...1 (`defaultPriority` 0.5): where the task waits for a transfer slot, higher first.
    public var priority: Float {
        get { hints.withLock { $0.priority } }
        set { changeHints { $0.priority = newValue.isNaN ? Self.defaultPriority : min(1, max(0, newValue)) } }
    }

    private func changeHints(_ body: (inout Hints) -> Void) {
        let changed = hints.withLock { hints -> Hints in
            body(&hints)
            return hints
        }
        backend.hintsChanged(changed)
    }

    /// Starts the task, or continues it after `suspend()`.
    public func resume() {
        backend.resume()
    }

    /// Pauses the transfer, keeping what arrived; `resume()` continues it.
    public func suspend() {
        backend.suspend()
    }

    /// Stops the task for good and deletes what arrived; the delegate hears
    /// `didCompleteWithError` with `URLError.cancelled`. For a background task, the one way (with
    /// `invalidateAndCancel()` and `reachability queue cancel`) to stop it: a process that exits
    /// leaves it running.
    public func cancel() {
        backend.cancel(producingResumeData: nil)
    }

    /// Stops the task and hands `completionHandler` resume data (nil when the download cannot be
    /// continued: no bytes yet, or no ETag/Last-Modified from the server). The handler runs on
    /// the delegate queue, before `didCompleteWithError` (whose `URLError.cancelled` carries the
    /// same data).
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        backend.cancel(producingResumeData: completionHandler)
    }

    // MARK: telling the delegate (or the completion handler)

    func notifyWaitingForConnectivity() {
        guard completionHandler == nil else { return }
        session.deliver { [self] in $0.urlSession(session, taskIsWaitingForConnectivity: self) }
    }

    func notifyResumed(at offset: Int64, expected: Int64) {
        progress.totalUnitCount = expected
        progress.completedUnitCount = offset
        guard completionHandler == nil else { return }
        session.deliver { [self] in $0.urlSession(session, downloadTask: self, didResumeAtOffset: offset, expectedTotalBytes: expected) }
    }

    func notifyWrote(_ bytes: Int64, total: Int64, expected: Int64) {
        progress.totalUnitCount = expected
        progress.completedUnitCount = total
        guard completionHandler == nil else { return }
        session.deliver { [self] in
            $0.urlSession(session, downloadTask: self, didWriteData: bytes, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
        }
    }

    /// On the delegate queue: the file to the completion handler or the delegate.
    func deliverFile(at location: URL, expectedLength: Int64?) {
        if let completionHandler {
            completionHandler(location, response(for: location, expectedLength: expectedLength), nil)
        } else if let delegate = session.downloadDelegate {
            delegate.urlSession(session, downloadTask: self, didFinishDownloadingTo: location)
        }
    }

    /// On the delegate queue: the end (nil: success, after the file was delivered).
    func complete(with error: URLError?) {
        if let completionHandler {
            if let error { completionHandler(nil, nil, error) }
        } else if let delegate = session.downloadDelegate {
            delegate.urlSession(session, task: self, didCompleteWithError: error)
        }
    }

    /// What the completion handler and the async forms return with the file: a 200 for the URL
    /// asked for, with the length. (The engine follows redirects and validators internally; the
    /// headers of the last response are not kept.)
    func response(for location: URL, expectedLength: Int64?) -> URLResponse {
        let url = originalRequest?.url ?? location
        let length = ((try? FileManager.default.attributesOfItem(atPath: location.path)[.size]) as? NSNumber)?.int64Value
            ?? expectedLength ?? -1
        return HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1",
                               headerFields: length >= 0 ? ["Content-Length": "\(length)"] : [:])
            ?? URLResponse(url: url, mimeType: nil, expectedContentLength: Int(length), textEncodingName: nil)
    }
}
