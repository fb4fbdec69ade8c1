import FoundationEssentials
import ReachabilityBase
import ResumableDownloads

/// `--limit-rate`, `--cacert`, `--proxy` and `--no-proxy`: how transfers reach servers. `download`
/// takes them for its run (its Metalink fetch too); the agent takes them for every download it runs (restored ones too)
/// and keeps them nowhere but its command line (`agent.conf`'s `proxy=` overrides its proxy).
/// `queue add` takes only the proxy ones, for its job (see `QueueAddCommand`).
struct TransportOptions: OptionTable, Equatable {
    static let table: [OptionRow<Self>] = [
        .value("limit-rate", valueName: "speed", help: "Receive at most this many bytes per second per download; k, m, g, t suffixes (1k = 1024).",
               as: rate, into: \.maximumBytesPerSecond),
        .path("cacert", valueName: "file", expected: "a PEM file", help: "Trust the certificate authorities in this PEM file instead of the system's.",
              into: \.certificateAuthorityFile),
    ] + proxyRows(into: \.proxy)

    /// `500k`, `2m`, `1g`, `12345`: bytes per second, 1024-based as curl's.
    static let rate = ByteCount.rate(1...(1 << 50))

    /// `--proxy` and `--no-proxy` storing the setting into `path`: in this group, and in the table
    /// of `queue add`, which takes only these two for its job.
    static func proxyRows<Outer>(into path: WritableKeyPath<Outer, String?> & Sendable) -> [OptionRow<Outer>] {
        [.value("proxy", short: "x", valueName: "url",
                help: "Use this proxy (http://, https://, socks5h://). Default: http_proxy, https_proxy, all_proxy and no_proxy, as curl; '' for none.",
                into: path),
         .custom(.flag("no-proxy", help: "Connect directly: ignore http_proxy, https_proxy and all_proxy (the same as --proxy '')."),
                 into: path) { arguments, _ in try proxySetting(arguments) }]
    }

    /// `--limit-rate`, in bytes per second.
    var maximumBytesPerSecond: Int64?
    /// `--cacert` as given (relative to the working directory).
    var certificateAuthorityFile: String?
    /// `--proxy`; "" for no proxy at all, nil for the environment's.
    var proxy: String?

    /// `--proxy URL` (checked once into a `ProxyURL`), `--proxy ''` or `--no-proxy` ("": none),
    /// or nil for the environment's; both options at once are a usage error.
    static func proxySetting(_ arguments: ParsedArguments) throws -> String? {
        let (proxy, noProxy) = (option("proxy"), option("no-proxy"))
        let given = arguments.value(proxy)
        if arguments.isSet(noProxy) {
            guard given == nil else {
                throw UsageError("'\(proxy.synopsis)' and '\(noProxy.synopsis)' cannot be used together")
            }
            return ""
        }
        guard let given, !given.isEmpty else { return given }
        do {
            return try ProxyURL(given).text
        } catch {
            throw UsageError.invalidValue(error.shownText, for: proxy, error.problem)
        }
    }

    /// `--cacert` as an absolute URL.
    func certificateAuthorityURL(workingDirectory: String) -> URL? {
        certificateAuthorityFile.map { URL(fileURLWithPath: $0, relativeTo: URL(fileURLWithPath: workingDirectory, isDirectory: true)) }
    }

    /// Sets the three on an engine's configuration: the one place they reach libcurl's settings,
    /// for `download` (its files and its Metalink fetch) and for every download of the agent.
    func apply(to configuration: inout DownloadAgent.Configuration, workingDirectory: String) {
        configuration.maximumBytesPerSecond = maximumBytesPerSecond
        configuration.certificateAuthorityFile = certificateAuthorityURL(workingDirectory: workingDirectory)
        configuration.proxy = proxy
    }
}
