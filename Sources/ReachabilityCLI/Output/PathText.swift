import FoundationEssentials
import LinuxReachability

/// Human-readable renderings of a `NetworkPath`.
enum PathText {
    /// `reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)` or `unreachable: no carrier`.
    ///
    /// Unreachable is the primary path's word (no default route), so with a usable interface it
    /// says what still works: `unreachable: no route beyond the local network (enp3s0, 10.77.0.2)`:
    /// hosts on that network, and this host, are reached without a default route.
    ///
    /// Each route is listed as `[interface, ]source[, gw gateway]`, IPv4 first; the interface is
    /// repeated only when a later route leaves through a different one. Dual-stack therefore reads
    /// `(wlp2s0, 192.0.2.20, gw 192.0.2.1; 2001:db8::20, gw fe80::1)`, so losing IPv6 changes the line.
    static func summary(_ path: NetworkPath) -> String {
        guard path.isSatisfied else {
            var text = "unreachable: \(path.unsatisfiedReason?.rawValue ?? "unknown reason")"
            if let local = localNetworks(path) { text += " beyond the local network (\(local))" }
            return text
        }
        let routes = orderedRoutes(path)
        let firstInterface = routes.first?.interfaceName ?? path.primaryInterface?.name
        var parts: [String] = []
        for (position, route) in routes.enumerated() {
            var fields: [String] = []
            if position == 0 || route.interfaceName != firstInterface { fields.append(escaped(route.interfaceName)) }
            if let source = route.sourceAddress { fields.append(source) }
            if let gateway = route.gateway { fields.append("gw \(gateway)") }
            parts.append(fields.joined(separator: ", "))
        }
        if parts.isEmpty, let name = firstInterface { parts.append(escaped(name)) }
        var text = "reachable via \(path.connection.rawValue)"
        // Interface names may hold ESC and other controls the kernel allows (not whitespace).
        if !parts.isEmpty { text += " (\(TerminalText.escaped(parts.joined(separator: "; "))))" }
        if path.isExpensive { text += " expensive" }
        if path.isRoaming { text += " roaming" }
        if path.isConnectivityChecked { text += ", " + internet(path) }
        return text
    }

    /// `enp3s0, 10.77.0.2; wlan0, 192.168.1.5`: the usable interfaces of a path without a default
    /// route, nil when there are none or the path is missing something more basic.
    static func localNetworks(_ path: NetworkPath) -> String? {
        guard path.unsatisfiedReason == .noRoute else { return nil }
        let usable = path.availableInterfaces.filter { $0.type != .loopback }
        guard !usable.isEmpty else { return nil }
        return TerminalText.escaped(usable.map { ([escaped($0.name)] + $0.addresses.prefix(1)).joined(separator: ", ") }
            .joined(separator: "; "))
    }

    /// `internet: full`, `internet: portal, log in at URL`, `internet: checking`.
    static func internet(_ path: NetworkPath) -> String {
        switch path.connectivity {
        case .unknown: return "internet: checking"
        case .portal: return "internet: portal" + (path.portalURL.map { ", log in at \(escaped($0))" } ?? "")
        case .full, .limited, .offline: return "internet: \(path.connectivity.rawValue)"
        }
    }

    /// `2026-11-30T06:00:00.123Z reachable via ...`: one `watch` line.
    static func line(_ path: NetworkPath, at time: Date) -> String {
        "\(timestamp(time)) \(summary(path))"
    }

    /// ISO 8601 in UTC with milliseconds.
    static func timestamp(_ time: Date) -> String {
        Timestamp.iso8601(time)
    }

    /// The summary followed by the sources of facts, routes and every interface with the
    /// evidence for its type and its cost.
    static func explanation(_ path: NetworkPath) -> String {
        var lines = [summary(path)]
        lines.append("  expensive: \(yesNo(path.isExpensive)), roaming: \(yesNo(path.isRoaming)), ipv4: \(yesNo(path.supportsIPv4)), ipv6: \(yesNo(path.supportsIPv6))")
        if !path.factSources.isEmpty {
            lines.append("sources:")
            lines.append("  kernel: links, addresses and routes (rtnetlink), device facts (sysfs)")
            for source in path.factSources {
                lines.append("  \(source.service.rawValue): \(source.state.rawValue.split(separator: "-").joined(separator: " ")) (\(escaped(source.detail)))")
            }
        }
        lines.append("connectivity:")
        if let evidence = path.connectivityEvidence {
            lines.append("  \(path.isSatisfied ? internet(path) : "internet: none")")
            switch evidence.source {
            case .check: lines.append("  check: GET \(escaped(evidence.url))")
            case .networkManager: lines.append("  source: NetworkManager's own check (no check of ours is configured)")
            }
            let when = evidence.time.map { " at \(timestamp($0))" } ?? ""
            lines.append("  last answer: \(escaped(evidence.answer))\(when)")
        } else {
            lines.append("  not checked (no --connectivity-url, reachability.conf or NetworkManager [connectivity])")
        }
        if localNetworks(path) != nil {
            lines.append("  local network: hosts on it and this host are reachable without a default route ('wait --host NAME' and downloads follow the route to their own server)")
        }
        lines.append("routes:")
        for family in [AddressFamily.ipv4, .ipv6] {
            guard let route = path.routes.first(where: { $0.family == family }) else {
                lines.append("  \(family.rawValue): none")
                continue
            }
            var text = "  \(family.rawValue): dev \(escaped(route.interfaceName)) (index \(route.interfaceIndex))"
            text += route.gateway.map { ", gw \($0)" } ?? ", on-link"
            if let source = route.sourceAddress { text += ", src \(source)" }
            lines.append(text)
        }
        lines.append("interfaces:")
        if path.interfaces.isEmpty { lines.append("  none") }
        for interface in path.interfaces {
            let primary = interface.index == path.primaryInterface?.index ? " [primary]" : ""
            lines.append("  \(escaped(interface.name)) (index \(interface.index)): \(interface.type.rawValue)\(primary)")
            lines.append("    evidence: \(escaped(interface.classificationReason))")
            lines.append("    expensive: \(yesNo(interface.isExpensive)) (\(escaped(interface.costReason)))")
            if let cellular = interface.cellular {
                lines.append("    modem: " + cellularText(cellular) + " (ModemManager)")
            }
            lines.append("    up: \(yesNo(interface.isUp)), carrier: \(yesNo(interface.hasCarrier))")
            let addresses = interface.addresses.isEmpty ? "none" : interface.addresses.joined(separator: ", ")
            lines.append("    addresses: \(addresses)")
        }
        return lines.map(TerminalText.escaped).joined(separator: "\n")
    }

    /// `roaming, lte, operator Example` from ModemManager's facts.
    static func cellularText(_ cellular: CellularStatus) -> String {
        var parts = [cellular.registration]
        if !cellular.accessTechnologies.isEmpty { parts.append(cellular.accessTechnologies.joined(separator: "+")) }
        if let name = cellular.operatorName { parts.append("operator \(escaped(name))") }
        return parts.joined(separator: ", ")
    }

    /// Routes with IPv4 first, as `NetworkPath.primaryRoute` prefers it.
    private static func orderedRoutes(_ path: NetworkPath) -> [PathRoute] {
        path.routes.filter { $0.family == .ipv4 } + path.routes.filter { $0.family == .ipv6 }
    }

    /// `text` with control characters (C0, DEL, C1) and backslashes written as `\xNN` / `\\`, so a
    /// hostile interface name (the kernel allows ESC and most other bytes in one) or a portal URL
    /// cannot move the cursor, recolour or rewrite the terminal showing it.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar == "\\" {
                result += "\\\\"
            } else if needsEscape(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: false)
                result += scalar.value <= 0xFF ? "\\x" + (hex.count < 2 ? "0" + hex : hex) : "\\u{\(hex)}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar == "\\"
            || (0x2028...0x2029).contains(scalar.value) || (0x202A...0x202E).contains(scalar.value)
            || (0x2066...0x2069).contains(scalar.value)
    }

    private static func yesNo(_ value: Bool) -> String { value ? "yes" : "no" }
}
