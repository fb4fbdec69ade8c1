import FoundationEssentials

/// Whether the Internet answers, beyond a route existing: NetworkManager's connectivity states.
///
/// Only known when a `ConnectivityCheck` is configured; otherwise always `unknown`.
public enum Connectivity: String, Sendable, Hashable, Codable, CaseIterable {
    /// No check is configured, or the first check after a path change is still running.
    case unknown
    /// No usable route: the check is not even tried. Spelled `none` in JSON, as NetworkManager
    /// does (named `offline` to avoid colliding with `Optional.none`).
    case offline = "none"
    /// A route exists but the check failed: timeout, refused, reset, DNS failure, an HTTP error.
    case limited
    /// A captive portal answered instead (a redirect, or another page than the expected one);
    /// see `NetworkPath.portalURL`.
    case portal
    /// The check got the expected answer.
    case full
}

/// An HTTP check of the Internet beyond the route, like NetworkManager's `[connectivity]`.
///
/// Off unless configured (never a hidden phone-home). Sent at once after every path change that
/// moves the primary route (the path update is published first; the result is a second update),
/// then every `interval` while `full`, and on a back-off from `initialBackoff` doubling to
/// `maximumBackoff` while `limited` or `portal`, so recovery is noticed within about a second of
/// a short outage. One check at a time, over the path's primary interface and source address,
/// bounded by `timeout` and by the bytes it reads.
///
/// The probe speaks plain HTTP/1.1 itself (no TLS library in the monitor): `https://` URLs are
/// rejected. A captive portal cannot intercept TLS anyway, which is why every platform's check
/// (NetworkManager, Android, Apple) uses plain HTTP.
public struct ConnectivityCheck: Sendable, Hashable {
    /// The probe URL, `http://host[:port]/path`.
    public let url: String
    /// The body a `200` must start with; nil or empty expects `204 No Content` (or an empty `200`).
    public var expectedResponse: String?
    /// How often to re-check while `full`.
    public var interval: Duration
    /// Bound on one check: resolving, connecting, sending and reading.
    public var timeout: Duration
    /// First re-check delay while `limited` or `portal`.
    public var initialBackoff: Duration
    /// Longest re-check delay while `limited` or `portal`.
    public var maximumBackoff: Duration

    /// The parsed URL.
    let target: ProbeURL

    /// The shortest `interval`: NetworkManager takes whole seconds, and a shorter one turns the
    /// check into a flood against its server.
    public static let minimumInterval = Duration.seconds(1)

    /// Creates a check; throws `ReachabilityError` (`.invalidConfiguration`) for a URL that is
    /// not plain `http://`, for an interval under `minimumInterval`, or for a timeout or back-off
    /// that is not positive.
    public init(url: String, expectedResponse: String? = nil, interval: Duration = .seconds(300),
                timeout: Duration = .seconds(5), initialBackoff: Duration = .seconds(1),
                maximumBackoff: Duration = .seconds(30)) throws(ReachabilityError) {
        target = try ProbeURL(parsing: url)
        guard interval >= Self.minimumInterval else {
            throw ReachabilityError(.invalidConfiguration,
                                    "connectivity check: the interval must be at least 1 second (NetworkManager takes whole seconds), got \(interval)")
        }
        guard interval > .zero, timeout > .zero, initialBackoff > .zero, maximumBackoff >= initialBackoff else {
            throw ReachabilityError(.invalidConfiguration,
                                    "connectivity check: interval, timeout and back-off must be positive")
        }
        if let expectedResponse, expectedResponse.utf8.count > ProbeResponseParser.maximumExpectedLength {
            throw ReachabilityError(.invalidConfiguration,
                                    "connectivity check: the expected response is longer than \(ProbeResponseParser.maximumExpectedLength) bytes")
        }
        self.url = url
        self.expectedResponse = expectedResponse
        self.interval = interval
        self.timeout = timeout
        self.initialBackoff = initialBackoff
        self.maximumBackoff = maximumBackoff
    }

    /// The expected body as bytes; empty expects 204.
    var expectedBody: [UInt8] { Array((expectedResponse ?? "").utf8) }

    public static func == (a: ConnectivityCheck, b: ConnectivityCheck) -> Bool {
        a.url == b.url && a.expectedResponse == b.expectedResponse && a.interval == b.interval
            && a.timeout == b.timeout && a.initialBackoff == b.initialBackoff && a.maximumBackoff == b.maximumBackoff
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(url)
        hasher.combine(expectedResponse)
        hasher.combine(interval)
    }
}

/// What the last connectivity check saw, for `status --explain`: not part of a path's identity
/// (a repeated check with the same answer is not an update).
public struct ConnectivityEvidence: Sendable, Hashable, Codable {
    /// Who answered.
    public enum Source: String, Sendable, Hashable, Codable {
        /// The monitor's own `ConnectivityCheck`.
        case check
        /// NetworkManager's connectivity check, read over D-Bus when no check of our own is
        /// configured (`url` is then empty).
        case networkManager = "NetworkManager"
    }

    /// The probe URL; empty for NetworkManager's answer.
    public var url: String
    /// When the answer below was obtained; nil while the first check runs.
    public var time: Date?
    /// What happened, e.g. `HTTP 204 from 10.77.9.1:80 via enp3s0 (10.77.1.2) in 3 ms`,
    /// `timed out after 5 s connecting to 10.77.9.1:80`, `checking`,
    /// `NetworkManager: Ip4Connectivity=portal on wlp2s0`.
    public var answer: String
    /// Who answered.
    public var source: Source

    /// Creates evidence.
    public init(url: String, time: Date?, answer: String, source: Source = .check) {
        self.url = url
        self.time = time
        self.answer = answer
        self.source = source
    }
}

/// A plain `http://` URL, split for the probe. Pure and strict: anything that could smuggle
/// bytes into the request line or Host header is rejected.
struct ProbeURL: Sendable, Hashable {
    /// Host name or IP literal (IPv6 without brackets).
    var host: String
    var port: UInt16
    /// Path and query, starting with `/`.
    var pathAndQuery: String
    /// The Host header value (`host`, `host:port`, `[v6]:port`).
    var hostHeader: String

    init(parsing text: String) throws(ReachabilityError) {
        func invalid(_ why: String) -> ReachabilityError {
            ReachabilityError(.invalidConfiguration, "connectivity URL '\(text)': \(why)")
        }
        guard text.utf8.count <= 2048 else { throw invalid("longer than 2048 bytes") }
        guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw invalid("spaces, control or non-ASCII characters are not allowed")
        }
        let lower = text.lowercased()
        if lower.hasPrefix("https://") {
            throw invalid("https is not supported: the check speaks plain HTTP (a captive portal cannot answer over TLS, so every platform's check uses http://)")
        }
        guard lower.hasPrefix("http://") else { throw invalid("expected an http:// URL") }
        var rest = Substring(text.dropFirst("http://".count))
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let slash = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<slash]
        var path = String(rest[slash...])
        if path.isEmpty { path = "/" } else if path.hasPrefix("?") { path = "/" + path }
        guard !authority.contains("@") else { throw invalid("user information is not allowed") }
        var hostPart = authority
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw invalid("unterminated IPv6 literal") }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw invalid("unexpected text after the IPv6 literal") }
                portText = after.dropFirst()
            }
            guard IPAddress.parse(String(hostPart))?.count == 16 else { throw invalid("invalid IPv6 literal") }
        } else if let colon = authority.lastIndex(of: ":") {
            hostPart = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        }
        guard !hostPart.isEmpty, hostPart.utf8.count <= 253 else { throw invalid("missing or overlong host") }
        if !authority.hasPrefix("[") {
            let allowed = hostPart.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "." || $0 == "_"
            }
            guard allowed else { throw invalid("invalid host name") }
        }
        var port: UInt16 = 80
        if let portText {
            guard let value = HTTPWire.port(portText) else {
                throw invalid("invalid port")
            }
            port = value
        }
        host = String(hostPart)
        self.port = port
        pathAndQuery = path
        let bracketed = authority.hasPrefix("[") ? "[\(host)]" : host
        hostHeader = port == 80 ? bracketed : "\(bracketed):\(port)"
    }

    /// The request, `Connection: close` so the end of the body is the end of the stream.
    func request() -> [UInt8] {
        Array("""
            GET \(pathAndQuery) HTTP/1.1\r
            Host: \(hostHeader)\r
            User-Agent: reachability connectivity check\r
            Accept: */*\r
            Cache-Control: no-cache\r
            Connection: close\r
            \r

            """.utf8)
    }

    /// `Location` resolved against this URL; nil unless it is an http(s) URL or a path (a hostile
    /// portal's `javascript:` or `file:` is not shown as a place to log in).
    func resolve(location: String) -> String? {
        guard !location.isEmpty, location.utf8.count <= 2048,
              location.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else { return nil }
        let lower = location.lowercased()
        if lower.hasPrefix("http://") || lower.hasPrefix("https://") { return location }
        if location.hasPrefix("//") { return "http:" + location }
        let base = "http://\(hostHeader)"
        if location.hasPrefix("/") { return base + location }
        if location.contains(":") { return nil }
        let directory = pathAndQuery.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? "/"
        let prefix = directory.hasSuffix("/") ? directory : String(directory[...(directory.lastIndex(of: "/") ?? directory.startIndex)])
        return base + prefix + location
    }
}
