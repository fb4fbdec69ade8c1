import Foundation

/// What one data task does next, given what happened: the caller's commands, the network path,
/// the exchange's response, body and end, and the delegate's answer to the response.
/// Pure: no I/O, no clocks; the task applies the returned actions.
///
/// URLSession's contract, with the path watched instead of a 60-second timer:
/// - A task started with no usable path waits for one. With `waitsForConnectivity` it says so
///   once (`taskIsWaitingForConnectivity`) and waits until the resource timeout; without, it
///   waits `connectivityGrace` and then fails with -1009, as a download task does.
/// - A path that goes away (or moves to another interface) under a running exchange ends the
///   task at once with -1005, instead of the -1001 a dead socket earns after the request
///   timeout. When the caller opted in and the request is idempotent, the exchange is instead
///   tried once more on the next path, but only before the response reached the delegate: after
///   that the delegate holds part of a body a second exchange would repeat.
/// - Body bytes that arrive while the delegate decides on the response are held and handed over
///   once it allows it, so nothing is delivered before `didReceive response`.
/// - A resumable upload (a file body, sent with the IETF draft or tus when the server speaks
///   one) follows the path in its transport, as a download does: the transport continues it
///   from the server's offset when the path is back (`waitsForConnectivity`), or ends it with
///   -1005 and resume data. A path change alone does not end it here, and
///   `cancel(byProducingResumeData:)` stops the transport and waits for its resume data; so does
///   the resource timeout, whose -1001 carries it (the server keeps what it took).
struct DataTaskStateMachine: Sendable {
    typealias Failure = DownloadTaskStateMachine.Failure

    struct Options: Sendable, Hashable {
        var waitsForConnectivity: Bool
        /// The caller opted in to one more attempt after a path change, and the method is idempotent.
        var retriesAfterPathChange: Bool = false
        /// A resumable upload: its transport follows the path and makes resume data.
        var transportFollowsPath: Bool = false
    }

    /// The network path as a task needs to see it.
    enum PathState: Sendable, Hashable {
        /// A path the configuration may use: its primary interface (nil when unknown) and every
        /// interface that is up with an address.
        case usable(primary: String?, up: Set<String>)
        case unusable

        /// A path through `name` alone.
        static func through(_ name: String) -> PathState { .usable(primary: name, up: [name]) }
    }

    /// The response head the exchange received (the final one, after redirects).
    struct Response: Sendable, Hashable {
        var statusCode: Int
        var headers: [String: String]
        var url: URL
    }

    enum Input: Sendable, Hashable {
        case resume, suspend, cancel
        /// `cancel(byProducingResumeData:)`.
        case cancelProducingResumeData
        case path(PathState)
        /// The grace after a start without a path ran out.
        case connectivityGraceExpired
        /// `timeoutIntervalForResource` passed since the first `resume()`.
        case resourceTimeoutExpired
        case response(Response)
        case body(Data)
        /// The exchange sent `bytes` of a request body of `total` bytes (nil when unknown).
        case sent(bytes: Int64, total: Int64?)
        /// The exchange ended: nil is success.
        case exchangeFinished(Failure?)
        /// The delegate's answer to `didReceive response`: true is `.allow`.
        case responseAnswered(allow: Bool)
    }

    enum Action: Sendable, Hashable {
        /// Run the request (a new exchange; an earlier one was aborted first).
        case startExchange
        case abortExchange
        /// Stop the exchange and let its end (with its resume data) still arrive.
        case stopExchangeForResumeData
        /// Hand `cancel(byProducingResumeData:)` its answer.
        case deliverResumeData(Data?)
        /// Report `.connectivityGraceExpired` after `DataTaskStateMachine.connectivityGrace`.
        case startConnectivityGrace
        /// Report `.resourceTimeoutExpired` after the configuration's resource timeout.
        case startResourceTimer
        case notifyWaitingForConnectivity
        /// Ask the delegate about the response; it answers with `.responseAnswered`.
        case deliverResponse(Response)
        case deliverData(Data)
        case notifySent(bytes: Int64, total: Int64, expected: Int64)
        /// `didCompleteWithError`: nil is success.
        case complete(Failure?)
    }

    /// Task states as URLSession names them.
    typealias PublicState = DownloadTaskStateMachine.PublicState

    private enum Phase: Sendable, Hashable {
        case idle, suspended, completed
        /// Resumed, no exchange yet: waiting for a usable path.
        case waitingForPath
        case exchanging(Exchange)
    }

    private struct Exchange: Sendable, Hashable {
        /// The interface the exchange started on, when known: another one means its socket is gone.
        var interface: String?
        var answer = Answer.notAsked
        var heldBody: [Data] = []
        /// The exchange ended while the delegate had not answered yet.
        var heldEnd: Failure??
        /// Why the task stopped it for its resume data (which its end brings), if it did.
        var stop: Stop?
    }

    /// Why a resumable upload's exchange is being stopped for its resume data.
    private enum Stop: Sendable, Hashable {
        /// `cancel(byProducingResumeData:)`: -999, and the data to its caller too.
        case cancelForResumeData
        /// `timeoutIntervalForResource` ran out: -1001 carrying the data.
        case resourceTimeout
    }

    private enum Answer: Sendable, Hashable { case notAsked, pending, allowed }

    /// How long a task with no path at its start waits before failing with -1009.
    static let connectivityGrace = DownloadTaskStateMachine.connectivityGrace

    let options: Options
    private var phase = Phase.idle
    private var path: PathState?
    private var isGraceRunning = false
    private var hasAnnouncedWaiting = false
    private var hasRetried = false
    private var hasStartedResourceTimer = false
    /// Why the task is waiting: nil before any exchange, or the loss that made it wait.
    private var lostExchange: Failure?
    private(set) var bytesReceived: Int64 = 0
    private(set) var bytesSent: Int64 = 0
    private(set) var bytesExpectedToSend: Int64 = 0
    /// The response once the exchange received it.
    private(set) var response: Response?
    /// How the task ended, once it has failed (nil while it runs and after success).
    private(set) var failure: Failure?

    init(options: Options) {
        self.options = options
    }

    var publicState: PublicState {
        switch phase {
        case .idle, .suspended: .suspended
        case .waitingForPath, .exchanging: .running
        case .completed: .completed
        }
    }

    mutating func handle(_ input: Input) -> [Action] {
        switch input {
        case .resume: resumed()
        case .suspend: suspended()
        case .cancel: cancelled()
        case .cancelProducingResumeData: cancelledProducingResumeData()
        case .path(let state): pathChanged(to: state)
        case .connectivityGraceExpired: graceExpired()
        case .resourceTimeoutExpired: resourceTimeoutExpired()
        case .response(let response): received(response)
        case .body(let data): received(data)
        case .sent(let bytes, let total): sent(bytes, of: total)
        case .exchangeFinished(let failure): exchangeFinished(failure)
        case .responseAnswered(let allow): answered(allow: allow)
        }
    }

    private mutating func resumed() -> [Action] {
        guard phase == .idle || phase == .suspended else { return [] }
        var actions: [Action] = []
        if !hasStartedResourceTimer {
            hasStartedResourceTimer = true
            actions.append(.startResourceTimer)
        }
        return actions + startOrWait()
    }

    /// A data task's bytes cannot be paused under libcurl without holding the connection, so
    /// `suspend()` keeps a task from starting and is ignored once its exchange runs.
    private mutating func suspended() -> [Action] {
        guard phase == .idle || phase == .waitingForPath else { return [] }
        phase = .suspended
        return []
    }

    private mutating func cancelled() -> [Action] {
        switch phase {
        case .completed: return []
        case .exchanging: return [.abortExchange] + finish(.cancelled)
        default: return finish(.cancelled)
        }
    }

    /// Resume data comes only from a running resumable upload's transport; any other task
    /// cancels at once with none.
    private mutating func cancelledProducingResumeData() -> [Action] {
        switch phase {
        case .completed:
            return [.deliverResumeData(nil)]
        case .exchanging(var exchange) where options.transportFollowsPath:
            let stopping = exchange.stop != nil
            exchange.stop = .cancelForResumeData
            phase = .exchanging(exchange)
            return stopping ? [] : [.stopExchangeForResumeData]
        default:
            return [.deliverResumeData(nil)] + cancelled()
        }
    }

    private mutating func startOrWait() -> [Action] {
        if case .usable(let primary, _) = path ?? .usable(primary: nil, up: []) {
            phase = .exchanging(Exchange(interface: primary))
            return [.startExchange]
        }
        phase = .waitingForPath
        if options.waitsForConnectivity {
            guard !hasAnnouncedWaiting else { return [] }
            hasAnnouncedWaiting = true
            return [.notifyWaitingForConnectivity]
        }
        guard !isGraceRunning else { return [] }
        isGraceRunning = true
        return [.startConnectivityGrace]
    }

    private mutating func pathChanged(to state: PathState) -> [Action] {
        path = state
        switch phase {
        case .waitingForPath:
            guard case .usable = state else { return [] }
            return startOrWait()
        case .exchanging(let exchange):
            guard !options.transportFollowsPath, Self.isLost(exchange, on: state) else { return [] }
            let loss = Failure(code: .networkConnectionLost,
                               description: state == .unusable ? "the network path went away during the request"
                                   : "the interface the request used went away during it")
            guard options.retriesAfterPathChange, !hasRetried, exchange.answer == .notAsked else {
                return [.abortExchange] + finish(loss)
            }
            hasRetried = true
            lostExchange = loss
            return [.abortExchange] + startOrWait()
        default:
            return []
        }
    }

    /// Whether `state` takes the exchange's path away: no usable path, or its interface is gone
    /// (a better interface appearing beside it is not a loss: its socket still works).
    private static func isLost(_ exchange: Exchange, on state: PathState) -> Bool {
        switch state {
        case .unusable: return true
        case .usable(let primary, let up):
            guard let started = exchange.interface, primary != nil || !up.isEmpty else { return false }
            return primary != started && !up.contains(started)
        }
    }

    private mutating func graceExpired() -> [Action] {
        isGraceRunning = false
        guard phase == .waitingForPath, !options.waitsForConnectivity else { return [] }
        return finish(lostExchange ?? Failure(code: .notConnectedToInternet, description: "not connected to the network"))
    }

    private mutating func resourceTimeoutExpired() -> [Action] {
        switch phase {
        case .waitingForPath:
            return finish(Failure(code: .timedOut, description: "no usable network path within the resource timeout"))
        case .exchanging(var exchange) where options.transportFollowsPath:
            // A resumable upload's transport is stopped, not aborted: its end brings the resume data.
            guard exchange.stop == nil else { return [] }
            exchange.stop = .resourceTimeout
            phase = .exchanging(exchange)
            return [.stopExchangeForResumeData]
        case .exchanging:
            return [.abortExchange] + finish(Self.resourceTimedOut)
        default:
            return []
        }
    }

    static let resourceTimedOut = Failure(code: .timedOut, description: "the request did not finish within the resource timeout")

    private mutating func received(_ head: Response) -> [Action] {
        guard case .exchanging(var exchange) = phase, exchange.answer == .notAsked else { return [] }
        exchange.answer = .pending
        phase = .exchanging(exchange)
        response = head
        return [.deliverResponse(head)]
    }

    private mutating func received(_ data: Data) -> [Action] {
        guard case .exchanging(var exchange) = phase, !data.isEmpty else { return [] }
        bytesReceived += Int64(data.count)
        guard exchange.answer == .allowed else {
            exchange.heldBody.append(data)
            phase = .exchanging(exchange)
            return []
        }
        return [.deliverData(data)]
    }

    private mutating func sent(_ bytes: Int64, of total: Int64?) -> [Action] {
        guard case .exchanging = phase else { return [] }
        if let total { bytesExpectedToSend = max(bytesExpectedToSend, total) }
        // A retried exchange sends the body again from zero: progress never goes back.
        guard bytes > bytesSent else { return [] }
        let delta = bytes - bytesSent
        bytesSent = bytes
        return [.notifySent(bytes: delta, total: bytes, expected: total ?? -1)]
    }

    private mutating func exchangeFinished(_ failure: Failure?) -> [Action] {
        guard case .exchanging(var exchange) = phase else { return [] }
        if let stop = exchange.stop {
            // Stopped for its resume data: cancelled or timed out, unless it completed first.
            let answer: [Action] = stop == .cancelForResumeData ? [.deliverResumeData(failure?.uploadResumeData)] : []
            guard let failure else {
                exchange.stop = nil
                phase = .exchanging(exchange)
                return answer + exchangeFinished(nil)
            }
            var ended = stop == .cancelForResumeData ? Failure.cancelled : Self.resourceTimedOut
            ended.uploadResumeData = failure.uploadResumeData
            return answer + finish(ended)
        }
        if failure?.code == .networkConnectionLost, options.retriesAfterPathChange, !hasRetried, exchange.answer == .notAsked {
            // The transport saw the path go (or its connection die) before the path did here.
            hasRetried = true
            lostExchange = failure
            return startOrWait()
        }
        switch exchange.answer {
        case .allowed:
            return finish(failure)
        case .pending:
            exchange.heldEnd = .some(failure)
            phase = .exchanging(exchange)
            return []
        case .notAsked:
            // Ended before any response head (a refused connection, a reset, a bad URL).
            return finish(failure ?? Failure(code: .badServerResponse, description: "the server sent no response"))
        }
    }

    private mutating func answered(allow: Bool) -> [Action] {
        guard case .exchanging(var exchange) = phase, exchange.answer == .pending else { return [] }
        guard allow else {
            return [.abortExchange] + finish(.cancelled)
        }
        exchange.answer = .allowed
        let held = exchange.heldBody.reduce(into: Data()) { $0.append($1) }
        let end = exchange.heldEnd
        exchange.heldBody = []
        phase = .exchanging(exchange)
        var actions: [Action] = held.isEmpty ? [] : [.deliverData(held)]
        if let end { actions += finish(end) }
        return actions
    }

    private mutating func finish(_ failure: Failure?) -> [Action] {
        phase = .completed
        self.failure = failure
        return [.complete(failure)]
    }
}
