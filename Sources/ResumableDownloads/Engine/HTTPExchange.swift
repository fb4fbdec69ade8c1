import FoundationEssentials
import LinuxSystem
import ReachabilityBase

// One-shot HTTP exchanges (a request and its response, any method, with a body from memory or a
// file range) on the download engine's thread and libcurl multi: what data tasks, upload tasks
// and the resumable upload protocols are built on. The values here are the package's API; the
// engine thread's side is TransferEngine+Exchanges.swift, the path-following side
// DownloadAgent+Exchanges.swift.

/// An HTTP request method: an RFC 9110 token, kept upper case as sent.
package struct HTTPMethod: Sendable, Hashable, CustomStringConvertible {
    /// The method as sent on the request line.
    package let rawValue: String

    /// nil unless `text` is a token of 1 to 32 characters (RFC 9110 section 9.1).
    package init?(_ text: String) {
        let tokenCharacters = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard (1...32).contains(text.count), text.allSatisfy({ tokenCharacters.contains($0) }) else { return nil }
        rawValue = text.uppercased()
    }

    private init(known: String) { rawValue = known }

    package static let get = HTTPMethod(known: "GET")
    package static let head = HTTPMethod(known: "HEAD")
    package static let post = HTTPMethod(known: "POST")
    package static let put = HTTPMethod(known: "PUT")
    package static let patch = HTTPMethod(known: "PATCH")
    package static let delete = HTTPMethod(known: "DELETE")
    package static let options = HTTPMethod(known: "OPTIONS")

    /// Whether sending the request twice has the effect of sending it once (RFC 9110 9.2.2).
    package var isIdempotent: Bool { ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"].contains(rawValue) }

    package var description: String { rawValue }
}

/// Part of an open regular file sent as a request body, read with `pread` as libcurl asks.
package struct ExchangeFileRange: Sendable {
    /// The open file; the caller keeps it open until the exchange ends, and closes it.
    package var descriptor: FileDescriptor
    /// The first byte sent.
    package var offset: Int64
    /// How many bytes are sent.
    package var length: Int64
    /// The file as it was when the upload began: when the last byte is read the file is checked
    /// again (size, modification time, device and inode), and a change ends the exchange with an
    /// error before that byte is sent, so a server never completes a mixed upload.
    package var identity: FileStatus?

    /// Sends `length` bytes of `descriptor` from `offset`.
    package init(descriptor: FileDescriptor, offset: Int64, length: Int64, identity: FileStatus? = nil) {
        self.descriptor = descriptor
        self.offset = offset
        self.length = length
        self.identity = identity
    }
}

/// A request body.
package enum ExchangeBody: Sendable {
    /// No body (a `POST` then sends `Content-Length: 0`).
    case empty
    /// These bytes.
    case data(Data)
    /// Part of a file (`ExchangeFileRange`).
    case file(ExchangeFileRange)

    /// The length sent in `Content-Length`.
    package var length: Int64 {
        switch self {
        case .empty: 0
        case .data(let data): Int64(data.count)
        case .file(let range): range.length
        }
    }
}

/// One HTTP request to run once (no retries; path changes end it at once, see
/// `DownloadAgent.exchange`).
package struct ExchangeRequest: Sendable {
    /// The method.
    package var method: HTTPMethod
    /// An http or https URL.
    package var url: URL
    /// Extra request header lines (`Name: value`), after the agent's own; checked by `validate()`.
    package var headerFields: [String]
    /// The body.
    package var body: ExchangeBody
    /// Whether 3xx answers are followed; only for requests without a body (it cannot be sent twice).
    package var followsRedirects: Bool
    /// No byte sent or received for this long ends the exchange with `-1001` (URLSession's
    /// `timeoutIntervalForRequest`, 60 s by default).
    package var idleTimeout: Duration
    /// The most response body bytes kept in memory when they are not streamed
    /// (`ExchangeHandlers.bodyData`); a larger body ends the exchange with an error.
    package var responseBodyLimit: Int
    /// Pins the request to this interface (SO_BINDTODEVICE), when set.
    package var interfaceName: String?
    /// A connect timeout shorter than the agent's, when set: a probe of a server that does not
    /// answer gives up before the next is due (`ServerWaitSchedule.connectTimeout`).
    package var connectTimeout: Duration?
    /// Whether to open a new connection rather than reuse one (a probe after a failure: a kept
    /// connection may be the one that died).
    package var freshConnection = false

    /// A request with the usual defaults: follows redirects when there is no body, 60 s idle
    /// timeout, up to 64 MiB of response body in memory.
    package init(method: HTTPMethod = .get, url: URL, headerFields: [String] = [], body: ExchangeBody = .empty,
                 followsRedirects: Bool? = nil, idleTimeout: Duration = .seconds(60),
                 responseBodyLimit: Int = 64 << 20, interfaceName: String? = nil) {
        self.method = method
        self.url = url
        self.headerFields = headerFields
        self.body = body
        if case .empty = body { self.followsRedirects = followsRedirects ?? true } else { self.followsRedirects = false }
        self.idleTimeout = idleTimeout
        self.responseBodyLimit = responseBodyLimit
        self.interfaceName = interfaceName
    }

    /// Header names libcurl writes from the request itself: a caller's value would contradict it.
    package static let reservedHeaderNames: Set<String> = ["content-length", "transfer-encoding", "connection", "expect", "host"]

    /// Throws `invalidRequest` with the reason when the request cannot be sent as it is.
    package func validate() throws(DownloadError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw DownloadError.unsupportedURL.with(description: "only http and https URLs can be requested: \(url)")
        }
        for line in headerFields {
            if let problem = HeaderValidation.problem(with: line, reserved: []) {
                throw DownloadError.invalidRequest.with(description: "request header \(line.prefix(while: { $0 != ":" })): \(problem)")
            }
            let name = line.prefix(while: { $0 != ":" }).lowercased()
            if Self.reservedHeaderNames.contains(name) {
                throw DownloadError.invalidRequest.with(description:
                    "request header \(name) is set from the request itself; leave it out")
            }
        }
        if case .file(let range) = body, range.offset < 0 || range.length < 0 {
            throw DownloadError.invalidRequest.with(description: "the body's file range is negative")
        }
        guard responseBodyLimit >= 0, idleTimeout > .zero else {
            throw DownloadError.invalidRequest.with(description: "the response body limit and idle timeout must be positive")
        }
    }
}

/// What an exchange reports while it runs; every handler is called on the engine thread, so it
/// must return quickly (hand the value on).
package struct ExchangeHandlers: Sendable {
    /// An interim (1xx) response other than `100 Continue`, e.g. `104 Upload Resumption Supported`.
    package var interimResponse: @Sendable (ResponseHead) -> Void
    /// The final response's head, before its body.
    package var response: @Sendable (ResponseHead) -> Void
    /// Response body bytes as they arrive; when set, `ExchangeResponse.body` stays empty.
    package var bodyData: (@Sendable (Data) -> Void)?
    /// Request body bytes handed to the connection so far, and how many there are, about ten
    /// times a second and once at the end of the body.
    package var bytesSent: @Sendable (_ sent: Int64, _ expected: Int64) -> Void
    /// The request waits for a usable path before it is sent (`waitsForConnectivity`).
    package var waitingForConnectivity: @Sendable () -> Void

    /// Handlers that ignore everything.
    package init(interimResponse: @escaping @Sendable (ResponseHead) -> Void = { _ in },
                 response: @escaping @Sendable (ResponseHead) -> Void = { _ in },
                 bodyData: (@Sendable (Data) -> Void)? = nil,
                 bytesSent: @escaping @Sendable (Int64, Int64) -> Void = { _, _ in },
                 waitingForConnectivity: @escaping @Sendable () -> Void = {}) {
        self.interimResponse = interimResponse
        self.response = response
        self.bodyData = bodyData
        self.bytesSent = bytesSent
        self.waitingForConnectivity = waitingForConnectivity
    }
}

/// The answer to an exchange.
package struct ExchangeResponse: Sendable {
    /// The final response's status and fields.
    package var head: ResponseHead
    /// Interim responses received before it (1xx other than 100), in order.
    package var interimHeads: [ResponseHead]
    /// The response body, unless it was streamed (`ExchangeHandlers.bodyData`).
    package var body: Data
    /// Request body bytes libcurl handed to the connection.
    package var bytesSent: Int64
}

/// How an exchange ended, on the engine thread.
struct ExchangeOutcome: Sendable {
    var result: Result<ExchangeResponse, DownloadError>
    /// Request body bytes handed to the connection (also when it failed).
    var bytesSent: Int64
    /// How long the connection took to set up, when this exchange made one.
    var connectTime: Duration? = nil
    /// Whether a connection to the server was made (a failure after it is not a silent server).
    var didConnect = false
}
