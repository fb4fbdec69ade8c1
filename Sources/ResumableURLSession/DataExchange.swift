import Foundation
import ResumableDownloads

/// One HTTP exchange as a data or upload task needs it: the seam between the task (which
/// decides, `DataTaskStateMachine`) and the transport (the engine's one-shot exchange, or a
/// scripted one in tests).
protocol DataExchanger: Sendable {
    /// Starts `request`; `events` hears the response head, body bytes, sent bytes and the end
    /// (exactly one `.finished`, also after `cancel()`), from any thread, in order.
    func start(_ request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange

    /// Whether a request with an `upload` plan runs as a resumable upload that follows the path
    /// itself (and ends with resume data), rather than as one plain exchange.
    var runsResumableUploads: Bool { get }
}

extension DataExchanger {
    /// Plain exchanges only, unless the transport says otherwise.
    var runsResumableUploads: Bool { false }
}

/// A running exchange.
protocol DataExchange: Sendable {
    /// Stops it at once (its `.finished` may still arrive, and is ignored by a completed task).
    func cancel()
    /// Stops it for `cancel(byProducingResumeData:)`: its `.finished` carries the resume data.
    func stopForResumeData()
}

extension DataExchange {
    /// A transport that runs the upload here ends it the same way either way.
    func stopForResumeData() { cancel() }
}

/// What a data task asks for, checked: no fields the transport owns.
struct DataExchangeRequest: Sendable {
    var url: URL
    var method: String
    var headers: [String: String]
    var body: DataExchangeBody?
    /// The idle timeout (`timeoutIntervalForRequest`, or the request's own when shorter).
    var timeout: Duration
    /// An upload from a file that may resume, when the transport runs such uploads.
    var upload: UploadPlan? = nil
    /// The task's identifier (a background session's agent knows its uploads by it).
    var taskIdentifier = 0
}

/// How an upload task's file goes out when the server can resume it (IETF draft or tus).
struct UploadPlan: Sendable {
    /// Where an earlier task left it (`uploadTask(withResumeData:)`).
    var resuming: UploadResumeState?
    /// The first interruption ends the task with -1005 and resume data (no
    /// `waitsForConnectivity`), instead of waiting for the path and continuing.
    var stopsAtInterruption: Bool
}

/// A request body: in memory, or a file the task opened.
enum DataExchangeBody: Sendable {
    case data(Data)
    case file(URL)
}

/// What an exchange reports.
enum DataExchangeEvent: Sendable {
    case response(DataTaskStateMachine.Response)
    case body(Data)
    case sent(bytes: Int64, total: Int64?)
    case finished(DataTaskStateMachine.Failure?)
}
