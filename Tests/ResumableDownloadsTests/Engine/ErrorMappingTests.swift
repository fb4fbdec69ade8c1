import Foundation
import Testing
@testable import ResumableDownloads

@Suite("libcurl + errno to URLError")
struct ErrorMappingTests {
    @Test(arguments: [
        (TransferFailure.couldNotResolveHost, 0 as Int32, false, URLError.Code.cannotFindHost),
        (.couldNotConnect, ECONNREFUSED, false, .cannotConnectToHost),
        (.couldNotConnect, EHOSTUNREACH, false, .cannotConnectToHost),
        (.couldNotConnect, ENETUNREACH, false, .notConnectedToInternet),
        (.couldNotConnect, ENETDOWN, false, .notConnectedToInternet),
        (.couldNotConnect, ETIMEDOUT, false, .timedOut),
        (.operationTimedOut, 0, false, .timedOut),
        (.operationTimedOut, 0, true, .networkConnectionLost),       // low-speed stall after connecting
        (.partialFile, 0, true, .networkConnectionLost),
        (.receiveError, ECONNRESET, true, .networkConnectionLost),
        (.sendError, EPIPE, true, .networkConnectionLost),
        (.gotNothing, 0, true, .networkConnectionLost),
        (.http2, 0, true, .networkConnectionLost),
        (.interfaceFailed, ENODEV, false, .notConnectedToInternet),
        (.weirdServerReply, 0, true, .badServerResponse),
        (.tooManyRedirects, 0, true, .httpTooManyRedirects),
        (.unsupportedProtocol, 0, false, .unsupportedURL),
        (.malformedURL, 0, false, .badURL),
        (.tlsConnectError, 0, true, .secureConnectionFailed),
        (.tlsConnectError, ECONNRESET, true, .networkConnectionLost),
        (.peerFailedVerification, 0, true, .serverCertificateUntrusted),
        (.writeError, 0, true, .cannotWriteToFile),
        (.abortedByCallback, 0, true, .cancelled),
        (.other(999), 0, false, .unknown),
    ])
    func mapsLikeURLSession(failure: TransferFailure, osErrno: Int32, didConnect: Bool, expected: URLError.Code) {
        #expect(TransferErrorMapping.urlErrorCode(for: failure, osErrno: osErrno, didConnect: didConnect).rawValue == expected.rawValue)
    }

    @Test(arguments: [
        (URLError.Code.networkConnectionLost, RetryClass.connectionLevel),
        (.notConnectedToInternet, .counted),
        (.timedOut, .connectionLevel),
        (.cannotConnectToHost, .connectionLevel),
        (.cannotFindHost, .connectionLevel),
        (.dnsLookupFailed, .connectionLevel),
        (.secureConnectionFailed, .counted),
        (.badServerResponse, .permanent),
        (.httpTooManyRedirects, .permanent),
        (.cannotWriteToFile, .permanent),
    ])
    func classifiesForRetry(code: URLError.Code, expected: RetryClass) {
        #expect(RetryClass(URLErrorCode(rawValue: code.rawValue)) == expected)
    }

    /// The module's own numbers (kept so it links no Foundation proper) are URLSession's.
    @Test func ownCodesAreFoundations() {
        let pairs: [(URLErrorCode, URLError.Code)] = [
            (.unknown, .unknown), (.cancelled, .cancelled), (.badURL, .badURL), (.timedOut, .timedOut),
            (.unsupportedURL, .unsupportedURL), (.cannotFindHost, .cannotFindHost),
            (.cannotConnectToHost, .cannotConnectToHost), (.networkConnectionLost, .networkConnectionLost),
            (.dnsLookupFailed, .dnsLookupFailed), (.httpTooManyRedirects, .httpTooManyRedirects),
            (.notConnectedToInternet, .notConnectedToInternet), (.badServerResponse, .badServerResponse),
            (.userAuthenticationRequired, .userAuthenticationRequired), (.cannotDecodeRawData, .cannotDecodeRawData),
            (.cannotDecodeContentData, .cannotDecodeContentData), (.fileDoesNotExist, .fileDoesNotExist),
            (.dataLengthExceedsMaximum, .dataLengthExceedsMaximum), (.secureConnectionFailed, .secureConnectionFailed),
            (.serverCertificateUntrusted, .serverCertificateUntrusted), (.cannotWriteToFile, .cannotWriteToFile),
            (.cannotCreateFile, .cannotCreateFile), (.cannotOpenFile, .cannotOpenFile),
        ]
        for (own, foundation) in pairs { #expect(own.rawValue == foundation.rawValue, "\(foundation)") }
        #expect(DownloadError.networkConnectionLost.errorCode == -1005)
        #expect(DownloadError.networkConnectionLost.urlErrorCode == .networkConnectionLost)
    }

    @Test func errorsCarryURLErrorAndErrno() {
        let error = TransferErrorMapping.error(for: .receiveError, osErrno: ECONNRESET, didConnect: true, detail: "Recv failure")
        #expect(error == .networkConnectionLost)
        #expect(error.osErrorCode == ECONNRESET)
        #expect(error.description.contains("Recv failure"))
        let urlError = error.urlError(failingURL: URL(string: "http://h/x"))
        #expect(urlError.code == .networkConnectionLost)
        #expect(urlError.errorCode == -1005)
        #expect(DownloadError.notConnectedToInternet.urlErrorCode.rawValue == -1009)
    }

    @Test func diskFullIsResumableAndFourHundredsAreNot() {
        #expect(DownloadError.fileSystem("write", path: "/x", errno: ENOSPC) == .diskFull)
        #expect(DownloadError.diskFull.isResumable)
        #expect(DownloadError.httpStatus(503).isResumable)
        #expect(!DownloadError.httpStatus(404).isResumable)
        #expect(!DownloadError.checksumMismatch.isResumable)
        #expect(DownloadError.networkConnectionLost.isResumable)
        #expect(!DownloadError.unsupportedURL.isResumable)
        #expect(!DownloadError.tooManyRedirects.isResumable)
    }

    /// libcurl's error buffer tells a broken reply from a lost connection, a bad URL or a full
    /// machine; a disallowed redirect stays an unsupported URL.
    @Test func repliesLibcurlCannotReadAreBadServerResponses() {
        func map(_ failure: TransferFailure, _ detail: String, connected: Bool = true) -> DownloadError {
            TransferErrorMapping.error(for: failure, osErrno: 0, didConnect: connected, detail: detail)
        }
        let chunk = map(.receiveError, "Illegal or missing hexadecimal sequence in chunked-encoding")
        #expect(chunk == .badServerResponse && chunk.description.contains("malformed chunked body"))
        #expect(map(.unsupportedProtocol, "Unsupported response code in HTTP response") == .badServerResponse)
        #expect(map(.unsupportedProtocol, "Received HTTP/0.9 when not allowed") == .badServerResponse)
        #expect(map(.unsupportedProtocol, "Protocol \"ftp\" not supported or disabled in libcurl") == .unsupportedURL)
        #expect(map(.outOfMemory, "").description.contains("response headers are too large"))
        #expect(map(.outOfMemory, "", connected: false) != .badServerResponse)
        #expect(map(.receiveError, "Connection reset by peer") == .networkConnectionLost)
    }
}

/// URLs as shown to people (issue 21): userinfo masked, nothing else changed.
@Suite struct URLRedactionTests {
    @Test(arguments: [
        ("http://user:secret@host/a?b#c", "http://user:***@host/a?b#c"),
        ("https://TOKEN@host:8443/x", "https://***@host:8443/x"),
        ("http://host/path@not-userinfo", "http://host/path@not-userinfo"),
        ("http://a:b@c:d@host/", "http://a:***@host/"),
        ("http://host/", "http://host/"),
        ("socks5h://u:p@proxy:1080", "socks5h://u:***@proxy:1080"),
        ("not a url", "not a url"),
        ("http://user:pw@host", "http://user:***@host"),
    ])
    func userinfoIsMasked(_ text: String, _ shown: String) {
        #expect(URLRedaction.redacted(text) == shown)
    }
}
