/// How far a link is from carrying traffic; only non-loopback links have a level above `.down`.
enum LinkReadiness: Int, Comparable, Sendable, CaseIterable {
    /// Absent, administratively down, or loopback.
    case down
    /// Up, no carrier.
    case up
    /// Up with carrier, no usable address.
    case carrier
    /// Up, carrier and a usable address: `NetworkInterface.isUsable`.
    case usable

    static func < (a: LinkReadiness, b: LinkReadiness) -> Bool { a.rawValue < b.rawValue }
}

/// What one message changed, from the path's point of view.
enum TableChange: Comparable, Sendable {
    /// Nothing the monitor keeps.
    case none
    /// A detail only the all-interfaces view shows (a down link appeared, a link-local address went).
    case detail
    /// Something the path depends on: a link's readiness, or a usable link's name, kind or addresses.
    case path
}

/// Links and addresses as the kernel last described them. Routes are deliberately not kept:
/// the kernel flushes IPv4 routes on link down without RTM_DELROUTE, and a million-route table
/// costs hundreds of megabytes; paths come from RTM_GETROUTE lookups instead.
///
/// Everything the path needs is kept incrementally, per changed link, so an evaluation costs
/// the same with 5 interfaces or 5,000 (a container host creating veth pairs all day).
struct LinkTable: Equatable, Sendable {
    private(set) var links: [Int32: LinkInfo] = [:]
    /// Every address the kernel reported, per link (a handful each).
    private(set) var addresses: [Int32: [AddressInfo]] = [:]
    /// Links that are up, with carrier and a usable address.
    private(set) var usableLinks: Set<Int32> = []
    /// How many non-loopback links are at each readiness level (indexed by raw value).
    private(set) var readinessCounts = [Int](repeating: 0, count: LinkReadiness.allCases.count)
    /// Bumped on every change (`.detail` or `.path`).
    private(set) var generation = 0
    /// Bumped on `.path` changes only.
    private(set) var pathGeneration = 0

    /// Applies one message; says whether the path or only the detail view may have changed.
    /// Route and rule messages are left to the caller (they matter by destination, not by link).
    mutating func apply(_ message: RTNetlinkMessage) -> TableChange {
        switch message {
        case .link(let link, let deleted):
            let before = summary(of: link.index)
            if deleted {
                guard links.removeValue(forKey: link.index) != nil else { return .none }
                addresses[link.index] = nil
            } else {
                guard links[link.index] != link else { return .none }
                links[link.index] = link
            }
            return record(link.index, before: before)
        case .address(let address, let deleted):
            let before = summary(of: address.index)
            var list = addresses[address.index] ?? []
            let position = list.firstIndex { $0.key == address.key }
            if deleted {
                guard let position else { return .none }
                list.remove(at: position)
            } else if let position {
                guard list[position] != address else { return .none }
                list[position] = address
            } else {
                list.append(address)
            }
            addresses[address.index] = list.isEmpty ? nil : list
            return record(address.index, before: before)
        case .routingChanged, .route, .done, .error, .ignored:
            return .none
        }
    }

    /// What the path sees of one link: its readiness, and for a usable link what is listed.
    private struct Summary: Equatable {
        var readiness: LinkReadiness
        var listed: LinkInfo?
        var usableAddresses: [AddressInfo]
    }

    private func summary(of index: Int32) -> Summary {
        let readiness = self.readiness(of: index)
        guard readiness == .usable else { return Summary(readiness: readiness, listed: nil, usableAddresses: []) }
        var link = links[index]
        link?.flags &= RTNetlink.iffUp | RTNetlink.iffLowerUp  // IFF_RUNNING, PROMISC... are not shown
        return Summary(readiness: readiness, listed: link, usableAddresses: usableAddresses(of: index))
    }

    private mutating func record(_ index: Int32, before: Summary) -> TableChange {
        generation += 1
        let after = summary(of: index)
        if before.readiness != after.readiness {
            readinessCounts[before.readiness.rawValue] -= before.readiness == .down ? 0 : 1
            readinessCounts[after.readiness.rawValue] += after.readiness == .down ? 0 : 1
            if after.readiness == .usable { usableLinks.insert(index) } else { usableLinks.remove(index) }
        }
        guard before != after else { return .detail }
        pathGeneration += 1
        return .path
    }

    func readiness(of index: Int32) -> LinkReadiness {
        guard let link = links[index], !link.isLoopback, link.isUp else { return .down }
        guard link.hasCarrier else { return .up }
        return addresses[index]?.contains(where: \.isUsable) == true ? .usable : .carrier
    }

    /// Whether any non-loopback link is at `level` or above.
    func hasLink(atLeast level: LinkReadiness) -> Bool {
        LinkReadiness.allCases.contains { $0 >= level && $0 != .down && readinessCounts[$0.rawValue] > 0 }
    }

    /// Usable addresses of one link, IPv4 first, in presentation form.
    func usableAddresses(of index: Int32) -> [AddressInfo] {
        (addresses[index] ?? []).filter(\.isUsable)
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
    /// The links a path lists: the usable ones, or every non-loopback link with `all`.
    static func listedLinks(table: LinkTable, all: Bool) -> [LinkInfo] {
        let links = all ? table.links.values.filter { !$0.isLoopback } : table.usableLinks.compactMap { table.links[$0] }
        return links.sorted { $0.index < $1.index }
    }

    static func interfaces(table: LinkTable, classifications: [Int32: Classification], all: Bool = false) -> [NetworkInterface] {
        listedLinks(table: table, all: all).map { link in
            interface(link, table: table, classification: classifications[link.index])
        }
    }

    /// One interface, with its cost decided from `classification` and the services' `facts`.
    static func interface(_ link: LinkInfo, table: LinkTable, classification: Classification?,
                          facts: SystemFacts.Interface? = nil) -> NetworkInterface {
        let classification = classification ?? Classification(type: .other, reason: "not yet classified")
        let cost = InterfaceCost.decide(classification, facts: facts)
        return NetworkInterface(
            name: link.name, index: link.index, type: classification.type,
            classificationReason: classification.reason, isUp: link.isUp, hasCarrier: link.hasCarrier,
            addresses: table.usableAddresses(of: link.index).map(\.presentation),
            isExpensive: cost.isExpensive, costReason: cost.reason, metered: facts?.networkManager?.metered, cellular: facts?.cellular)
    }

    static func evaluate(table: LinkTable, classifications: [Int32: Classification],
                         lookups: [(AddressFamily, LookupResult)], all: Bool = false) -> NetworkPath {
        evaluate(table: table, interfaces: interfaces(table: table, classifications: classifications, all: all),
                 lookups: lookups)
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
        return .unsatisfied(reason(table: table, blocked: blocked), interfaces: interfaces)
    }

    /// The most basic missing piece among all links, unless the route itself names one.
    static func reason(table: LinkTable, blocked: NetworkPath.UnsatisfiedReason?) -> NetworkPath.UnsatisfiedReason {
        if !table.hasLink(atLeast: .up) { return .noInterfaceUp }
        if let blocked, blocked != .noInterfaceUp { return blocked }
        if !table.hasLink(atLeast: .carrier) { return .noCarrier }
        if !table.hasLink(atLeast: .usable) { return .noAddress }
        return .noRoute
    }
}
