/// How an interface reaches the network, decided from kernel facts (see `InterfaceClassifier`).
public enum InterfaceType: String, Sendable, Hashable, Codable, CaseIterable {
    /// Ethernet and Ethernet-like links (bridges over them, USB Ethernet adapters).
    case wired
    /// 802.11 wireless.
    case wifi
    /// Cellular modems and USB-tethered phones; treated as expensive.
    case cellular
    /// The loopback interface.
    case loopback
    /// Tunnels, VPNs and virtual links without a better clue.
    case other
}

/// One network interface as the monitor sees it.
public struct NetworkInterface: Sendable, Hashable, Codable {
    /// Kernel interface name, e.g. `wlp2s0`.
    public var name: String
    /// Kernel interface index.
    public var index: Int32
    /// The classified type.
    public var type: InterfaceType
    /// Why `type` was chosen, e.g. `uevent DEVTYPE=wlan`.
    public var classificationReason: String
    /// Whether the interface is administratively up (IFF_UP).
    public var isUp: Bool
    /// Whether the interface has carrier (IFF_LOWER_UP).
    public var hasCarrier: Bool
    /// Usable (non-tentative) IPv4 and IPv6 addresses, in presentation form.
    public var addresses: [String]
    /// Whether traffic through it costs money or battery: cellular-like, or metered by
    /// NetworkManager (`Metered` yes or guess-yes: a phone's hotspot, a connection the user marked),
    /// unless a classification override decides (see `costReason`).
    public var isExpensive: Bool
    /// Why `isExpensive` is what it is, e.g. `NetworkManager: Metered=guess-yes (DHCP ANDROID_METERED)`.
    public var costReason: String
    /// NetworkManager's per-device `Metered`, when NetworkManager manages the interface.
    public var metered: Metered?
    /// ModemManager's view of the modem behind a cellular interface.
    public var cellular: CellularStatus?

    /// Whether traffic could leave through this interface: up, with carrier and an address.
    public var isUsable: Bool { isUp && hasCarrier && !addresses.isEmpty }

    /// Whether the modem behind it is registered on a visited network (ModemManager).
    public var isRoaming: Bool { cellular?.isRoaming ?? false }

    /// Whether the user asked to save data on it: NetworkManager's `Metered=yes`, set on the
    /// connection (GNOME's "Metered connection: has data limits"), Linux's nearest to Apple's Low
    /// Data Mode, which `NWPath.isConstrained` reports. A classification override that says the
    /// interface is not expensive clears it, as it does the cost.
    public var isConstrained: Bool { metered == .yes && isExpensive }

    /// Creates an interface description; without `isExpensive`, cellular interfaces are the
    /// expensive ones.
    public init(name: String, index: Int32, type: InterfaceType, classificationReason: String,
                isUp: Bool, hasCarrier: Bool, addresses: [String], isExpensive: Bool? = nil,
                costReason: String? = nil, metered: Metered? = nil, cellular: CellularStatus? = nil) {
        self.name = name
        self.index = index
        self.type = type
        self.classificationReason = classificationReason
        self.isUp = isUp
        self.hasCarrier = hasCarrier
        self.addresses = addresses
        self.isExpensive = isExpensive ?? (type == .cellular)
        self.costReason = costReason ?? (type == .cellular ? "cellular-like" : "not cellular-like")
        self.metered = metered
        self.cellular = cellular
    }
}

/// The route the kernel would use for one address family, from an RTM_GETROUTE lookup.
public struct PathRoute: Sendable, Hashable, Codable {
    /// `ipv4` or `ipv6`.
    public var family: AddressFamily
    /// Output interface name.
    public var interfaceName: String
    /// Output interface index.
    public var interfaceIndex: Int32
    /// Next-hop gateway, nil for on-link routes.
    public var gateway: String?
    /// Preferred source address the kernel picked.
    public var sourceAddress: String?

    /// Creates a route description.
    public init(family: AddressFamily, interfaceName: String, interfaceIndex: Int32,
                gateway: String?, sourceAddress: String?) {
        self.family = family
        self.interfaceName = interfaceName
        self.interfaceIndex = interfaceIndex
        self.gateway = gateway
        self.sourceAddress = sourceAddress
    }
}

/// An IP address family.
public enum AddressFamily: String, Sendable, Hashable, Codable {
    /// IPv4.
    case ipv4
    /// IPv6.
    case ipv6
}

/// The current network path, shaped like Network.framework's `NWPath`.
public struct NetworkPath: Sendable, Hashable, Codable {
    /// Whether traffic can reach beyond this host.
    public enum Status: String, Sendable, Hashable, Codable {
        /// A usable route exists.
        case satisfied
        /// No usable route exists; see `unsatisfiedReason`.
        case unsatisfied
    }

    /// Why a path is unsatisfied, from the most basic missing piece up.
    public enum UnsatisfiedReason: String, Sendable, Hashable, Codable {
        /// No interface other than loopback is administratively up.
        case noInterfaceUp = "no interface up"
        /// Interfaces are up but none has carrier.
        case noCarrier = "no carrier"
        /// Interfaces have carrier but none has a usable address.
        case noAddress = "no address"
        /// Addresses exist but the kernel has no route to the outside.
        case noRoute = "no route"
    }

    /// The summary connection, like Reachability.swift's `Connection`.
    public enum Connection: String, Sendable, Hashable, Codable {
        /// Primary path over a wired interface.
        case wired
        /// Primary path over wifi.
        case wifi
        /// Primary path over a cellular-like interface.
        case cellular
        /// No path (named to avoid colliding with `Optional.none`).
        case unavailable
    }

    /// Satisfied or not.
    public var status: Status
    /// Set when `status` is `.unsatisfied`.
    public var unsatisfiedReason: UnsatisfiedReason?
    /// The interface the default traffic leaves through (IPv4's if any, else IPv6's).
    public var primaryInterface: NetworkInterface?
    /// Per-family routes the kernel resolved; empty when unsatisfied.
    public var routes: [PathRoute]
    /// The usable interfaces (up, carrier, address), sorted by index; every interface except
    /// loopback when the monitor was configured with `includesAllInterfaces`.
    public var interfaces: [NetworkInterface]
    /// Whether the Internet answers, from the configured `ConnectivityCheck`; `unknown` without one.
    public var connectivity: Connectivity
    /// Where to log in when `connectivity` is `portal`.
    public var portalURL: String?
    /// The last check's answer and time; nil when no check is configured. Not part of equality:
    /// a periodic check with the same answer is not a new path.
    public var connectivityEvidence: ConnectivityEvidence?
    /// Which system services (NetworkManager, ModemManager) contributed facts, and why not when
    /// they did not. Evidence, not part of equality: what they said is in the interfaces.
    public var factSources: [FactSource] = []

    /// Creates a path.
    public init(status: Status, unsatisfiedReason: UnsatisfiedReason?, primaryInterface: NetworkInterface?,
                routes: [PathRoute], interfaces: [NetworkInterface], connectivity: Connectivity = .unknown,
                portalURL: String? = nil, connectivityEvidence: ConnectivityEvidence? = nil) {
        self.status = status
        self.unsatisfiedReason = unsatisfiedReason
        self.primaryInterface = primaryInterface
        self.routes = routes
        self.interfaces = interfaces
        self.connectivity = connectivity
        self.portalURL = portalURL
        self.connectivityEvidence = connectivityEvidence
    }

    /// Equal when everything but `connectivityEvidence` is.
    public static func == (a: NetworkPath, b: NetworkPath) -> Bool {
        a.status == b.status && a.unsatisfiedReason == b.unsatisfiedReason && a.primaryInterface == b.primaryInterface
            && a.routes == b.routes && a.interfaces == b.interfaces && a.connectivity == b.connectivity
            && a.portalURL == b.portalURL && (a.connectivityEvidence == nil) == (b.connectivityEvidence == nil)
    }

    /// Hashes what `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(status)
        hasher.combine(unsatisfiedReason)
        hasher.combine(primaryInterface)
        hasher.combine(routes)
        hasher.combine(interfaces)
        hasher.combine(connectivity)
        hasher.combine(portalURL)
        hasher.combine(connectivityEvidence == nil)
    }

    /// Whether a connectivity check is configured for this path's monitor.
    public var isConnectivityChecked: Bool { connectivityEvidence != nil }

    /// An unsatisfied path with the given reason and no routes.
    public static func unsatisfied(_ reason: UnsatisfiedReason, interfaces: [NetworkInterface] = []) -> NetworkPath {
        NetworkPath(status: .unsatisfied, unsatisfiedReason: reason, primaryInterface: nil, routes: [],
                    interfaces: interfaces)
    }

    /// Whether the path is satisfied.
    public var isSatisfied: Bool { status == .satisfied }

    /// Whether the path costs money or battery: an interface a route leaves through is expensive
    /// (cellular-like, or metered per NetworkManager), or the link carrying a tunnel is.
    public var isExpensive: Bool {
        guard isSatisfied else { return false }
        return carrier?.isExpensive == true || routeInterfaces.contains(where: \.isExpensive)
    }

    /// Whether the path leaves through a modem registered on a visited network (ModemManager).
    public var isRoaming: Bool {
        guard isSatisfied else { return false }
        return carrier?.isRoaming == true || routeInterfaces.contains(where: \.isRoaming)
    }

    /// Whether the path leaves through an interface the user asked to save data on
    /// (`NetworkInterface.isConstrained`), as `NWPath.isConstrained` says of Low Data Mode.
    public var isConstrained: Bool {
        guard isSatisfied else { return false }
        return carrier?.isConstrained == true || routeInterfaces.contains(where: \.isConstrained)
    }

    /// The primary interface's type; for a tunnel, the type of the physical link likely carrying it
    /// (the first usable non-virtual interface), since a VPN over wifi is still wifi to the user.
    public var effectiveType: InterfaceType? {
        guard isSatisfied, let primary = primaryInterface else { return nil }
        guard primary.type == .other else { return primary.type }
        return carrier?.type ?? .other
    }

    /// For a tunnel primary, the physical link likely carrying it; else the primary interface.
    private var carrier: NetworkInterface? {
        guard isSatisfied, let primary = primaryInterface else { return nil }
        guard primary.type == .other else { return primary }
        return availableInterfaces.first { $0.type != .other && $0.type != .loopback }
    }

    /// The interfaces the per-family routes leave through.
    private var routeInterfaces: [NetworkInterface] {
        routes.compactMap { route in interfaces.first { $0.index == route.interfaceIndex } }
    }

    /// Whether an IPv4 route exists.
    public var supportsIPv4: Bool { routes.contains { $0.family == .ipv4 } }
    /// Whether an IPv6 route exists.
    public var supportsIPv6: Bool { routes.contains { $0.family == .ipv6 } }

    /// Distinct next-hop gateways, IPv4 first.
    public var gateways: [String] {
        var seen: [String] = []
        for gateway in routes.compactMap(\.gateway) where !seen.contains(gateway) { seen.append(gateway) }
        return seen
    }

    /// Interfaces usable right now (up, carrier, address).
    public var availableInterfaces: [NetworkInterface] { interfaces.filter(\.isUsable) }

    /// The route of the primary family (IPv4 when present).
    public var primaryRoute: PathRoute? { routes.first { $0.family == .ipv4 } ?? routes.first }

    /// The summary connection.
    public var connection: Connection {
        guard let type = effectiveType else { return .unavailable }
        switch type {
        case .wifi: return .wifi
        case .cellular: return .cellular
        case .wired, .loopback, .other: return .wired
        }
    }

    /// Whether `type` (or any type, for nil) qualifies this path.
    public func uses(_ type: InterfaceType) -> Bool {
        isSatisfied && primaryInterface?.type == type
    }
}
