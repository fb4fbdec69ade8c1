/// URLSession's error numbers (`NSURLError…`) for the codes this module reports.
///
/// Foundation's `URLError.Code` lives in Foundation proper, not FoundationEssentials: using its
/// metadata here would link all of Foundation and ICU into every program that downloads (in a
/// static build, about 50 MB on disk and 4 MB resident). `DownloadError.urlErrorCode` still
/// hands callers a real `URLError.Code`, built in their own module from these numbers.
/// Tests check every value against Foundation's.
package struct URLErrorCode: RawRepresentable, Hashable, Sendable {
    package let rawValue: Int
    package init(rawValue: Int) { self.rawValue = rawValue }

    package static let unknown = URLErrorCode(rawValue: -1)
    package static let cancelled = URLErrorCode(rawValue: -999)
    package static let badURL = URLErrorCode(rawValue: -1000)
    package static let timedOut = URLErrorCode(rawValue: -1001)
    package static let unsupportedURL = URLErrorCode(rawValue: -1002)
    package static let cannotFindHost = URLErrorCode(rawValue: -1003)
    package static let cannotConnectToHost = URLErrorCode(rawValue: -1004)
    package static let networkConnectionLost = URLErrorCode(rawValue: -1005)
    package static let dnsLookupFailed = URLErrorCode(rawValue: -1006)
    package static let httpTooManyRedirects = URLErrorCode(rawValue: -1007)
    package static let notConnectedToInternet = URLErrorCode(rawValue: -1009)
    package static let badServerResponse = URLErrorCode(rawValue: -1011)
    package static let userAuthenticationRequired = URLErrorCode(rawValue: -1013)
    package static let cannotDecodeRawData = URLErrorCode(rawValue: -1015)
    package static let cannotDecodeContentData = URLErrorCode(rawValue: -1016)
    package static let fileDoesNotExist = URLErrorCode(rawValue: -1100)
    package static let dataLengthExceedsMaximum = URLErrorCode(rawValue: -1103)
    package static let secureConnectionFailed = URLErrorCode(rawValue: -1200)
    package static let serverCertificateUntrusted = URLErrorCode(rawValue: -1202)
    package static let cannotCreateFile = URLErrorCode(rawValue: -3000)
    package static let cannotOpenFile = URLErrorCode(rawValue: -3001)
    package static let cannotWriteToFile = URLErrorCode(rawValue: -3003)
}
