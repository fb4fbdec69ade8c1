/// URLSession's error numbers (`NSURLError…`) for the codes this module reports.
///
/// Foundation's `URLError.Code` lives in Foundation proper, not FoundationEssentials: using its
/// metadata here would link all of Foundation and ICU into every program that downloads (in a
/// static build, about 50 MB on disk and 4 MB resident). `DownloadError.urlErrorCode` still
/// hands callers a real `URLError.Code`, built in their own module from these numbers.
/// Tests check every value against Foundation's.
struct URLErrorCode: RawRepresentable, Hashable, Sendable {
    let rawValue: Int
    init(rawValue: Int) { self.rawValue = rawValue }

    static let unknown = URLErrorCode(rawValue: -1)
    static let cancelled = URLErrorCode(rawValue: -999)
    static let badURL = URLErrorCode(rawValue: -1000)
    static let timedOut = URLErrorCode(rawValue: -1001)
    static let unsupportedURL = URLErrorCode(rawValue: -1002)
    static let cannotFindHost = URLErrorCode(rawValue: -1003)
    static let cannotConnectToHost = URLErrorCode(rawValue: -1004)
    static let networkConnectionLost = URLErrorCode(rawValue: -1005)
    static let dnsLookupFailed = URLErrorCode(rawValue: -1006)
    static let httpTooManyRedirects = URLErrorCode(rawValue: -1007)
    static let notConnectedToInternet = URLErrorCode(rawValue: -1009)
    static let badServerResponse = URLErrorCode(rawValue: -1011)
    static let userAuthenticationRequired = URLErrorCode(rawValue: -1013)
    static let cannotDecodeRawData = URLErrorCode(rawValue: -1015)
    static let cannotDecodeContentData = URLErrorCode(rawValue: -1016)
    static let fileDoesNotExist = URLErrorCode(rawValue: -1100)
    static let dataLengthExceedsMaximum = URLErrorCode(rawValue: -1103)
    static let secureConnectionFailed = URLErrorCode(rawValue: -1200)
    static let serverCertificateUntrusted = URLErrorCode(rawValue: -1202)
    static let cannotWriteToFile = URLErrorCode(rawValue: -3003)
}
