extension PathEvaluator {
    /// The kernel's answer for one of a host's addresses.
    struct HostLookup: Sendable {
        var target: HostTarget
        var result: LookupResult
    }

    /// The path to a host from the lookups of its addresses (in the resolver's order). Pure.
    ///
    /// An address is usable when the kernel routes it (`unicast`, or `local` for this host's own
    /// addresses and loopback) over a link that is up, with carrier unless it is loopback, and
    /// with a source address: the kernel's preferred source, a usable address of the family on
    /// the link, or, for a link-local destination, none needed (the kernel takes the link's own).
    /// Blackhole, unreachable and prohibit routes, and failed lookups, are no route.
    static func hostPath(lookups: [HostLookup], table: LinkTable, interfaces: [NetworkInterface],
                         interface: (LinkInfo) -> NetworkInterface) -> NetworkPath {
        var routes: [PathRoute] = []
        var primary: NetworkInterface?
        var blocked: NetworkPath.UnsatisfiedReason?
        for lookup in lookups {
            let family: AddressFamily = lookup.target.address.count == 4 ? .ipv4 : .ipv6
            switch usableRoute(lookup, family: family, table: table) {
            case .success(let (route, link)):
                if primary == nil { primary = interface(link) }
                if !routes.contains(where: { $0.family == family }) { routes.append(route) }
            case .failure(let problem):
                if let reason = problem.reason, blocked == nil || reason == .noCarrier { blocked = reason }
            }
        }
        if let primary {
            return NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: primary, routes: routes,
                               interfaces: interfaces)
        }
        let isOnlyLoopback = !lookups.isEmpty && lookups.allSatisfy { IPAddress.isLoopback($0.target.address) }
        return .unsatisfied(isOnlyLoopback ? (blocked ?? .noRoute) : reason(table: table, blocked: blocked),
                            interfaces: interfaces)
    }

    /// Why an address cannot be reached: nil is "no route" (or a route nothing can leave by).
    struct Blocked: Error {
        var reason: NetworkPath.UnsatisfiedReason?
    }

    private static func usableRoute(_ lookup: HostLookup, family: AddressFamily,
                                    table: LinkTable) -> Result<(PathRoute, LinkInfo), Blocked> {
        guard case .route(let route) = lookup.result, route.type == RTNetlink.rtnUnicast || route.type == RTNetlink.rtnLocal,
              let index = route.outputInterface, let link = table.links[index] else { return .failure(Blocked(reason: nil)) }
        // The kernel answers `local` for loopback even while lo is down, and nothing then arrives.
        guard link.isUp else { return .failure(Blocked(reason: .noInterfaceUp)) }
        let isLoopback = route.type == RTNetlink.rtnLocal || link.isLoopback
        if !isLoopback {
            // Routes into a link without carrier only get the `linkdown` flag: traffic is lost.
            guard link.hasCarrier, !route.isLinkDown else { return .failure(Blocked(reason: .noCarrier)) }
            let hasSource = route.preferredSource != nil
                || table.usableAddresses(of: index).contains { $0.family == family }
                || IPAddress.isLinkLocal(lookup.target.address)
            guard hasSource else { return .failure(Blocked(reason: .noAddress)) }
        }
        let source = route.preferredSource.flatMap(IPAddress.format)
        return .success((PathRoute(family: family, interfaceName: link.name, interfaceIndex: index,
                                   gateway: route.gateway.flatMap(IPAddress.format), sourceAddress: source), link))
    }

    /// `host` with the primary path's connectivity where the check speaks for it: traffic to the
    /// host leaves by the interface and gateway the check went through. A host on the local
    /// network, or behind another gateway, is not behind the check's portal or outage.
    static func withConnectivity(_ host: NetworkPath, from primary: NetworkPath) -> NetworkPath {
        var path = host
        guard primary.isConnectivityChecked else { return path }
        let sharesCheckedRoute = host.isSatisfied && host.routes.first.map { route in
            route.gateway != nil && primary.routes.contains {
                $0.family == route.family && $0.interfaceIndex == route.interfaceIndex && $0.gateway == route.gateway
            }
        } == true
        if sharesCheckedRoute {
            path.connectivity = primary.connectivity
            path.portalURL = primary.portalURL
            path.connectivityEvidence = primary.connectivityEvidence
        } else {
            path.connectivity = host.isSatisfied ? .unknown : .offline
            path.portalURL = nil
            path.connectivityEvidence = nil
        }
        return path
    }
}
