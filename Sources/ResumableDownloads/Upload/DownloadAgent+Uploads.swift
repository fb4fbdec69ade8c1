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
        let opened: FileStatus
        do { opened = try descriptor.status() } catch {
            throw UploadFailure(error: DownloadError.fileSystem.with(description: "cannot examine \(path): \(error)"))
        }
        guard opened.kind == .regular else {
            throw UploadFailure(error: DownloadError.invalidRequest.with(description:
                "\(path) is \(opened.kindDescription); only regular files can be uploaded (they can be resumed)"))
        }
        let identity = UploadFileIdentity(opened)
        if let state {
            do { try state.validate() } catch { throw UploadFailure(error: error) }
            if let change = state.file.change(to: opened) {
                throw UploadFailure(error: ExchangeContext.fileChanged(change))
            }
        }
        let fileName = path.split(separator: "/").last.map(String.init) ?? "file"
        var machine = UploadStateMachine(url: state?.url ?? url, fileName: fileName, length: opened.size, method: options.method,
                                         protocol: options.protocolChoice, allowsPlainRetry: options.allowsPlainRetry,
                                         resuming: state)
        var chosen: UploadProtocol?
        // Offset questions that timed out in a row: each next one waits twice as long (up to 60 s).
        var slowOffsetAnswers = 0
        var action = machine.event(.start)
        while true {
            if chosen != machine.protocolInUse, machine.protocolInUse != .auto {
                chosen = machine.protocolInUse
                handlers.event(.protocolChosen(machine.protocolInUse))
            }
            switch action {
            case .send(let plan):
                if Task.isCancelled {
                    throw UploadFailure(error: .cancelled, resumeState: machine.resumeState(file: identity, path: path))
                }
                if let now = try? descriptor.status(), let change = identity.change(to: now) {
                    throw UploadFailure(error: ExchangeContext.fileChanged(change))
                }
                let hadURL = machine.uploadURL
                let announced = AnnouncedUploadURL()
                // A server may answer its offset only once the reader of the connection that died
                // has given up (the draft test server waits 5 s, tusd for its network timeout):
                // asking again with the same timeout could miss that answer every time.
                var attemptOptions = options
                if plan.method == .head {
                    attemptOptions.idleTimeout = min(options.idleTimeout * (1 << min(slowOffsetAnswers, 4)), max(options.idleTimeout, .seconds(60)))
                }
                let (event, response) = await send(plan, descriptor: descriptor, opened: opened, options: attemptOptions, handlers: handlers,
                                                   announced: hadURL == nil && machine.protocolInUse == .ietf ? announced : nil)
                if plan.method == .head {
                    if case .failed(let error, _, _) = event, error == .timedOut { slowOffsetAnswers += 1 } else { slowOffsetAnswers = 0 }
                }
                action = machine.event(event)
                if hadURL == nil, let created = machine.uploadURL, announced.url.withLock({ $0 }) != created {
                    handlers.event(.created(created))
                }
                if case .send(let next) = action, next.method == .patch, let offset = next.bodyOffset, plan.method == .head {
                    // An append after the server was asked its offset continues an interrupted upload.
                    handlers.event(.resumed(from: offset))
                }
                if case .finish(let head) = action {
                    return UploadResult(response: head, body: response?.body ?? Data(), protocolUsed: machine.protocolInUse,
                                        length: opened.size, bytesSent: machine.totalBytesSent)
                }
            case .waitAndRetry(let failures):
                do {
                    if hasUsablePath {
                        // The path did not go (a server that stopped answering): back off a little.
                        let backoff = Backoff(initial: configuration.initialBackoff,
                                              maximum: min(configuration.maximumBackoff, .seconds(1)),
                                              maximumRetryAfter: configuration.maximumRetryAfter)
                        try await Task.sleep(for: backoff.delay(afterFailures: failures, jitter: Double.random(in: 0.5...1)))
                    }
                    if !hasUsablePath { handlers.event(.waitingForConnectivity) }
                    try await waitForUsablePath()
                } catch {
                    throw UploadFailure(error: .cancelled, resumeState: machine.resumeState(file: identity, path: path))
                }
                action = machine.event(.retry)
            case .finish(let head):
                return UploadResult(response: head, body: Data(), protocolUsed: machine.protocolInUse,
                                    length: opened.size, bytesSent: machine.totalBytesSent)
            case .fail(let error, let isResumable):
                throw UploadFailure(error: error, resumeState: isResumable ? machine.resumeState(file: identity, path: path) : nil)
            }
        }
    }

    /// Sends one request of an upload; the event for the machine and the response when there was one.
    /// `announced`, for an IETF creation: a `104`'s upload resource is reported (`created`) the
    /// moment it arrives, while the body still goes out, so an owner that keeps it (the agent's
    /// job record) can continue from the server's offset even if it dies before the request ends.
    private func send(_ plan: UploadStateMachine.Request, descriptor: FileDescriptor, opened: FileStatus,
                      options: UploadOptions, handlers: UploadHandlers,
                      announced: AnnouncedUploadURL? = nil) async -> (UploadStateMachine.Event, ExchangeResponse?) {
        let length = opened.size
        let base = plan.bodyOffset ?? 0
        let body: ExchangeBody = plan.bodyOffset.map {
            .file(ExchangeFileRange(descriptor: descriptor, offset: $0, length: plan.bodyLength ?? (length - $0), identity: opened))
        } ?? .empty
        let isCreation = plan.bodyOffset == 0 && plan.method != .patch
        let request = ExchangeRequest(method: plan.method, url: plan.url,
                                      headerFields: plan.headerFields + (isCreation ? options.headerFields : []),
                                      body: body, idleTimeout: options.idleTimeout)
        let interim = Mutex<[ResponseHead]>([])
        let exchangeHandlers = ExchangeHandlers(
            interimResponse: { head in
                interim.withLock { $0.append(head) }
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
        do {
            let outcome = try await exchangeOutcome(request, waitsForConnectivity: options.waitsForConnectivity,
                                                    handlers: exchangeHandlers)
            switch outcome.result {
            case .success(let response):
                return (.answered(response.head, interim: response.interimHeads, bytesSent: outcome.bytesSent), response)
            case .failure(let error):
                handlers.event(.interrupted(error))
                return (.failed(error, interim: interim.withLock { $0 }, bytesSent: outcome.bytesSent), nil)
            }
        } catch {
            return (.failed(error, interim: [], bytesSent: 0), nil)
        }
    }
}

/// The upload resource a `104` named during a creation request, once reported.
final class AnnouncedUploadURL: Sendable {
    let url = Mutex<URL?>(nil)
}
