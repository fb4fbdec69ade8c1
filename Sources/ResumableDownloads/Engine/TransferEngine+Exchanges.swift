import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// One running exchange's state, used by libcurl's callbacks on the engine thread. Held by the
/// engine (`exchanges`) while its easy handle exists and passed to libcurl unretained, like
/// `TransferContext`: the handle is cleaned up before the context is released.
final class ExchangeContext {
    let id: UInt64
    let request: ExchangeRequest
    let handlers: ExchangeHandlers
    let completion: @Sendable (ExchangeOutcome) -> Void
    var easy: CurlEasy?
    /// The proxy setting it runs with (error messages name the proxy).
    var proxy: String?
    private var headers = HeaderAccumulator()
    var interimHeads: [ResponseHead] = []
    var finalHead: ResponseHead?
    var body = Data()
    /// Why a callback stopped the exchange (wins over libcurl's code).
    var failure: DownloadError?
    /// Request body bytes read for libcurl so far (the next read starts here).
    private var bodyPosition: Int64 = 0
    /// Request body bytes libcurl reported sent.
    var bytesSent: Int64 = 0
    /// Last byte sent or received, for the idle timeout.
    var lastActivity = ContinuousClock.now
    private var lastProgressReport = ContinuousClock.now

    init(id: UInt64, request: ExchangeRequest, handlers: ExchangeHandlers, completion: @escaping @Sendable (ExchangeOutcome) -> Void) {
        self.id = id
        self.request = request
        self.handlers = handlers
        self.completion = completion
    }

    /// Header callback: every response's lines, interim ones and followed redirects included.
    func didReceiveHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastActivity = .now
        guard let head = headers.feed(String(decoding: bytes, as: UTF8.self)) else { return true }
        if head.statusCode < 200 {
            // 100 Continue is libcurl's business; the others (104) are the caller's.
            if head.statusCode != 100 {
                interimHeads.append(head)
                handlers.interimResponse(head)
            }
            return true
        }
        finalHead = head
        body = Data()
        let isRedirect = request.followsRedirects && (300..<400).contains(head.statusCode) && head["location"] != nil
        if !isRedirect { handlers.response(head) }
        return true
    }

    /// Write callback: false stops the exchange.
    func didReceiveBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastActivity = .now
        if let stream = handlers.bodyData {
            stream(Data(bytes))
            return true
        }
        guard body.count + bytes.count <= request.responseBodyLimit else {
            failure = DownloadError.invalidRequest.with(description:
                "the response body is larger than \(request.responseBodyLimit) bytes, the most kept in memory; stream it instead")
            return false
        }
        body.append(bytes.bindMemory(to: UInt8.self))
        return true
    }

    /// Read callback: fills `buffer` with the next request body bytes; the count (0 at the end),
    /// or nil to abort (the file could not be read or changed).
    func fillBody(_ buffer: UnsafeMutableRawBufferPointer) -> Int? {
        let remaining = request.body.length - bodyPosition
        let count = Int(min(Int64(buffer.count), max(0, remaining)))
        guard count > 0 else { return 0 }
        let target = UnsafeMutableRawBufferPointer(rebasing: buffer[..<count])
        switch request.body {
        case .empty:
            return 0
        case .data(let data):
            let start = data.startIndex + Int(bodyPosition)
            data.copyBytes(to: target.bindMemory(to: UInt8.self), from: start..<(start + count))
        case .file(let range):
            do {
                let read = try range.descriptor.readFully(into: target, at: range.offset + bodyPosition)
                guard read == count else {
                    failure = Self.fileChanged("it is shorter than when the upload began")
                    return nil
                }
            } catch {
                failure = DownloadError.fileSystem.with(description: "cannot read the file being sent: \(error)")
                return nil
            }
            if remaining == Int64(count), let identity = range.identity {
                // The last bytes: the server may complete the upload with them, so the file must
                // still be the one whose first bytes went out.
                guard let now = try? range.descriptor.status() else {
                    failure = Self.fileChanged("it can no longer be examined")
                    return nil
                }
                if let change = Self.change(from: identity, to: now) {
                    failure = Self.fileChanged(change)
                    return nil
                }
            }
        }
        bodyPosition += Int64(count)
        return count
    }

    /// What differs between two looks at the file being sent, nil when nothing.
    static func change(from before: FileStatus, to after: FileStatus) -> String? {
        if !after.isSameFile(as: before) { return "it was replaced by another file" }
        if after.size != before.size { return "its size went from \(before.size) to \(after.size) bytes" }
        if after.modified != before.modified { return "it was modified" }
        return nil
    }

    static func fileChanged(_ how: String) -> DownloadError {
        DownloadError.fileSystem.with(description:
            "the file changed while it was being sent (\(how)); the upload stopped so the server never gets a mix of two versions: upload it again")
    }

    /// Progress callback: request body bytes sent so far.
    func didSend(_ sent: Int64) {
        guard sent != bytesSent else { return }
        bytesSent = sent
        let now = ContinuousClock.now
        lastActivity = now
        if sent == request.body.length || now - lastProgressReport >= .milliseconds(100) {
            lastProgressReport = now
            handlers.bytesSent(sent, request.body.length)
        }
    }
}

extension TransferEngine {
    /// Queues an exchange; `completion` is called exactly once on the engine thread. Returns
    /// false (without calling it) after `shutdown()`.
    @discardableResult
    func exchange(_ id: UInt64, _ request: ExchangeRequest, settings: TransferSettings, handlers: ExchangeHandlers,
                  completion: @escaping @Sendable (ExchangeOutcome) -> Void) -> Bool {
        submit(.exchange(id, request, settings, handlers, completion))
    }

    /// Engine thread: makes the handle and adds it to the multi.
    func startExchange(_ context: ExchangeContext, settings: TransferSettings) {
        let request = context.request
        let options = CurlRequestOptions(
            url: request.url.absoluteString, rangeStart: 0, sendsRange: false, ifRange: nil,
            interface: request.interfaceName.map { "if!\($0)" }, freshConnection: request.freshConnection,
            settings: settings, connectTimeout: min(settings.connectTimeout, request.connectTimeout ?? settings.connectTimeout),
            // The idle timeout below does this job for exchanges; a slow server is not a stall.
            abortsStalls: false,
            receiveBufferSize: settings.receiveBufferSize, headerFields: request.headerFields)
        let hasBody: Bool = switch request.body { case .empty: request.method == .post; default: true }
        let exchange = CurlExchangeOptions(method: request.method.rawValue, bodyLength: hasBody ? request.body.length : nil,
                                           followsRedirects: request.followsRedirects && !hasBody)
        guard let easy = CurlEasy(options: options, exchange: exchange, context: Unmanaged.passUnretained(context)) else {
            context.completion(ExchangeOutcome(result: .failure(.invalidRequest.with(description: "libcurl refused the request")),
                                               bytesSent: 0))
            return
        }
        guard multi.add(easy) else {
            easy.cleanup()
            context.completion(ExchangeOutcome(result: .failure(.invalidRequest.with(description: "libcurl refused the request")),
                                               bytesSent: 0))
            return
        }
        context.easy = easy
        context.proxy = settings.proxy
        exchanges[context.id] = context
        exchangeHandles[easy.handle] = context
    }

    /// Engine thread: ends an exchange, with `forced` (an abort or the idle timeout) or from
    /// libcurl's result, and reports it.
    func finishExchange(_ id: UInt64, forced: DownloadError?, failure: TransferFailure?, detail: String) {
        guard let context = exchanges.removeValue(forKey: id) else { return }
        var info: CurlTransferInfo?
        var connectTime: Duration?
        if let easy = context.easy {
            info = easy.info()
            connectTime = easy.connectTime
            if forced != nil, let socket = easy.activeSocket {
                // An exchange we end (the path went, the server went silent) must not go on
                // without us: closing a socket normally lets the kernel keep sending its queued
                // body once the link is back, and a resumable upload's server would then apply
                // a stale append after the one that resumed it. A reset drops the queue.
                try? FileDescriptor(rawValue: socket).setResetOnClose()
            }
            exchangeHandles.removeValue(forKey: easy.handle)
            multi.remove(easy)
            easy.cleanup()
            context.easy = nil
        }
        let result: Result<ExchangeResponse, DownloadError>
        if let error = forced ?? context.failure {
            result = .failure(error)
        } else if let failure {
            result = .failure(TransferErrorMapping.error(
                for: failure, osErrno: info?.osErrno ?? 0, didConnect: info?.didConnect ?? false, detail: detail,
                proxy: ProxyEnvironment.proxy(for: context.request.url, explicit: context.proxy)))
        } else if let head = context.finalHead {
            result = .success(ExchangeResponse(head: head, interimHeads: context.interimHeads, body: context.body,
                                               bytesSent: context.bytesSent))
        } else {
            result = .failure(DownloadError.badServerResponse.with(description: "the server closed the connection without a response"))
        }
        let didConnect = info?.didConnect ?? false || context.finalHead != nil || !context.interimHeads.isEmpty
        context.completion(ExchangeOutcome(result: result, bytesSent: context.bytesSent, connectTime: connectTime, didConnect: didConnect))
    }

    /// Engine thread: ends exchanges idle for longer than their timeout; returns how long the
    /// engine may sleep.
    func watchExchanges() -> Duration {
        let now = ContinuousClock.now
        var sleep: Duration = .milliseconds(250)
        for (id, context) in exchanges {
            let deadline = context.lastActivity + context.request.idleTimeout
            if now >= deadline {
                finishExchange(id, forced: DownloadError.timedOut.with(description:
                    "the request timed out: nothing sent or received for \(context.request.idleTimeout.timeInterval) s"),
                               failure: nil, detail: "")
            } else {
                sleep = min(sleep, deadline - now)
            }
        }
        return sleep
    }

    /// What an abort means for an exchange.
    static func exchangeError(for reason: AbortReason) -> DownloadError {
        switch reason {
        case .pathChanged:
            DownloadError.networkConnectionLost.with(description:
                "the network connection was lost: the path the request used went away")
        case .cancelled, .paused: DownloadError.cancelled
        case .shutdown: DownloadError.cancelled.with(description: "cancelled: the agent shut down")
        case .writeFailed(let error): error
        case .recovery: DownloadError.networkConnectionLost
        }
    }
}
