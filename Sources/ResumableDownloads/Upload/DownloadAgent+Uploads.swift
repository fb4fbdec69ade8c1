import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import Synchronization

/// How to upload.
package struct UploadOptions: Sendable {
    /// The protocol; `.auto` asks the server.
    package var protocolChoice: UploadProtocol = .auto
    /// The method of the creation request (IETF draft) or of the plain upload: `POST` by default,
    /// `PUT` with `.put`.
    package var method: HTTPMethod = .post
    /// Extra header lines for the creation or plain request (`Content-Type: image/jpeg`).
    package var headerFields: [String] = []
    /// Whether a plain `PUT` (no resumption) may be sent again from zero after a failure; a
    /// `POST` never is.
    package var allowsPlainRetry = false
    /// No byte sent or received for this long ends an attempt (a blackholed server), which is
    /// then resumed: 5 s by default.
    package var idleTimeout: Duration = .seconds(5)
    /// Whether to wait for a usable path instead of failing with `-1009` at the start.
    package var waitsForConnectivity = true
    /// Failures in a row without new acknowledged bytes (server errors, timeouts) that end the
    /// upload with its resume data: 30 by default. Connection failures, which wait for the
    /// host's probes, end it after 120 (about a minute of a silent server) or this many if more.
    package var maximumFailuresWithoutProgress = UploadStateMachine.maximumFailuresWithoutProgress

    /// The defaults: protocol from the server, `POST`, no plain retry, 5 s idle timeout.
    package init() {}
}

/// What happens to an upload, for progress displays and event streams.
package enum UploadEvent: Sendable, Equatable {
    /// The protocol in use, once known.
    case protocolChosen(UploadProtocol)
    /// The server created a resumable upload at this URL.
    case created(URL)
    /// An attempt ended before the upload completed (it continues when it can).
    case interrupted(DownloadError)
    /// The upload continues from this offset, which the server acknowledged.
    case resumed(from: Int64)
    /// Waiting for a usable path.
    case waitingForConnectivity
}

/// Handlers of an upload; called from the engine thread or the agent, so they return quickly.
package struct UploadHandlers: Sendable {
    /// File bytes handed to the connection so far (counted from the start of the file) and the
    /// file's length.
    package var progress: @Sendable (_ sent: Int64, _ length: Int64) -> Void
    /// Events.
    package var event: @Sendable (UploadEvent) -> Void

    /// Handlers that ignore everything by default.
    package init(progress: @escaping @Sendable (Int64, Int64) -> Void = { _, _ in },
                 event: @escaping @Sendable (UploadEvent) -> Void = { _ in }) {
        self.progress = progress
        self.event = event
    }
}

/// A finished upload.
package struct UploadResult: Sendable {
    /// The server's final answer: its head and body.
    package var response: ResponseHead
    package var body: Data
    /// The protocol used (`.ietf`, `.tus` or `.put`).
    package var protocolUsed: UploadProtocol
    /// The file's length.
    package var length: Int64
    /// File bytes handed to connections over every attempt.
    package var bytesSent: Int64
    /// Bytes sent more than once (`bytesSent - length`, at least 0).
    package var bytesResent: Int64 { max(0, bytesSent - length) }
}

/// Why an upload ended without completing, and what can continue it (`resumeState`, nil when the
/// server holds nothing resumable: URLSession's `-1005` without resume data).
package struct UploadFailure: Error, Sendable, CustomStringConvertible {
    package var error: DownloadError
    package var resumeState: UploadResumeState?
    package var description: String { error.description }
}

extension DownloadAgent {
    /// Uploads the regular file at `path` to `url`, following the path: when it goes the attempt
    /// ends at once, and when it is back the server is asked for its offset and the upload
    /// continues from there (IETF draft or tus), so no byte the server acknowledged is sent
    /// again. `resuming` continues an upload an earlier call left (its `UploadFailure.resumeState`).
    package func upload(fileAt path: String, to url: URL, options: UploadOptions = UploadOptions(),
                        resuming state: UploadResumeState? = nil,
                        handlers: UploadHandlers = UploadHandlers()) async throws(UploadFailure) -> UploadResult {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.openForReading(path, nonBlocking: true)   // a FIFO must not block the open
        } catch {
            throw UploadFailure(error: DownloadError.fileSystem.with(description: "cannot open \(path) for reading: \(error)"))
        }
        defer { descriptor.close() }
        return try await upload(file: descriptor, path: path, to: url, options: options, resuming: state, handlers: handlers)
    }

    /// Uploads the file open as `descriptor` (which stays the caller's to close), named `path` in
    /// reports and resume state: the agent's upload jobs, whose caller opened the file and passed
    /// it over the control socket, so only what the caller could read is sent.
    package func upload(file descriptor: FileDescriptor, path: String, to url: URL, options: UploadOptions = UploadOptions(),
                        resuming state: UploadResumeState? = nil,
                        handlers: UploadHandlers = UploadHandlers()) async throws(UploadFailure) -> UploadResult {
        let opened = try Self.uploadableStatus(of: descriptor, path: path, resuming: state)
        // The route to the server (or proxy) gates the upload between its requests too, as it
        // gates downloads and each exchange: a server reached by a route of its own is waited
        // for and probed without a default route. Followed for the whole upload, so a wait
        // between attempts reads the host's route, not a forgotten one.
        let gate = gateHost(for: state?.url ?? url, proxy: configuration.proxy)
        if let gate { retainHostPaths(gate) }
        defer { if let gate { releaseHostPaths(gate) } }
        let fileName = path.split(separator: "/").last.map(String.init) ?? "file"
        var run = UploadRun(machine: UploadStateMachine(
            url: state?.url ?? url, fileName: fileName, length: opened.size, method: options.method,
            protocol: options.protocolChoice, allowsPlainRetry: options.allowsPlainRetry,
            maximumFailures: options.maximumFailuresWithoutProgress, resuming: state),
                            descriptor: descriptor, opened: opened, path: path, options: options, handlers: handlers,
                            wait: UploadServerWait(url: state?.url ?? url, coordinator: probes), gateHost: gate)
        let watcher = watchPaths(for: run.wait)
        defer {
            watcher.cancel()
            run.wait.end()
        }
        var wakes = run.wait.wakes.makeAsyncIterator()
        var action = run.machine.event(.start)
        while true {
            run.noteProtocol()
            switch action {
            case .send(let plan):
                if let result = try await sendStep(plan, &run, &action) { return result }
            case .waitAndRetry(let failures):
                // The server answered with a status worth retrying: the downloads' backoff (capped at 1 s).
                let backoff = Backoff(initial: configuration.initialBackoff, maximum: min(configuration.maximumBackoff, .seconds(1)),
                                      maximumRetryAfter: configuration.maximumRetryAfter)
                do {
                    if hasUsablePath(toward: run.gateHost) { try await Task.sleep(for: backoff.delay(afterFailures: failures, jitter: Double.random(in: 0.5...1))) }
                } catch {
                    throw run.failure(.cancelled)
                }
                try await waitForPathIfNeeded(&run)
                action = run.machine.event(.retry)
            case .waitForServer:
                try await waitForServerTurn(&run, &wakes)
                action = run.machine.event(.retry)
            case .finish(let head):
                return run.result(head, body: Data())
            case .fail(let error, let isResumable):
                throw isResumable ? run.failure(error) : UploadFailure(error: error)
            }
        }
    }

    /// The file's status when it can be uploaded (a regular file, the one `state` describes).
    private static func uploadableStatus(of descriptor: FileDescriptor, path: String,
                                         resuming state: UploadResumeState?) throws(UploadFailure) -> FileStatus {
        let opened: FileStatus
        do { opened = try descriptor.status() } catch {
            throw UploadFailure(error: DownloadError.fileSystem.with(description: "cannot examine \(path): \(error)"))
        }
        guard opened.kind == .regular else {
            throw UploadFailure(error: DownloadError.invalidRequest.with(description:
                "\(path) is \(opened.kindDescription); only regular files can be uploaded (they can be resumed)"))
        }
        if let state {
            do { try state.validate() } catch { throw UploadFailure(error: error) }
            if let change = state.file.change(to: opened) {
                throw UploadFailure(error: ExchangeContext.fileChanged(change))
            }
        }
        return opened
    }

    /// Sends `plan` and feeds the answer to the machine (`action` is its next); the result when
    /// the upload is done.
    private func sendStep(_ plan: UploadStateMachine.Request, _ run: inout UploadRun,
                          _ action: inout UploadStateMachine.Action) async throws(UploadFailure) -> UploadResult? {
        if Task.isCancelled { throw run.failure(.cancelled) }
        if let now = try? run.descriptor.status(), let change = run.identity.change(to: now) {
            throw UploadFailure(error: ExchangeContext.fileChanged(change))
        }
        let hadURL = run.machine.uploadURL
        let announced = AnnouncedUploadURL()
        let (event, response) = await send(plan, run: &run,
                                           announced: hadURL == nil && run.machine.protocolInUse == .ietf ? announced : nil)
        action = run.machine.event(event)
        if hadURL == nil, let created = run.machine.uploadURL, announced.url.withLock({ $0 }) != created {
            run.handlers.event(.created(created))
        }
        var asked = plan.method == .head
        if let answer = run.takeOver {
            // A racer asked the offset while the append was silent: its answer is the one the
            // machine's next question would get.
            run.takeOver = nil
            switch action {
            case .waitForServer, .waitAndRetry: action = run.machine.event(.retry)
            default: break
            }
            if case .send(let question) = action, question.method == .head {
                action = run.machine.event(.answered(answer, interim: [], bytesSent: 0))
                asked = true
            }
        }
        if case .send(let next) = action, next.method == .patch, let offset = next.bodyOffset, asked {
            // An append after the server was asked its offset continues an interrupted upload.
            run.handlers.event(.resumed(from: offset))
        }
        if case .finish(let head) = action { return run.result(head, body: response?.body ?? Data()) }
        return nil
    }

    /// Waits for a usable path to the upload's server when there is none (announcing it).
    private func waitForPathIfNeeded(_ run: inout UploadRun) async throws(UploadFailure) {
        do { try await waitForHostAnswer(run.gateHost) } catch { throw run.failure(.cancelled) }
        guard !hasUsablePath(toward: run.gateHost) else { return }
        run.handlers.event(.waitingForConnectivity)
        while !hasUsablePath(toward: run.gateHost) {
            guard await waitForNextPath() else { throw run.failure(.cancelled) }
        }
    }

    /// After a connection failure: a new path is tried at once (a fresh connection); on the same
    /// usable path the upload waits for its host's probe turn, as downloads do.
    private func waitForServerTurn(_ run: inout UploadRun,
                                   _ wakes: inout AsyncStream<UploadServerWait.Wake>.Iterator) async throws(UploadFailure) {
        run.probe = nil
        let current = PathKey(pathWaiters.gatingPath(host: run.gateHost))
        if !hasUsablePath(toward: run.gateHost) || current != run.attemptPath {
            run.wait.leave()
            try await waitForPathIfNeeded(&run)
            run.probe = .fresh(connectTimeout: nil)
            return
        }
        configuration.logger.debug("upload waits for its server's turn", metadata: ["host": run.wait.host])
        let turn: UploadServerWait.Turn
        do { turn = try await nextTurn(of: run.wait, wakes: &wakes, startedOn: current, gateHost: run.gateHost) } catch { throw run.failure(.cancelled) }
        configuration.logger.debug("upload's turn", metadata: ["turn": "\(turn)"])
        switch turn {
        case .probe(let connectTimeout): run.probe = .fresh(connectTimeout: connectTimeout)
        case .released: run.probe = .fresh(connectTimeout: nil)
        case .pathChanged:
            try await waitForPathIfNeeded(&run)
            run.probe = .fresh(connectTimeout: nil)
        }
    }

    /// The exchange handlers of one upload request: each interim answer recorded (and, with
    /// `announced`, a `104`'s upload resource reported once, as it arrives), progress counted
    /// from the request's body offset, a wait for connectivity reported.
    private func uploadHandlers(for plan: UploadStateMachine.Request, handlers: UploadHandlers, length: Int64,
                                announced: AnnouncedUploadURL?,
                                recordInterim: @escaping @Sendable (ResponseHead) -> Void) -> ExchangeHandlers {
        let base = plan.bodyOffset ?? 0
        return ExchangeHandlers(
            interimResponse: { head in
                recordInterim(head)
                guard let announced, head.statusCode == 104, let location = head["location"],
                      let resolved = URL(string: location, relativeTo: plan.url)?.absoluteURL else { return }
                let isFirst = announced.url.withLock { known -> Bool in
                    guard known == nil else { return false }
                    known = resolved
                    return true
                }
                if isFirst { handlers.event(.created(resolved)) }
            },
            bytesSent: { sent, _ in handlers.progress(base + sent, length) },
            waitingForConnectivity: { handlers.event(.waitingForConnectivity) })
    }

    /// Sends one request of an upload; the event for the machine and the response when there was one.
    /// `announced`, for an IETF creation: a `104`'s upload resource is reported (`created`) the
    /// moment it arrives, while the body still goes out, so an owner that keeps it (the agent's
    /// job record) can continue from the server's offset even if it dies before the request ends.
    private func send(_ plan: UploadStateMachine.Request, run: inout UploadRun,
                      announced: AnnouncedUploadURL? = nil) async -> (UploadStateMachine.Event, ExchangeResponse?) {
        let request = run.exchangeRequest(for: plan)
        run.attemptPath = PathKey(pathWaiters.gatingPath(host: run.gateHost))
        let handlers = run.handlers
        let interim = Mutex<[ResponseHead]>([])
        let exchangeHandlers = uploadHandlers(for: plan, handlers: handlers, length: run.opened.size, announced: announced) { head in
            interim.withLock { $0.append(head) }
        }
        configuration.logger.debug("upload attempt", metadata: [
            "method": plan.method.rawValue, "offset": plan.bodyOffset.map(String.init) ?? "-",
            "connection": request.freshConnection ? "fresh" : "reused",
            "connect-timeout": request.connectTimeout.map { "\($0)" } ?? "-"])
        let outcome: ExchangeOutcome
        if UploadAppendRace.isRaced(plan, protocol: run.machine.protocolInUse, idleTimeout: request.idleTimeout) {
            let silence = AppendSilence(maximum: request.idleTimeout)
            var raced = exchangeHandlers
            raced.bytesSent = { sent, expected in
                silence.progressed()
                exchangeHandlers.bytesSent(sent, expected)
            }
            let (appended, verdict) = await raceSilentAppend(request, machine: run.machine, wait: run.wait,
                                                             waitsForConnectivity: run.options.waitsForConnectivity,
                                                             handlers: raced, silence: silence, interim: { interim.withLock { $0 } })
            switch appended {
            case .success(let ended): outcome = ended
            case .failure(let error): return (.failed(error, interim: [], bytesSent: 0), nil)
            }
            if let event = run.decide(verdict, appended: outcome, interim: interim.withLock { $0 }) {
                configuration.logger.debug("upload attempt ended by its racer", metadata: [
                    "verdict": "\(verdict)", "sent": String(outcome.bytesSent)])
                return (event, nil)
            }
        } else {
            do {
                outcome = try await exchangeReport(request, waitsForConnectivity: run.options.waitsForConnectivity,
                                                   handlers: exchangeHandlers)
            } catch {
                return (.failed(error, interim: [], bytesSent: 0), nil)
            }
        }
        run.noteOutcome(outcome, of: plan)
        configuration.logger.debug("upload attempt ended", metadata: [
            "method": plan.method.rawValue, "result": outcome.result.traced, "sent": String(outcome.bytesSent),
            "connected": outcome.didConnect ? "yes" : "no", "connect-time": outcome.connectTime.map { "\($0)" } ?? "-"])
        switch outcome.result {
        case .success(let response):
            return (.answered(response.head, interim: response.interimHeads, bytesSent: outcome.bytesSent), response)
        case .failure(let error):
            handlers.event(.interrupted(error))
            return (.failed(error, interim: interim.withLock { $0 }, bytesSent: outcome.bytesSent), nil)
        }
    }
}

/// One upload's driver state beside its machine: the file, what the caller asked, its place in
/// the host's server wait, and how the next attempt connects.
struct UploadRun {
    /// How the next attempt connects after a failure.
    enum Probe: Equatable {
        /// A new connection; `connectTimeout` from the host's probe turn, or the wait's own.
        case fresh(connectTimeout: Duration?)
    }

    var machine: UploadStateMachine
    let descriptor: FileDescriptor
    let opened: FileStatus
    let identity: UploadFileIdentity
    let path: String
    let options: UploadOptions
    let handlers: UploadHandlers
    let wait: UploadServerWait
    /// Where the upload's traffic goes first (its server, or the proxy), whose route gates it;
    /// nil when the agent follows only the primary path.
    let gateHost: String?
    var chosen: UploadProtocol?
    /// Offset questions that timed out in a row: each next one waits twice as long (up to 60 s).
    var slowOffsetAnswers = 0
    var probe: Probe?
    /// The offset a racer got while the last append was silent: the answer to the next question.
    var takeOver: ResponseHead?
    /// The path (to `gateHost`) the last attempt started on.
    var attemptPath = PathKey(nil)

    init(machine: UploadStateMachine, descriptor: FileDescriptor, opened: FileStatus, path: String,
         options: UploadOptions, handlers: UploadHandlers, wait: UploadServerWait, gateHost: String?) {
        self.machine = machine
        self.descriptor = descriptor
        self.opened = opened
        identity = UploadFileIdentity(opened)
        self.path = path
        self.options = options
        self.handlers = handlers
        self.wait = wait
        self.gateHost = gateHost
    }

    /// Reports the protocol once it is known, and when it changes.
    mutating func noteProtocol() {
        guard chosen != machine.protocolInUse, machine.protocolInUse != .auto else { return }
        chosen = machine.protocolInUse
        handlers.event(.protocolChosen(machine.protocolInUse))
    }

    /// The failure that ends the upload with `error`, keeping what can continue it.
    func failure(_ error: DownloadError) -> UploadFailure {
        UploadFailure(error: error, resumeState: machine.resumeState(file: identity, path: path))
    }

    func result(_ head: ResponseHead, body: Data) -> UploadResult {
        UploadResult(response: head, body: body, protocolUsed: machine.protocolInUse, length: opened.size,
                     bytesSent: machine.totalBytesSent)
    }

    /// The exchange for `plan`, connecting as the last failure asked.
    func exchangeRequest(for plan: UploadStateMachine.Request) -> ExchangeRequest {
        let length = opened.size
        let body: ExchangeBody = plan.bodyOffset.map {
            .file(ExchangeFileRange(descriptor: descriptor, offset: $0, length: plan.bodyLength ?? (length - $0), identity: opened))
        } ?? .empty
        let isCreation = plan.bodyOffset == 0 && plan.method != .patch
        var idleTimeout = options.idleTimeout
        if plan.method == .head {
            // A server may answer its offset only once the reader of the connection that died
            // has given up (the draft test server waits 5 s, tusd for its network timeout):
            // asking again with the same timeout could miss that answer every time.
            idleTimeout = min(idleTimeout * (1 << min(slowOffsetAnswers, 4)), max(idleTimeout, .seconds(60)))
        }
        var request = ExchangeRequest(method: plan.method, url: plan.url,
                                      headerFields: plan.headerFields + (isCreation ? options.headerFields : []),
                                      body: body, idleTimeout: idleTimeout)
        if case .fresh(let connectTimeout) = probe {
            request.freshConnection = true
            request.connectTimeout = connectTimeout ?? wait.connectTimeout
        }
        return request
    }

    /// The machine's event for an append a racer ended (`verdict`), after `appended`; nil when
    /// the race decided nothing and the append's own outcome stands.
    mutating func decide(_ verdict: UploadAppendRace.Verdict, appended: ExchangeOutcome,
                         interim: [ResponseHead]) -> UploadStateMachine.Event? {
        switch verdict {
        case .none:
            return nil
        case .serverGone(let racer):
            // The server is gone on this path: the upload waits for the host's probes now,
            // instead of after the idle timeout.
            probe = nil
            if let racer { noteOutcome(racer, of: UploadStateMachine.Request(method: .head, url: machine.url, headerFields: [], bodyOffset: nil)) }
            let error = DownloadError.timedOut.with(description:
                "the server stopped taking the upload's data, and a new connection to it could not be made")
            handlers.event(.interrupted(error))
            return .failed(error, interim: interim, bytesSent: appended.bytesSent)
        case .takeOver(let head, let racer):
            probe = nil
            if let connectTime = racer.connectTime { wait.recordConnectTime(connectTime) }
            takeOver = head
            let error = DownloadError.networkConnectionLost.with(description:
                "the upload's connection went silent; a new connection continues from the server's offset")
            handlers.event(.interrupted(error))
            return .failed(error, interim: interim, bytesSent: appended.bytesSent)
        }
    }

    /// What an attempt showed of the server, for the host's wait and the next offset question.
    mutating func noteOutcome(_ outcome: ExchangeOutcome, of plan: UploadStateMachine.Request) {
        probe = nil
        if let connectTime = outcome.connectTime { wait.recordConnectTime(connectTime) }
        let failure: DownloadError? = if case .failure(let error) = outcome.result { error } else { nil }
        if plan.method == .head { slowOffsetAnswers = failure == .timedOut ? slowOffsetAnswers + 1 : 0 }
        if outcome.didConnect {
            wait.report(reachable: true)
        } else if let failure, RetryClass(failure.urlCode) == .connectionLevel {
            wait.report(reachable: false)
        }
    }
}

extension Result<ExchangeResponse, DownloadError> {
    /// The status or the error code, for trace lines.
    var traced: String {
        switch self {
        case .success(let response): String(response.head.statusCode)
        case .failure(let error): "\(error.errorCode) \(error.description)"
        }
    }
}

/// The upload resource a `104` named during a creation request, once reported.
final class AnnouncedUploadURL: Sendable {
    let url = Mutex<URL?>(nil)
}
