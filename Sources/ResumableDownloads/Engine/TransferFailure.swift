import FoundationEssentials
import Glibc

/// libcurl's result codes that matter for classification, as a Swift enum so the mapping table
/// can be tested without libcurl (`Curl.swift` converts `CURLcode` into it).
enum TransferFailure: Hashable, Sendable {
    case unsupportedProtocol        // CURLE_UNSUPPORTED_PROTOCOL (1)
    case malformedURL               // CURLE_URL_MALFORMAT (3)
    case couldNotResolveProxy       // CURLE_COULDNT_RESOLVE_PROXY (5)
    case couldNotResolveHost        // CURLE_COULDNT_RESOLVE_HOST (6)
    case couldNotConnect            // CURLE_COULDNT_CONNECT (7)
    case weirdServerReply           // CURLE_WEIRD_SERVER_REPLY (8)
    case http2                      // CURLE_HTTP2 (16), CURLE_HTTP2_STREAM (92)
    case partialFile                // CURLE_PARTIAL_FILE (18): body shorter than announced
    case writeError                 // CURLE_WRITE_ERROR (23): our callback refused the bytes
    case operationTimedOut          // CURLE_OPERATION_TIMEDOUT (28): also the low-speed stall abort
    case rangeError                 // CURLE_RANGE_ERROR (33)
    case tlsConnectError            // CURLE_SSL_CONNECT_ERROR (35)
    case abortedByCallback          // CURLE_ABORTED_BY_CALLBACK (42)
    case interfaceFailed            // CURLE_INTERFACE_FAILED (45): pinned interface unusable
    case tooManyRedirects           // CURLE_TOO_MANY_REDIRECTS (47)
    case gotNothing                 // CURLE_GOT_NOTHING (52): connection closed before any reply
    case sendError                  // CURLE_SEND_ERROR (55)
    case receiveError               // CURLE_RECV_ERROR (56)
    case peerFailedVerification     // CURLE_PEER_FAILED_VERIFICATION (60)
    case badContentEncoding         // CURLE_BAD_CONTENT_ENCODING (61)
    case fileSizeExceeded           // CURLE_FILESIZE_EXCEEDED (63)
    case outOfMemory                // CURLE_OUT_OF_MEMORY (27)
    case other(Int32)               // anything else, with the raw CURLcode
}

/// Maps a libcurl failure plus the OS `errno` to the `URLError` code URLSession would report.
enum TransferErrorMapping {
    /// `didConnect` tells a stall after connecting (connection lost) from a connect timeout.
    static func urlErrorCode(for failure: TransferFailure, osErrno: Int32, didConnect: Bool) -> URLErrorCode {
        switch failure {
        case .unsupportedProtocol: return .unsupportedURL
        case .malformedURL: return .badURL
        case .couldNotResolveHost, .couldNotResolveProxy: return .cannotFindHost
        case .couldNotConnect:
            switch osErrno {
            case ENETUNREACH, ENETDOWN: return .notConnectedToInternet
            case ETIMEDOUT: return .timedOut
            default: return .cannotConnectToHost   // ECONNREFUSED, EHOSTUNREACH, ...
            }
        case .interfaceFailed: return .notConnectedToInternet
        case .operationTimedOut: return didConnect ? .networkConnectionLost : .timedOut
        case .partialFile, .gotNothing, .sendError, .receiveError, .http2: return .networkConnectionLost
        case .weirdServerReply, .rangeError: return .badServerResponse
        case .tlsConnectError:
            // A reset during the handshake is a lost connection, not a TLS configuration problem.
            return osErrno == ECONNRESET || osErrno == EPIPE ? .networkConnectionLost : .secureConnectionFailed
        case .peerFailedVerification: return .serverCertificateUntrusted
        case .tooManyRedirects: return .httpTooManyRedirects
        case .writeError: return .cannotWriteToFile
        case .abortedByCallback: return .cancelled
        case .badContentEncoding: return .cannotDecodeContentData
        case .fileSizeExceeded: return .dataLengthExceedsMaximum
        case .outOfMemory: return .unknown
        case .other: return .unknown
        }
    }

    /// The classified failure as a `DownloadError`. With a proxy in use, a failure to reach it
    /// names the proxy (libcurl says only "could not connect to the server").
    static func error(for failure: TransferFailure, osErrno: Int32, didConnect: Bool, detail: String?,
                      proxy: String? = nil) -> DownloadError {
        if let reply = badReply(failure, didConnect: didConnect, detail: detail ?? "") { return reply }
        let code = urlErrorCode(for: failure, osErrno: osErrno, didConnect: didConnect)
        var error = DownloadError.transport(code, nil, osErrorCode: osErrno)
        if let proxy, isProxyFailure(failure, didConnect: didConnect) {
            let reason = osErrno != 0 ? ": \(String(cString: strerror(osErrno)))" : ""
            return error.with(description: "could not connect through the proxy \(ProxyEnvironment.redacted(proxy))\(reason)")
        }
        if let detail, !detail.isEmpty { error = error.with(description: error.description + ": " + detail) }
        return error
    }

    /// Replies libcurl could not read, said as what they are: libcurl reports a broken chunked
    /// body as a receive error, a status line that is not HTTP as an unsupported protocol, and
    /// response headers over its 100 KiB limit as out of memory, which read as a lost connection,
    /// a bad URL and a full machine. Its error buffer (`detail`) tells them apart; curl prints it.
    static func badReply(_ failure: TransferFailure, didConnect: Bool, detail: String) -> DownloadError? {
        switch failure {
        case .receiveError where detail.contains("chunked-encoding"):
            return .badServerResponse.with(description: "the server sent a malformed chunked body: \(detail)")
        case .unsupportedProtocol where ["HTTP/0.9", "response code", "HTTP version", "status line"].contains { detail.contains($0) }:
            return .badServerResponse.with(description: "the server's reply is not HTTP: \(detail)")
        case .outOfMemory where didConnect:
            return .badServerResponse.with(description:
                "the server's response headers are too large (libcurl accepts at most 100 KiB of them), or memory ran out")
        default:
            return nil
        }
    }

    /// Failures that happen while reaching the proxy or asking it for a tunnel.
    static func isProxyFailure(_ failure: TransferFailure, didConnect: Bool) -> Bool {
        switch failure {
        case .couldNotResolveProxy, .couldNotConnect: return true
        case .other(97): return true   // CURLE_PROXY: the proxy refused the CONNECT or the SOCKS handshake
        case .operationTimedOut, .gotNothing, .receiveError, .sendError: return !didConnect
        default: return false
        }
    }
}

/// How the recovery machine treats a transport error.
enum RetryClass: Hashable, Sendable {
    /// The connection died or could not be made, or the name did not resolve (reset, refused,
    /// timed out, unreachable, DNS): on a satisfied path the download waits for the server on a
    /// short probe schedule without spending its failure budget; without a path it waits for one.
    case connectionLevel
    /// Retried with backoff and counted against the failure budget, since waiting for the
    /// server will not fix it: a TLS handshake that failed, or the kernel saying there is no
    /// route (or no pinned interface) while the path model says there is one (a path update ends
    /// the backoff).
    case counted
    /// Retrying will not help.
    case permanent

    init(_ code: URLErrorCode) {
        switch code {
        case .networkConnectionLost, .timedOut, .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed:
            self = .connectionLevel
        case .secureConnectionFailed, .notConnectedToInternet: self = .counted
        default: self = .permanent
        }
    }
}
