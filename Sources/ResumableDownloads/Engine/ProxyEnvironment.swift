import FoundationEssentials
import LinuxReachability

/// Which proxy libcurl will use for a URL, by its own rules, so errors can name it:
/// an explicit proxy wins ("" means none); else `no_proxy`/`NO_PROXY` may exclude the host; else
/// `http_proxy` (lowercase only: libcurl ignores `HTTP_PROXY`, which a CGI request could set),
/// `https_proxy`/`HTTPS_PROXY`, then `all_proxy`/`ALL_PROXY`.
public enum ProxyEnvironment {
    /// The proxy libcurl uses for `url`, nil for a direct connection.
    public static func proxy(for url: URL?, explicit: String?,
                             environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let explicit { return explicit.isEmpty ? nil : explicit }
        guard let url, let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let noProxy = environment["no_proxy"] ?? environment["NO_PROXY"]
        if let noProxy, excludes(host: host, noProxy) { return nil }
        let candidates = scheme == "http" ? ["http_proxy"] : ["\(scheme)_proxy", "\(scheme.uppercased())_PROXY"]
        for name in candidates + ["all_proxy", "ALL_PROXY"] {
            if let value = environment[name], !value.isEmpty { return value }
        }
        return nil
    }

    /// `no_proxy` matching as libcurl does: `*` matches everything; each comma-separated entry
    /// matches the host itself or any name under it (a leading dot is optional).
    static func excludes(host: String, _ list: String) -> Bool {
        for raw in list.split(separator: ",") {
            var entry = raw.trimmingWhitespace().lowercased()
            if entry == "*" { return true }
            if entry.hasPrefix(".") { entry.removeFirst() }
            if entry.isEmpty { continue }
            if host == entry || host.hasSuffix("." + entry) { return true }
        }
        return false
    }

    /// What events show for a download to `url`: the redacted proxy libcurl will use, nil for a
    /// direct connection.
    public static func shownProxy(for url: URL?, explicit: String?,
                                  environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        proxy(for: url, explicit: explicit, environment: environment).map(redacted)
    }

    /// The proxy URL without a password, for messages (`http://user:***@proxy:3128`).
    public static func redacted(_ proxy: String) -> String { URLRedaction.redacted(proxy) }
}

/// A proxy URL checked once where it comes in (`download --proxy`, `agent.conf`'s `proxy=`, a
/// queued job's proxy): http, https or socks scheme, a host, a port in range, nothing libcurl
/// would read as another option (spaces, control characters). `text` is what libcurl gets;
/// `description` is the redacted form every message and event shows.
public struct ProxyURL: Sendable, Hashable, CustomStringConvertible {
    /// Schemes libcurl's CURLOPT_PROXY accepts that this project supports.
    public static let schemes: Set<String> = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

    /// The URL as given, for libcurl.
    public let text: String

    /// Checks `text`; the error says what was expected and shows the text redacted.
    public init(_ text: String) throws(ProxyURLError) {
        guard !text.isEmpty, text.count <= 2048, !text.contains(where: { $0.isWhitespace }),
              HTTPWire.isSafeOnTheWire(text) else {
            throw ProxyURLError(text: text, problem: "expected a proxy URL like http://host:3128 or socks5h://host:1080")
        }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              Self.schemes.contains(scheme), let host = components.host, !host.isEmpty else {
            throw ProxyURLError(text: text, problem: "expected a proxy URL like http://host:3128 or socks5h://host:1080")
        }
        if let port = components.port, !(1...65535).contains(port) {
            throw ProxyURLError(text: text, problem: "the port must be 1 to 65535")
        }
        self.text = text
    }

    /// The URL with its password masked (`http://user:***@proxy:3128`).
    public var description: String { URLRedaction.redacted(text) }

    /// Whether the URL carries a user name or password.
    public var hasCredentials: Bool { URLComponents(string: text).map { $0.user != nil || $0.password != nil } ?? false }
}

/// A proxy URL that cannot be used, and why.
public struct ProxyURLError: Error, Sendable, CustomStringConvertible {
    /// The text as given, redacted.
    public let shownText: String
    /// What was wrong with it.
    public let problem: String

    init(text: String, problem: String) {
        // Without `scheme://` the redaction finds no userinfo; `user:secret@host` still hides it.
        if !text.contains("://"), let at = text.lastIndex(of: "@") {
            shownText = "***" + text[at...]
        } else {
            shownText = URLRedaction.redacted(text)
        }
        self.problem = problem
    }

    /// `'http://x' is not a usable proxy: ...`
    public var description: String { "'\(shownText)': \(problem)" }
}
