// The only file in ResumableDownloads that imports CCurl: thin wrappers over libcurl. C types stay
// in here; the rest of the module sees Swift types only.
import CCurl
import FoundationEssentials
import Glibc
import ReachabilityBase

/// Process-wide libcurl setup: the library is loaded on first use (see CCurl/shim.h).
enum Curl {
    /// The loaded library, or why it could not be loaded and initialised. A lazy static is
    /// initialised exactly once (swift_once), which `curl_global_init` (not thread-safe) needs.
    private static let loaded: Result<API, DownloadError> = {
        var table = ccurl_api()
        if let failure = ccurl_load(&table) {
            return .failure(DownloadError.invalidRequest.with(description:
                "cannot load \(CCURL_LIBRARY) (\(String(cString: failure))); install libcurl (Debian: libcurl4)"))
        }
        guard table.global_init(CCURL_GLOBAL_DEFAULT) == CURLE_OK else {
            return .failure(DownloadError.invalidRequest.with(description: "libcurl could not be initialised"))
        }
        let api = UnsafeMutablePointer<ccurl_api>.allocate(capacity: 1)   // never freed: the process's libcurl
        api.initialize(to: table)
        return .success(API(table: api))
    }()

    /// The function table, loading libcurl if needed.
    static func api() throws(DownloadError) -> API { try loaded.get() }

    /// libcurl's version string, e.g. `libcurl/7.88.1 OpenSSL/3.0.11 ...`, or nil when it cannot be loaded.
    static var version: String? { (try? api())?.table.pointee.version().map { String(cString: $0) } }

    /// The loaded function table. Immutable once loaded, so it may be shared between threads.
    struct API: @unchecked Sendable {
        let table: UnsafeMutablePointer<ccurl_api>
    }
}

/// What the write callback tells libcurl.
enum BodyDisposition {
    /// All bytes were taken.
    case consumed
    /// Nothing was taken; pause receiving until `CurlEasy.unpause()` (libcurl redelivers the chunk).
    case pause
    /// Stop the transfer (it ends with CURLE_WRITE_ERROR).
    case abort
}

/// Transfer facts read from an easy handle once it is done.
struct CurlTransferInfo: Sendable {
    var responseCode: Int
    /// `errno` of the last failed socket call (CURLINFO_OS_ERRNO), zero when none.
    var osErrno: Int32
    /// Whether a TCP connection was established (tells a stall from a connect timeout).
    var didConnect: Bool
    /// The local address used, when connected.
    var localAddress: String?
}

/// Options for one request, already decided by the engine: what is this request's own (its
/// range, interface, connection, connect timeout) beside the engine's `TransferSettings`, which
/// the handle reads as they are, so the knobs have one home and are converted to libcurl's units
/// only here.
struct CurlRequestOptions {
    var url: String
    var rangeStart: Int64
    /// Whether to send `Range: bytes=rangeStart-` (a resume; rangeStart may then be zero).
    var sendsRange: Bool
    /// One past the last byte asked for (`Range: bytes=rangeStart-(rangeEnd - 1)`, a segment);
    /// nil asks for the rest.
    var rangeEnd: Int64? = nil
    var ifRange: String?
    /// `if!name` pins to an interface (SO_BINDTODEVICE); nil lets the kernel route.
    var interface: String?
    var freshConnection: Bool
    /// Redirects, stall bound, keep-alive, user agent, TLS, proxy and the added header lines.
    var settings: TransferSettings
    /// The settings' connect timeout, or a shorter one this request asks for.
    var connectTimeout: Duration
    /// Whether libcurl aborts a transfer slower than the settings' stall bound
    /// (CURLOPT_LOW_SPEED_*); an exchange has its own idle timeout instead.
    var abortsStalls = true
    /// The settings' receive buffer, or a smaller one under a receive limit.
    var receiveBufferSize: Int
    /// Header lines this request adds to the settings' ones (an exchange's fields).
    var headerFields: [String] = []
}

/// What an exchange's handle needs beyond `CurlRequestOptions`, decided by the engine.
struct CurlExchangeOptions {
    /// An HTTP token (`HTTPMethod`), upper case.
    var method: String
    /// The request body's length when there is a body (read through the context's `fillBody`).
    var bodyLength: Int64?
    /// Whether 3xx answers are followed (a body cannot be sent twice: no seek callback).
    var followsRedirects: Bool
}

/// One libcurl easy handle with its header list. Not thread-safe: confined to the engine thread.
final class CurlEasy {
    let handle: UnsafeMutableRawPointer
    private let api: UnsafeMutablePointer<ccurl_api>
    private var headerList: UnsafeMutablePointer<curl_slist>?
    /// CURLOPT_ERRORBUFFER: libcurl's own account of a failure ("Illegal or missing hexadecimal
    /// sequence in chunked-encoding"), where curl_easy_strerror only names the code ("Failure when
    /// receiving data from the peer"). Freed in `cleanup()`.
    private let errorBuffer: UnsafeMutablePointer<CChar>

    /// Creates and configures a download's handle; `context` is passed back to the callbacks
    /// unretained (the engine keeps the context alive until after `cleanup()`).
    convenience init?(options: CurlRequestOptions, context: Unmanaged<TransferContext>) {
        self.init(options: options, extraHeaders: [])
        let userdata = context.toOpaque()
        ccurl_easy_setopt_data_callback(api, handle, CURLOPT_HEADERFUNCTION) { buffer, size, count, userdata in
            guard let buffer, let userdata else { return 0 }
            let context = Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue()
            let bytes = UnsafeRawBufferPointer(start: buffer, count: size * count)
            return context.didReceiveHeaderLine(bytes) ? size * count : 0
        }
        setPointer(CURLOPT_HEADERDATA, userdata)
        ccurl_easy_setopt_data_callback(api, handle, CURLOPT_WRITEFUNCTION) { buffer, size, count, userdata in
            guard let buffer, let userdata else { return 0 }
            let context = Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue()
            switch context.didReceiveBody(UnsafeRawBufferPointer(start: buffer, count: size * count)) {
            case .consumed: return size * count
            case .pause: return CCURL_WRITEFUNC_PAUSE
            case .abort: return 0
            }
        }
        setPointer(CURLOPT_WRITEDATA, userdata)
        // The connection's socket, for a receive buffer sized to a capped server (segments).
        ccurl_easy_setopt_sockopt_callback(api, handle) { userdata, socket, purpose in
            guard let userdata, purpose == CURLSOCKTYPE_IPCXN else { return Int32(CURL_SOCKOPT_OK) }
            Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue().didOpenSocket(Int32(socket))
            return Int32(CURL_SOCKOPT_OK)
        }
        setPointer(CURLOPT_SOCKOPTDATA, userdata)
    }

    /// Creates and configures a one-shot exchange's handle (`HTTPExchange`): its method, its
    /// request body read through `context`, upload progress; `context` is passed unretained as
    /// for downloads.
    convenience init?(options: CurlRequestOptions, exchange: CurlExchangeOptions, context: Unmanaged<ExchangeContext>) {
        // "Expect:" turns off libcurl's `Expect: 100-continue` (a second's wait for servers that
        // never send 100); the body's length is always known, so no chunked encoding either.
        self.init(options: options, extraHeaders: exchange.bodyLength != nil ? ["Expect:"] : [])
        let userdata = context.toOpaque()
        if !exchange.followsRedirects { setLong(CURLOPT_FOLLOWLOCATION, 0) }
        switch exchange.method {
        case "GET":
            break
        case "HEAD":
            setLong(CURLOPT_NOBODY, 1)
        case "POST":
            setLong(CURLOPT_POST, 1)
            setOffset(CURLOPT_POSTFIELDSIZE_LARGE, exchange.bodyLength ?? 0)
        default:
            if exchange.bodyLength != nil { setLong(CURLOPT_UPLOAD, 1) }
            if exchange.method != "PUT" || exchange.bodyLength == nil { setString(CURLOPT_CUSTOMREQUEST, exchange.method) }
        }
        if let length = exchange.bodyLength, exchange.method != "POST" { setOffset(CURLOPT_INFILESIZE_LARGE, length) }
        if exchange.bodyLength != nil {
            ccurl_easy_setopt_read_callback(api, handle) { buffer, size, count, userdata in
                guard let buffer, let userdata else { return CCURL_READFUNC_ABORT }
                let context = Unmanaged<ExchangeContext>.fromOpaque(userdata).takeUnretainedValue()
                return context.fillBody(UnsafeMutableRawBufferPointer(start: buffer, count: size * count)) ?? CCURL_READFUNC_ABORT
            }
            setPointer(CURLOPT_READDATA, userdata)
        }
        setLong(CURLOPT_NOPROGRESS, 0)
        ccurl_easy_setopt_xferinfo_callback(api, handle) { userdata, _, _, _, sent in
            guard let userdata else { return 1 }
            Unmanaged<ExchangeContext>.fromOpaque(userdata).takeUnretainedValue().didSend(Int64(sent))
            return 0
        }
        setPointer(CURLOPT_XFERINFODATA, userdata)
        ccurl_easy_setopt_data_callback(api, handle, CURLOPT_HEADERFUNCTION) { buffer, size, count, userdata in
            guard let buffer, let userdata else { return 0 }
            let context = Unmanaged<ExchangeContext>.fromOpaque(userdata).takeUnretainedValue()
            return context.didReceiveHeaderLine(UnsafeRawBufferPointer(start: buffer, count: size * count)) ? size * count : 0
        }
        setPointer(CURLOPT_HEADERDATA, userdata)
        ccurl_easy_setopt_data_callback(api, handle, CURLOPT_WRITEFUNCTION) { buffer, size, count, userdata in
            guard let buffer, let userdata else { return 0 }
            let context = Unmanaged<ExchangeContext>.fromOpaque(userdata).takeUnretainedValue()
            return context.didReceiveBody(UnsafeRawBufferPointer(start: buffer, count: size * count)) ? size * count : 0
        }
        setPointer(CURLOPT_WRITEDATA, userdata)
    }

    /// The settings every handle shares (connection, TLS, proxy, headers); callbacks are set by
    /// the convenience initialisers.
    private init?(options: CurlRequestOptions, extraHeaders: [String]) {
        guard let api = try? Curl.api().table, let handle = api.pointee.easy_init() else { return nil }
        self.handle = handle
        self.api = api
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))

        setLong(CURLOPT_NOSIGNAL, 1)   // we run on our own thread; no SIGALRM for DNS timeouts
        setPointer(CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(errorBuffer))
        setString(CURLOPT_URL, options.url)
        setString(CURLOPT_PROTOCOLS_STR, "http,https")
        setLong(CURLOPT_FOLLOWLOCATION, 1)
        let settings = options.settings
        setLong(CURLOPT_MAXREDIRS, settings.maximumRedirects)
        setString(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        setLong(CURLOPT_CONNECTTIMEOUT_MS, max(1, Int(options.connectTimeout.milliseconds)))
        if options.abortsStalls {
            // libcurl counts whole seconds: a stall bound is rounded up, never to zero (off).
            setLong(CURLOPT_LOW_SPEED_LIMIT, settings.stallBytesPerSecond)
            setLong(CURLOPT_LOW_SPEED_TIME, max(1, Int((settings.stallTimeout.milliseconds + 999) / 1000)))
        }
        let keepAliveIdleSeconds = max(1, Int(settings.keepAliveIdle.milliseconds / 1000))
        setLong(CURLOPT_TCP_KEEPALIVE, 1)
        setLong(CURLOPT_TCP_KEEPIDLE, keepAliveIdleSeconds)
        setLong(CURLOPT_TCP_KEEPINTVL, max(1, keepAliveIdleSeconds / 2))
        setLong(CURLOPT_BUFFERSIZE, options.receiveBufferSize)
        setString(CURLOPT_USERAGENT, settings.userAgent)
        if options.freshConnection {
            // After a path change neither pooled connections nor cached DNS answers (split-horizon
            // DNS differs between networks) can be trusted.
            setLong(CURLOPT_FRESH_CONNECT, 1)
            setLong(CURLOPT_DNS_CACHE_TIMEOUT, 0)
        }
        if let interface = options.interface { setString(CURLOPT_INTERFACE, interface) }
        if let authorities = settings.certificateAuthorityFile { setString(CURLOPT_CAINFO, authorities) }
        if !settings.verifiesCertificates {
            setLong(CURLOPT_SSL_VERIFYPEER, 0)
            setLong(CURLOPT_SSL_VERIFYHOST, 0)
        }
        if let proxy = settings.proxy { setString(CURLOPT_PROXY, proxy) }
        if options.sendsRange {
            setString(CURLOPT_RANGE, options.rangeEnd.map { "\(options.rangeStart)-\($0 - 1)" } ?? "\(options.rangeStart)-")
        }

        // CURLOPT_ACCEPT_ENCODING stays unset so libcurl never decodes; we ask for identity
        // explicitly so byte offsets refer to the stored representation.
        var headers = ["Accept-Encoding: identity"]
        if let ifRange = options.ifRange, options.sendsRange { headers.append("If-Range: \(ifRange)") }
        // A CR or LF would let a header value start another header (or end the head) on the wire;
        // HeaderValidation refuses them up front, and this keeps them off the wire regardless.
        headers += (settings.additionalHeaders + options.headerFields).filter { HeaderValidation.isSafeOnTheWire($0) }
        headers += extraHeaders
        for header in headers { headerList = api.pointee.slist_append(headerList, header) }
        setPointer(CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList))
    }

    /// Whether the response being received came over HTTP/1.x, one request per connection at a
    /// time (false before a response, and for HTTP/2 and 3, which multiplex requests on one).
    var isOneRequestPerConnection: Bool {
        var version = 0
        guard ccurl_easy_getinfo_long(api, handle, CURLINFO_HTTP_VERSION, &version) == CURLE_OK else { return false }
        return version == Int(CURL_HTTP_VERSION_1_0) || version == Int(CURL_HTTP_VERSION_1_1)
    }

    /// The status code of the response being received (valid inside callbacks).
    var responseCode: Int {
        var code = 0
        _ = ccurl_easy_getinfo_long(api, handle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// How long it took until the request could be sent (connected, TLS done), once it could.
    var requestSendableAfter: Duration? {
        var microseconds: curl_off_t = 0
        guard ccurl_easy_getinfo_off_t(api, handle, CURLINFO_PRETRANSFER_TIME_T, &microseconds) == CURLE_OK, microseconds > 0 else {
            return nil
        }
        return .microseconds(Int64(microseconds))
    }

    /// How long the TCP (and proxy) connection took to set up, once connected.
    var connectTime: Duration? {
        var microseconds: curl_off_t = 0
        guard ccurl_easy_getinfo_off_t(api, handle, CURLINFO_CONNECT_TIME_T, &microseconds) == CURLE_OK, microseconds > 0 else {
            return nil
        }
        return .microseconds(Int64(microseconds))
    }

    /// The connection's socket descriptor, when there is one.
    var activeSocket: Int32? {
        var socket = CURL_SOCKET_BAD
        guard ccurl_easy_getinfo_socket(api, handle, &socket) == CURLE_OK, socket != CURL_SOCKET_BAD else { return nil }
        return Int32(socket)
    }

    /// Facts about the finished transfer.
    func info() -> CurlTransferInfo {
        var code = 0, osErrno = 0
        var connectTime: curl_off_t = 0
        var localIP: UnsafePointer<CChar>?
        _ = ccurl_easy_getinfo_long(api, handle, CURLINFO_RESPONSE_CODE, &code)
        _ = ccurl_easy_getinfo_long(api, handle, CURLINFO_OS_ERRNO, &osErrno)
        _ = ccurl_easy_getinfo_off_t(api, handle, CURLINFO_CONNECT_TIME_T, &connectTime)
        _ = ccurl_easy_getinfo_string(api, handle, CURLINFO_LOCAL_IP, &localIP)
        let local = localIP.map { String(cString: $0) }
        return CurlTransferInfo(responseCode: code, osErrno: Int32(truncatingIfNeeded: osErrno),
                                didConnect: connectTime > 0 || code > 0,
                                localAddress: local?.isEmpty == false ? local : nil)
    }

    /// Resumes a transfer paused by `BodyDisposition.pause`; may call the write callback at once.
    func unpause() { _ = api.pointee.easy_pause(handle, CCURL_PAUSE_CONT) }

    /// libcurl's message about the failure of this handle, when it wrote one.
    var errorText: String? {
        var text = String(cString: errorBuffer)
        while text.last?.isWhitespace == true { text.removeLast() }
        return text.isEmpty ? nil : text
    }

    /// Frees the handle, header list and error buffer; the handle must already be removed from
    /// its multi. Called exactly once.
    func cleanup() {
        api.pointee.easy_cleanup(handle)
        api.pointee.slist_free_all(headerList)
        headerList = nil
        errorBuffer.deallocate()
    }

    private func setLong(_ option: CURLoption, _ value: Int) { _ = ccurl_easy_setopt_long(api, handle, option, value) }
    private func setString(_ option: CURLoption, _ value: String) { _ = ccurl_easy_setopt_string(api, handle, option, value) }
    private func setOffset(_ option: CURLoption, _ value: Int64) { _ = ccurl_easy_setopt_off_t(api, handle, option, curl_off_t(value)) }
    private func setPointer(_ option: CURLoption, _ value: UnsafeMutableRawPointer?) {
        _ = ccurl_easy_setopt_pointer(api, handle, option, value)
    }
}

/// A libcurl multi handle. Not thread-safe except `wakeup()`: confined to the engine thread.
struct CurlMulti {
    let handle: UnsafeMutableRawPointer
    private let api: UnsafeMutablePointer<ccurl_api>

    /// Loads libcurl if needed; throws when it cannot be loaded or a multi handle cannot be made.
    init() throws(DownloadError) {
        let api = try Curl.api().table
        guard let handle = api.pointee.multi_init() else {
            throw DownloadError.invalidRequest.with(description: "libcurl could not create a multi handle")
        }
        self.handle = handle
        self.api = api
        // libcurl keeps four idle connections per handle still added by default, so the pool
        // shrinks as a segmented download's last connections finish and the pieces left then
        // open new connections; this keeps every connection the per-host bound allows, twice.
        _ = ccurl_multi_setopt_long(api, handle, CURLMOPT_MAXCONNECTS, Self.idleConnections)
    }

    /// Idle connections kept (`CURLMOPT_MAXCONNECTS`).
    static let idleConnections = 2 * DownloadAgent.maximumConnectionsPerHostLimit

    /// Adds a configured handle; false when libcurl refuses.
    func add(_ easy: CurlEasy) -> Bool { api.pointee.multi_add_handle(handle, easy.handle) == CURLM_OK }

    func remove(_ easy: CurlEasy) { _ = api.pointee.multi_remove_handle(handle, easy.handle) }

    /// Drives every transfer as far as it goes without blocking; returns the number still running.
    @discardableResult
    func perform() -> Int {
        var running: Int32 = 0
        _ = api.pointee.multi_perform(handle, &running)
        return Int(running)
    }

    /// Waits for socket activity, a timeout or `wakeup()`, at most `milliseconds`.
    func poll(milliseconds: Int) {
        var ready: Int32 = 0
        var timeout = 0
        _ = api.pointee.multi_timeout(handle, &timeout)
        let wait = timeout < 0 ? milliseconds : min(timeout, milliseconds)
        _ = api.pointee.multi_poll(handle, nil, 0, Int32(wait), &ready)
    }

    /// Interrupts `poll` from any thread (libcurl documents curl_multi_wakeup as thread-safe).
    func wakeup() { _ = api.pointee.multi_wakeup(handle) }

    /// The next finished transfer: its easy handle and nil for success or the failure.
    func nextCompleted() -> (handle: UnsafeMutableRawPointer, failure: TransferFailure?, detail: String)? {
        var queued: Int32 = 0
        while let message = api.pointee.multi_info_read(handle, &queued) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = ccurl_message_result(message)
            let detail = api.pointee.easy_strerror(code).map { String(cString: $0) } ?? "libcurl error \(code.rawValue)"
            return (easy, code == CURLE_OK ? nil : TransferFailure(code), detail)
        }
        return nil
    }

    func cleanup() { _ = api.pointee.multi_cleanup(handle) }
}

extension TransferFailure {
    init(_ code: CURLcode) {
        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL: self = .unsupportedProtocol
        case CURLE_URL_MALFORMAT: self = .malformedURL
        case CURLE_COULDNT_RESOLVE_PROXY: self = .couldNotResolveProxy
        case CURLE_COULDNT_RESOLVE_HOST: self = .couldNotResolveHost
        case CURLE_COULDNT_CONNECT: self = .couldNotConnect
        case CURLE_WEIRD_SERVER_REPLY: self = .weirdServerReply
        case CURLE_HTTP2, CURLE_HTTP2_STREAM: self = .http2
        case CURLE_PARTIAL_FILE: self = .partialFile
        case CURLE_WRITE_ERROR: self = .writeError
        case CURLE_OUT_OF_MEMORY: self = .outOfMemory
        case CURLE_OPERATION_TIMEDOUT: self = .operationTimedOut
        case CURLE_RANGE_ERROR: self = .rangeError
        case CURLE_SSL_CONNECT_ERROR: self = .tlsConnectError
        case CURLE_ABORTED_BY_CALLBACK: self = .abortedByCallback
        case CURLE_INTERFACE_FAILED: self = .interfaceFailed
        case CURLE_TOO_MANY_REDIRECTS: self = .tooManyRedirects
        case CURLE_GOT_NOTHING: self = .gotNothing
        case CURLE_SEND_ERROR: self = .sendError
        case CURLE_RECV_ERROR: self = .receiveError
        case CURLE_PEER_FAILED_VERIFICATION: self = .peerFailedVerification
        case CURLE_BAD_CONTENT_ENCODING: self = .badContentEncoding
        case CURLE_FILESIZE_EXCEEDED: self = .fileSizeExceeded
        default: self = .other(Int32(bitPattern: code.rawValue))
        }
    }
}
