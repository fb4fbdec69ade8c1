// Foundation (not only FoundationEssentials) for `URLError`, used only by the two members emitted
// into the caller's module (@_alwaysEmitIntoClient), so this module's code links nothing of
// Foundation proper: a program that never asks for a URLError gets no ICU.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LinuxSystem

/// Why a download failed, with the closest Foundation `URLError` for code ported from Apple
/// platforms.
///
/// Errors compare by kind (and, for transport errors, by `URLError.Code`), so
/// `error == .networkConnectionLost` works whatever the message.
public struct DownloadError: Error, Sendable, Hashable, CustomStringConvertible {
    enum Code: Hashable, Sendable {
        /// A transport failure; the payload is the `URLError` code number.
        case transport(Int)
        case httpStatus
        case badServerResponse
        case checksumMismatch
        case lengthMismatch
        case diskFull
        case fileSystem
        case cancelled
        case connectivityTimeout
        case invalidRequest
        case destinationExists
        case destinationInUse
        case untrustedFile
    }

    let code: Code
    /// What went wrong, for people.
    public let description: String
    /// The closest `URLError` code, as URLSession would report it.
    @_alwaysEmitIntoClient
    public var urlErrorCode: URLError.Code { (URLError.Code(rawValue: errorCode) ?? .unknown) }
    /// The closest `URLError` code's number (-1005 for a lost connection), as `URLError.errorCode`.
    public var errorCode: Int { urlCode.rawValue }
    /// The same code, inside the package (no Foundation proper needed).
    package let urlCode: URLErrorCode
    /// The HTTP status that ended the download, for `httpStatus` errors.
    public let httpStatusCode: Int?
    /// The OS `errno` behind a transport or file-system failure, when known.
    public let osErrorCode: Int32?

    init(_ code: Code, _ description: String, urlErrorCode: URLErrorCode, httpStatusCode: Int? = nil,
         osErrorCode: Int32? = nil) {
        self.code = code
        self.description = description
        self.urlCode = urlErrorCode
        self.httpStatusCode = httpStatusCode
        self.osErrorCode = osErrorCode
    }

    /// A transport error for `urlErrorCode`.
    static func transport(_ urlErrorCode: URLErrorCode, _ description: String? = nil,
                          osErrorCode: Int32? = nil) -> DownloadError {
        var text = description ?? Self.defaultDescription(urlErrorCode)
        if let osErrorCode, osErrorCode != 0 { text += " (\(String(cString: strerror(osErrorCode))))" }
        return DownloadError(.transport(urlErrorCode.rawValue), text, urlErrorCode: urlErrorCode,
                             osErrorCode: osErrorCode == 0 ? nil : osErrorCode)
    }

    /// The error as a Foundation `URLError`, with this description and the failing URL.
    @_alwaysEmitIntoClient
    public func urlError(failingURL: URL? = nil) -> URLError {
        var info: [String: Any] = [NSLocalizedDescriptionKey: description]
        if let failingURL { info[NSURLErrorFailingURLErrorKey] = failingURL }
        if let osErrorCode { info[NSUnderlyingErrorKey] = NSError(domain: NSPOSIXErrorDomain, code: Int(osErrorCode)) }
        return URLError((URLError.Code(rawValue: errorCode) ?? .unknown), userInfo: info)
    }

    /// Whether the download keeps its partial data and resume record, so `resume()` continues
    /// where it stopped (disk full, outage deadline, retries exhausted on a flaky network).
    public var isResumable: Bool {
        switch code {
        case .transport:
            // A bad URL or redirect chain will not get better; a network or TLS trust problem may
            // (reconnect, install the CA), so the stored bytes are kept for those.
            return ![.unsupportedURL, .badURL, .httpTooManyRedirects, .badServerResponse, .cancelled].contains(urlCode)
        case .diskFull, .fileSystem, .connectivityTimeout, .destinationExists, .destinationInUse:
            return true
        case .httpStatus:
            return httpStatusCode.map { (500...599).contains($0) || $0 == 408 || $0 == 429 } ?? false
        case .badServerResponse, .checksumMismatch, .lengthMismatch, .cancelled, .invalidRequest, .untrustedFile:
            return false
        }
    }

    /// Whether the server refused a URL it served before: 401, 403 or 410, the answers of an
    /// expired presigned link or CDN token. Not resumable from the same URL, but the bytes
    /// already stored are kept (when there are any) so the download can continue from a new one.
    public var isExpiredLink: Bool {
        code == .httpStatus && httpStatusCode.map { [401, 403, 410].contains($0) } == true
    }

    /// Equal when the kinds match (for transport errors, the `URLError.Code` too).
    public static func == (lhs: DownloadError, rhs: DownloadError) -> Bool { lhs.code == rhs.code }
    /// Hashes the kind, consistently with `==`.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// The connection died mid-transfer (reset, short body, stall): `URLError.networkConnectionLost`.
    public static let networkConnectionLost = transport(.networkConnectionLost)
    /// There is no network path: `URLError.notConnectedToInternet`.
    public static let notConnectedToInternet = transport(.notConnectedToInternet)
    /// Connecting or the whole request took too long: `URLError.timedOut`.
    public static let timedOut = transport(.timedOut)
    /// The host refused or could not be reached: `URLError.cannotConnectToHost`.
    public static let cannotConnectToHost = transport(.cannotConnectToHost)
    /// The host name did not resolve: `URLError.cannotFindHost`.
    public static let cannotFindHost = transport(.cannotFindHost)
    /// Too many redirects, or a redirect to a scheme other than http/https.
    public static let tooManyRedirects = transport(.httpTooManyRedirects)
    /// The URL scheme is not http or https: `URLError.unsupportedURL`.
    public static let unsupportedURL = transport(.unsupportedURL)
    /// TLS failed: `URLError.secureConnectionFailed`.
    public static let secureConnectionFailed = transport(.secureConnectionFailed)
    /// The server's response broke the protocol or the resume rules: `URLError.badServerResponse`.
    public static let badServerResponse = DownloadError(.badServerResponse, "bad server response",
                                                        urlErrorCode: .badServerResponse)
    /// The server answered with an HTTP error status (compare by kind; see `httpStatusCode`).
    public static let httpStatus = DownloadError(.httpStatus, "HTTP error status", urlErrorCode: .badServerResponse)
    /// The finished file's SHA-256 differs from the expected one.
    public static let checksumMismatch = DownloadError(.checksumMismatch, "SHA-256 mismatch",
                                                       urlErrorCode: .cannotDecodeRawData)
    /// The finished file's length differs from the announced or expected one.
    public static let lengthMismatch = DownloadError(.lengthMismatch, "length mismatch",
                                                     urlErrorCode: .badServerResponse)
    /// The disk filled up; the partial file is kept and `resume()` continues after space is freed.
    public static let diskFull = DownloadError(.diskFull, "no space left on device",
                                               urlErrorCode: .cannotWriteToFile, osErrorCode: ENOSPC)
    /// Creating, writing, syncing or renaming a file failed.
    public static let fileSystem = DownloadError(.fileSystem, "file system error", urlErrorCode: .cannotWriteToFile)
    /// The download was cancelled: `URLError.cancelled`.
    public static let cancelled = DownloadError(.cancelled, "cancelled", urlErrorCode: .cancelled)
    /// The path stayed unusable longer than the configured maximum outage wait.
    public static let connectivityTimeout = DownloadError(.connectivityTimeout,
                                                          "no usable network path within the outage limit",
                                                          urlErrorCode: .notConnectedToInternet)
    /// The request cannot be made (bad URL, destination in use).
    public static let invalidRequest = DownloadError(.invalidRequest, "invalid request", urlErrorCode: .badURL)

    /// A file appeared at the destination while downloading; it is never replaced. The verified
    /// download stays in `NAME.part` (resumable: remove the file and resume).
    public static let destinationExists = DownloadError(.destinationExists, "the destination already exists",
                                                        urlErrorCode: .cannotCreateFile, osErrorCode: EEXIST)
    /// Another process is writing the same destination (its `NAME.part` is locked).
    public static let destinationInUse = DownloadError(.destinationInUse, "another process is writing the destination",
                                                       urlErrorCode: .cannotOpenFile)
    /// A file or directory failed a trust check (a symbolic link, FIFO or hard link where the
    /// partial file should be, another user's file, a directory others may write to); it was
    /// not used.
    public static let untrustedFile = DownloadError(.untrustedFile, "refused an untrusted file",
                                                    urlErrorCode: .cannotOpenFile)

    /// The error for a failed trust check or file system call.
    static func file(_ error: FileTrustError) -> DownloadError {
        guard let number = error.errno?.rawValue else {
            return untrustedFile.with(description: "refused: \(error)")
        }
        let code: Code = number == ENOSPC || number == EDQUOT ? .diskFull : .fileSystem
        return DownloadError(code, error.description, urlErrorCode: .cannotWriteToFile, osErrorCode: number)
    }

    /// An HTTP error status with its code.
    static func httpStatus(_ status: Int) -> DownloadError {
        DownloadError(.httpStatus, "server answered HTTP \(status)", urlErrorCode: status == 401 ? .userAuthenticationRequired
                      : (status == 404 || status == 410 ? .fileDoesNotExist : .badServerResponse),
                      httpStatusCode: status)
    }

    /// A copy with a more specific message.
    func with(description: String) -> DownloadError {
        DownloadError(code, description, urlErrorCode: urlCode, httpStatusCode: httpStatusCode,
                      osErrorCode: osErrorCode)
    }

    /// A file-system error for `errno`, turning ENOSPC/EDQUOT into `diskFull`.
    static func fileSystem(_ operation: String, path: String, errno number: Int32) -> DownloadError {
        let reason = Errno(number).description
        if number == ENOSPC || number == EDQUOT {
            return DownloadError(.diskFull, "\(operation) \(path): \(reason)", urlErrorCode: .cannotWriteToFile,
                                 osErrorCode: number)
        }
        return DownloadError(.fileSystem, "\(operation) \(path): \(reason)", urlErrorCode: .cannotWriteToFile,
                             osErrorCode: number)
    }

    private static func defaultDescription(_ code: URLErrorCode) -> String {
        switch code {
        case .networkConnectionLost: "the network connection was lost"
        case .notConnectedToInternet: "not connected to the network"
        case .timedOut: "the request timed out"
        case .cannotConnectToHost: "could not connect to the server"
        case .cannotFindHost: "the server's host name could not be resolved"
        case .httpTooManyRedirects: "too many redirects"
        case .unsupportedURL: "unsupported URL"
        case .badURL: "bad URL"
        case .secureConnectionFailed: "a TLS connection could not be established"
        case .serverCertificateUntrusted: "the server certificate is not trusted"
        case .cannotWriteToFile: "could not write to the file"
        case .cancelled: "cancelled"
        case .badServerResponse: "bad server response"
        case .cannotDecodeContentData: "could not decode the content"
        case .dataLengthExceedsMaximum: "the response is larger than allowed"
        default: "network error \(code.rawValue)"
        }
    }
}
