/// Links and addresses as the kernel last described them. Routes are deliberately not kept:
/// the kernel flushes IPv4 routes on link down without RTM_DELROUTE, and a million-route table
/// costs hundreds of megabytes; paths come from RTM_GETROUTE lookups instead.
struct LinkTable: Equatable, Sendable {
    private(set) var links: [Int32: LinkInfo] = [:]
    private(set) var addresses: [AddressKey: AddressInfo] = [:]
    /// Bumped on every link or address change (not on route changes).
    private(set) var generation = 0

    /// Applies one message; returns whether anything the path depends on may have changed.
    mutating func apply(_ message: RTNetlinkMessage) -> Bool {
        switch message {
        case .link(let link, deleted: true):
            guard links.removeValue(forKey: link.index) != nil else { return false }
            addresses = addresses.filter { $0.key.index != link.index }
        case .link(let link, deleted: false):
            guard links[link.index] != link else { return false }
            links[link.index] = link
        case .address(let address, deleted: true):
            guard addresses.removeValue(forKey: address.key) != nil else { return false }
        case .address(let address, deleted: false):
            guard addresses[address.key] != address else { return false }
            addresses[address.key] = address
        case .routingChanged:
            return true
        case .route, .done, .error, .ignored:
            return false
        }
        generation += 1
        return true
    }

    /// Usable addresses of one link, IPv4 first, in presentation form.
    func usableAddresses(of index: Int32) -> [AddressInfo] {
        addresses.values.filter { $0.index == index && $0.isUsable }
            .sorted { a, b in
                if a.family != b.family { return a.family == .ipv4 }
                return a.address.lexicographicallyPrecedes(b.address)
            }
    }
}

/// The kernel's answer to "how would a packet to the probe destination leave?"
enum LookupResult: Equatable, Sendable {
    case route(RouteInfo)
    /// A negative errno, e.g. -ENETUNREACH when there is no route.
    case failed(Int32)
}

/// Turns links, addresses, classifications and lookup answers into a `NetworkPath`. Pure.
enum PathEvaluator {
    static func interfaces(table: LinkTable, classifications: [Int32: Classification]) -> [NetworkInterface] {
        table.links.values
            .filter { !$0.isLoopback }
            .sorted { $0.index < $1.index }
            .map { link in
                let classification = classifications[link.index]
                    ?? Classification(type: .other, reason: "not yet classified")
                return NetworkInterface(
                    name: link.name, index: link.index, type: classification.type,
                    classificationReason: classification.reason, isUp: link.isUp, hasCarrier: link.hasCarrier,
                    addresses: table.usableAddresses(of: link.index).map(\.presentation))
            }
    }

    static func evaluate(table: LinkTable, classifications: [Int32: Classification],
                         lookups: [(AddressFamily, LookupResult)]) -> NetworkPath {
        evaluate(table: table, interfaces: interfaces(table: table, classifications: classifications), lookups: lookups)
    }

    /// Evaluates with interfaces already derived from `table`.
    static func evaluate(table: LinkTable, interfaces: [NetworkInterface],
                         lookups: [(AddressFamily, LookupResult)]) -> NetworkPath {
        var routes: [PathRoute] = []
        var blocked: NetworkPath.UnsatisfiedReason?
        for (family, lookup) in lookups {
            guard case .route(let route) = lookup, route.type == RTNetlink.rtnUnicast,
                  let index = route.outputInterface, let link = table.links[index], !link.isLoopback
            else { continue }
            // The kernel keeps routing into a link that lost carrier (routes only get the
            // `linkdown` flag), so traffic would be lost: report the missing piece instead.
            guard link.isUp else { blocked = blocked ?? .noInterfaceUp; continue }
            guard link.hasCarrier, !route.isLinkDown else { blocked = .noCarrier; continue }
            let hasAddress = table.usableAddresses(of: index).contains { $0.family == family }
            guard hasAddress else {
                if blocked != .noCarrier { blocked = .noAddress }
                continue
            }
            routes.append(PathRoute(family: family, interfaceName: link.name, interfaceIndex: index,
                                    gateway: route.gateway.flatMap(IPAddress.format),
                                    sourceAddress: route.preferredSource.flatMap(IPAddress.format)))
        }
        if let primary = routes.first, let interface = interfaces.first(where: { $0.index == primary.interfaceIndex }) {
            return NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: interface,
                               routes: routes, interfaces: interfaces)
        }
        return .unsatisfied(reason(interfaces: interfaces, blocked: blocked), interfaces: interfaces)
    }

    /// The most basic missing piece among all interfaces, unless the route itself names one.
    static func reason(interfaces: [NetworkInterface], blocked: NetworkPath.UnsatisfiedReason?) -> NetworkPath.UnsatisfiedReason {
        let up = interfaces.filter(\.isUp)
        if up.isEmpty { return .noInterfaceUp }
        if let blocked, blocked != .noInterfaceUp { return blocked }
        if !up.contains(where: \.hasCarrier) { return .noCarrier }
        if !up.contains(where: { $0.hasCarrier && !$0.addresses.isEmpty }) { return .noAddress }
        return .noRoute
    }
}
