import Foundation
import ResumableDownloads

/// One HTTP exchange as a data or upload task needs it: the seam between the task (which
/// decides, `DataTaskStateMachine`) and the transport (the engine's one-shot exchange, or a
/// scripted one in tests).
protocol DataExchanger: Sendable {
    /// Starts `request`; `events` hears the response head, body bytes, sent bytes and the end
    /// (exactly one `.finished`, also after `cancel()`), from any thread, in order.
    func start(_ request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange
}

/// A running exchange.
protocol DataExchange: Sendable {
    /// Stops it at once (its `.finished` may still arrive, and is ignored by a completed task).
    func cancel()
}

/// What a data task asks for, checked: no fields the transport owns.
struct DataExchangeRequest: Sendable {
    var url: URL
    var method: String
    var headers: [String: String]
    var body: DataExchangeBody?
    /// The idle timeout (`timeoutIntervalForRequest`, or the request's own when shorter).
    var timeout: Duration
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
