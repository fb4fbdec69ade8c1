/// The path to one host, as `SCNetworkReachabilityCreateWithName` answered on Apple platforms:
/// the kernel's route to the host's address (an `RTM_GETROUTE` lookup, what `ip route get ADDRESS`
/// prints), not the default route.
///
/// A server on the local network, on a link-local address or on this host is reachable without
/// any default route, and a change of the default route that does not move the route to the
/// host leaves its path as it was. `PathMonitor.paths(to:)` yields these.
public struct HostPath: Sendable, Hashable {
    /// The host as asked for: a name, or an IP literal (`10.77.0.1`, `fe80::1%eth0`).
    public var host: String
    /// The addresses the host stands for, in the resolver's order (the literal itself for an IP
    /// literal); empty while a name resolves for the first time or when it does not resolve.
    public var addresses: [String]
    /// Why the name did not resolve (`getaddrinfo`'s words), nil when it did.
    public var resolutionFailure: String?
    /// The route to the host as a path: satisfied over the interface the kernel would use for the
    /// first address that has a usable route (`routes` holds one route per family, the first
    /// usable address of each). Nil until the name has resolved, and when it cannot be.
    ///
    /// `connectivity` is the primary path's check answer when traffic to the host leaves through
    /// the same gateway the check went through; otherwise (a server on the local network, over
    /// another interface or gateway) the check says nothing about it: `unknown`, no evidence.
    public var path: NetworkPath?

    /// Creates a host path.
    public init(host: String, addresses: [String], resolutionFailure: String?, path: NetworkPath?) {
        self.host = host
        self.addresses = addresses
        self.resolutionFailure = resolutionFailure
        self.path = path
    }

    /// Whether traffic to the host can leave now: its name resolved and a usable route leads there.
    public var isReachable: Bool { path?.isSatisfied ?? false }

    /// Whether `text` can be followed: a host name (letters, digits, `-`, `.`, `_`, at most 253
    /// bytes) or an IP literal (brackets and a `%zone` allowed).
    public static func isValidHost(_ text: String) -> Bool { HostWatches.key(for: text) != nil }
}
