import LinuxReachability
import ReachabilityBase

/// What `reachability wait` waits for: its conditions, parsed once from the command line, and the
/// pure decision over a path snapshot of which of them are still missing and why.
///
/// Conditions combine with AND; `--any` turns the `--interface` list into OR. With no condition
/// at all, a routable default path (any interface, either family) is what "online" means.
struct WaitPlan: Sendable, Equatable {
    /// How far one interface must have come (`--interface NAME:STATE`), in the order links get there.
    enum LinkState: String, Sendable, CaseIterable, Comparable {
        /// Up, with carrier.
        case carrier
        /// Carrier and an address of any scope (a link-local one counts).
        case address
        /// Carrier and an address that can reach beyond the link (not link-local), as networkd's
        /// "routable" operational state means.
        case routable

        static func < (a: LinkState, b: LinkState) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    /// One `--interface NAME[:STATE]`.
    struct InterfaceCondition: Sendable, Equatable, CustomStringConvertible {
        /// The kernel's name of the interface.
        var name: String
        /// How far it must have come.
        var state: LinkState

        /// Parses `NAME` or `NAME:STATE`; nil with the reason for a bad one.
        static func parse(_ text: String) -> Result<InterfaceCondition, WaitPlan.ValueError> {
            let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            guard NetworkInterface.isValidName(name) else {
                return .failure(.init("expected an interface name (1-15 visible characters, no '/' or ':'), optionally followed by :carrier, :address or :routable"))
            }
            guard parts.count == 2 else { return .success(InterfaceCondition(name: name, state: .routable)) }
            guard let state = LinkState(rawValue: parts[1].lowercased()) else {
                return .failure(.init("unknown state '\(parts[1])' (expected carrier, address or routable)"))
            }
            return .success(InterfaceCondition(name: name, state: state))
        }

        var description: String { "\(name):\(state.rawValue)" }
    }

    /// Why a value was refused, for a usage error.
    struct ValueError: Error, Equatable {
        var reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// `--interface`, in command-line order.
    var interfaces: [InterfaceCondition] = []
    /// `--any`: one of `interfaces` is enough.
    var needsAnyInterface = false
    /// `--ipv4` / `--ipv6`: a default route of each of these families; interface addresses are
    /// then counted only of these families.
    var families: [AddressFamily] = []
    /// `--dns`: a resolver of the primary path must answer a query.
    var checksDNS = false
    /// `--dns-name`: the name asked for; nil asks for the connectivity check's host when one is
    /// configured, else the root's NS records.
    var dnsName: String?
    /// `--ignore` globs: a route through a matching interface does not count.
    var ignored: [String] = []
    /// `--require`, `--not-expensive`, `--not-roaming`, `--host`.
    var requirement = PathRequirement()

    /// Whether the default-route condition applies: asked for by family, or implied when nothing
    /// else names what to wait for.
    var needsDefaultRoute: Bool {
        !families.isEmpty || (interfaces.isEmpty && requirement.host == nil)
    }

    /// Whether `--require`/`--not-expensive`/`--not-roaming` add anything to a routable path.
    var hasPathRequirement: Bool {
        requirement.host == nil
            && (![.any, .internet].contains(requirement.connection) || !requirement.allowsExpensive || !requirement.allowsRoaming)
    }

    /// What a DNS check found so far.
    enum DNSState: Sendable, Equatable {
        /// Not asked yet (the path is not ready, or the first query is on its way).
        case notAsked
        /// resolv.conf names no server.
        case noResolver(String)
        /// This server answered.
        case answered(server: String)
        /// No server answered: each with what went wrong.
        case unanswered([String])
    }

    /// The facts the decision reads: the default path, the route to `--host`, the DNS check.
    struct Facts: Sendable, Equatable {
        var path: NetworkPath
        var hostPath: HostPath?
        var dns: DNSState = .notAsked
    }

    /// What is still missing, one phrase per unmet condition, in the order the conditions are
    /// listed in the help; empty when the machine is online as asked.
    func missing(_ facts: Facts) -> [String] {
        var missing: [String] = []
        let interfaceGaps = interfaces.map { gap(for: $0, in: facts.path) }
        if needsAnyInterface {
            if !interfaceGaps.isEmpty, !interfaceGaps.contains(where: { $0 == nil }) {
                missing.append("none of the interfaces: " + interfaceGaps.compactMap { $0 }.joined(separator: ", "))
            }
        } else {
            missing += interfaceGaps.compactMap { $0 }
        }
        if needsDefaultRoute { missing += routeGaps(in: facts.path) }
        if hasPathRequirement {
            // The kind and cost of the path; the Internet is its own line below.
            var shape = requirement
            if shape.connection == .internet { shape.connection = .any }
            if !shape.isMet(by: facts.path) { missing.append("path: not \(shape) (now \(PathText.summary(facts.path)))") }
        }
        if requirement.connection == .internet, requirement.host == nil, facts.path.connectivity != .full {
            missing.append("Internet: the connectivity check reads \(facts.path.connectivity.rawValue)")
        }
        if let host = requirement.host {
            if let gap = hostGap(host, facts.hostPath) { missing.append(gap) }
        }
        if checksDNS, let gap = dnsGap(facts.dns) { missing.append(gap) }
        return missing
    }

    /// `eth1: no carrier`, or nil when the interface is as far as asked.
    func gap(for condition: InterfaceCondition, in path: NetworkPath) -> String? {
        let name = PathText.escaped(condition.name)
        guard let interface = path.interfaces.first(where: { $0.name == condition.name }) else {
            return "\(name): no such interface yet"
        }
        guard interface.isUp else { return "\(name): down" }
        guard interface.hasCarrier else { return "\(name): no carrier" }
        if condition.state == .carrier { return nil }
        let wanted = families.isEmpty ? [nil] : families.map { Optional($0) }
        for family in wanted {
            let label = family.map { $0 == .ipv4 ? "IPv4 " : "IPv6 " } ?? ""
            if interface.addresses(of: family, routableOnly: false).isEmpty {
                return "\(name): no \(label)address yet"
            }
            if condition.state == .routable, interface.addresses(of: family, routableOnly: true).isEmpty {
                return "\(name): only a link-local \(label)address"
            }
        }
        return nil
    }

    /// `no default route (no carrier)`, `no IPv6 default route`: empty when the routes are there.
    func routeGaps(in path: NetworkPath) -> [String] {
        let counted = path.isSatisfied ? path.routes.filter { route in
            !ignored.contains { NetworkInterface.name(route.interfaceName, matchesGlob: $0) }
        } : []
        let ignoredOnly = path.isSatisfied && counted.isEmpty && !path.routes.isEmpty
        // Why there is none, when it is more than "no route": " (no carrier)".
        func why() -> String {
            if ignoredOnly {
                return " (leaves only through ignored " + path.routes.map { PathText.escaped($0.interfaceName) }.joined(separator: ", ") + ")"
            }
            guard !path.isSatisfied, let reason = path.unsatisfiedReason, reason != .noRoute else { return "" }
            return " (\(reason.rawValue))"
        }
        if families.isEmpty {
            return counted.isEmpty ? ["no default route\(why())"] : []
        }
        return families.compactMap { family in
            guard !counted.contains(where: { $0.family == family }) else { return nil }
            return "no \(family == .ipv4 ? "IPv4" : "IPv6") default route\(why())"
        }
    }

    private func hostGap(_ host: String, _ hostPath: HostPath?) -> String? {
        let name = PathText.escaped(host)
        guard let hostPath else { return "\(name): no answer yet" }
        if let failure = hostPath.resolutionFailure { return "\(name): cannot resolve (\(TerminalText.escaped(failure)))" }
        guard let path = hostPath.path else { return "\(name): not resolved yet" }
        guard requirement.isMet(by: path) else {
            guard !path.isSatisfied else { return "\(name): the route is not \(requirement)" }
            let reason = path.unsatisfiedReason.flatMap { $0 == .noRoute ? nil : " (\($0.rawValue))" } ?? ""
            return "\(name): no route\(reason)"
        }
        return nil
    }

    private func dnsGap(_ state: DNSState) -> String? {
        switch state {
        case .answered: return nil
        case .notAsked: return "DNS: not asked yet (waiting for a route)"
        case .noResolver(let why): return "DNS: \(why)"
        case .unanswered(let servers): return "DNS: " + servers.joined(separator: ", ")
        }
    }
}
