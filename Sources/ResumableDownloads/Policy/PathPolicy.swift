import LinuxReachability

/// What about a path matters to a running transfer: when any of it changes, the socket is
/// probably dead or leaving through the wrong interface, so the transfer restarts at once
/// instead of waiting for TCP to notice. Its cost is not part of it: a wifi that turns metered
/// keeps its sockets, and `PathPolicy.mustAbort` stops only the transfers that may not use it.
struct PathKey: Sendable, Hashable {
    var isSatisfied: Bool
    var interfaceName: String?
    var interfaceIndex: Int32?
    var sourceAddress: String?

    init(_ path: NetworkPath?) {
        isSatisfied = path?.isSatisfied ?? true
        interfaceName = path?.primaryInterface?.name
        interfaceIndex = path?.primaryInterface?.index
        sourceAddress = path?.primaryRoute?.sourceAddress
    }
}

/// Which paths a download may use: `DownloadOptions.allowsExpensive`, `allowsRoaming` and
/// `allowsConstrained`.
struct PathAccess: Sendable, Hashable {
    var allowsExpensive: Bool
    var allowsRoaming: Bool
    var allowsConstrained: Bool

    init(allowsExpensive: Bool = true, allowsRoaming: Bool = true, allowsConstrained: Bool = true) {
        self.allowsExpensive = allowsExpensive
        self.allowsRoaming = allowsRoaming
        self.allowsConstrained = allowsConstrained
    }

    init(_ options: DownloadOptions) {
        self.init(allowsExpensive: options.allowsExpensive, allowsRoaming: options.allowsRoaming,
                  allowsConstrained: options.allowsConstrained)
    }

    /// Whether traffic may leave through `path` as routed.
    func permits(_ path: NetworkPath) -> Bool {
        (allowsExpensive || !path.isExpensive) && (allowsRoaming || !path.isRoaming) && (allowsConstrained || !path.isConstrained)
    }

    /// Whether a transfer may be pinned to `interface`.
    func permits(_ interface: NetworkInterface) -> Bool {
        (allowsExpensive || !interface.isExpensive) && (allowsRoaming || !interface.isRoaming)
            && (allowsConstrained || !interface.isConstrained)
    }
}

/// Whether a download may transfer on a path, and through which interface.
enum PathUsability: Sendable, Hashable {
    /// Go; pin to this interface when non-nil.
    case usable(pinnedInterface: String?)
    /// Wait for another path.
    case unusable
    /// The path source has not reported yet; wait quietly.
    case unknown
}

enum PathPolicy {
    /// `path` nil with no source means "assume connected" (no monitor wired in).
    static func usability(of path: NetworkPath?, hasPathSource: Bool, access: PathAccess) -> PathUsability {
        guard let path else { return hasPathSource ? .unknown : .usable(pinnedInterface: nil) }
        guard path.isSatisfied else { return .unusable }
        // Behind a captive portal every request meets the login page: wait (no hammering) until
        // the connectivity check reads full, which is a path update that wakes the waiters.
        // `limited` does not stop a download: the probe server alone may be the one unreachable.
        guard path.connectivity != .portal else { return .unusable }
        // A configured check that has not answered yet (it runs at once after a path change, and
        // answers within milliseconds or its timeout): wait quietly rather than risk fetching a
        // portal's login page into the file.
        guard !(path.isConnectivityChecked && path.connectivity == .unknown) else { return .unknown }
        guard !access.permits(path) else { return .usable(pinnedInterface: nil) }
        // An expensive (cellular-like, metered) or roaming primary the download may not use: use
        // an interface it may use that is up, if any, by pinning to it.
        if let cheap = path.availableInterfaces.first(where: { access.permits($0) && $0.type != .loopback }) {
            return .usable(pinnedInterface: cheap.name)
        }
        return .unusable
    }

    /// Whether a transfer started under `key` (pinned to `pinnedInterface`, if any) must be
    /// aborted now that the path is `path`.
    static func mustAbort(startedUnder key: PathKey, pinnedInterface: String?, access: PathAccess,
                          newPath path: NetworkPath) -> Bool {
        if let pinnedInterface {
            // The pinned interface itself may have become metered or roaming.
            return !path.isSatisfied || !path.availableInterfaces.contains { $0.name == pinnedInterface && access.permits($0) }
        }
        if PathKey(path) != key { return true }
        return usability(of: path, hasPathSource: true, access: access) != .usable(pinnedInterface: nil)
    }
}
