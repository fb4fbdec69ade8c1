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

    /// The proxy URL without a password, for messages (`http://user:***@proxy:3128`).
    public static func redacted(_ proxy: String) -> String { URLRedaction.redacted(proxy) }
}

/// Rules for extra request headers (`download -H`).
public enum HeaderValidation {
    /// Headers the resume logic sets and depends on: overriding them would splice files.
    public static let reservedNames: Set<String> = ["range", "if-range", "accept-encoding", "content-length",
                                                    "transfer-encoding", "te", "connection"]

    /// Why `line` cannot be sent as a header, or nil when it can. `Name: value`, the name an
    /// RFC 9110 token, the value without control characters (a CR or LF would start another
    /// header on the wire), and not one of `reservedNames`.
    public static func problem(with line: String) -> String? { problem(with: line, reserved: reservedNames) }

    /// `problem(with:)` with another set of reserved names (an exchange reserves fewer).
    package static func problem(with line: String, reserved: Set<String>) -> String? {
        guard let colon = line.firstIndex(of: ":") else { return "expected 'Name: value'" }
        let name = line[..<colon]
        guard HTTPWire.isToken(name) else {
            return "the header name must be letters, digits and !#$%&'*+-.^_`|~"
        }
        guard isSafeOnTheWire(line) else { return "control characters (CR, LF, NUL, ...) are not allowed" }
        if reserved.contains(name.lowercased()) {
            return "\(name) is set by the downloader itself (resuming depends on it)"
        }
        return nil
    }

    /// No byte below 0x20 except tab, and no DEL (`HTTPWire`'s rule).
    static func isSafeOnTheWire(_ line: String) -> Bool {
        HTTPWire.isSafeOnTheWire(line)
    }
}
