import LinuxReachability

/// Which paths a download's connections may use, from what the monitor knows (pure).
///
/// Several paths are used only when the host has two or more uplinks: usable interfaces (up,
/// carrier, an address that is not link-local) that are wired, wifi or cellular-like, the primary
/// among them. A primary that is anything else (a VPN, a tunnel) means the routing table decides
/// alone: binding connections to the uplinks underneath would leave the VPN. Each path is then an
/// interface that connections are bound to (`CURLOPT_INTERFACE "if!NAME"`: `SO_BINDTODEVICE`
/// and the interface's address), primary first. Those the download's `PathAccess` does not permit
/// (expensive, roaming or constrained when it does not allow them) are left out. Once an attempt uses several paths it keeps binding its connections
/// (a path that goes away closes only its own; one that comes back is added) until it ends.
/// `--interface NAME` (`DownloadOptions.interfaces`) names the paths outright.
enum MultipathPolicy {
    /// The paths for a download, best first; empty means none is usable now (wait).
    /// - Parameters:
    ///   - path: the path gating the download (nil without a monitor).
    ///   - pinnedInterface: the single-path pin `PathPolicy` chose (a cheap interface while the
    ///     primary is expensive and expensive paths are not allowed).
    ///   - interfaces: the interfaces the download is pinned to, if any.
    ///   - isMultipath: whether the running attempt already binds its connections.
    static func paths(for path: NetworkPath?, pinnedInterface: String?, access: PathAccess, interfaces: [String],
                      isMultipath: Bool = false) -> [SegmentPlanner.Path] {
        guard let path else {
            if !interfaces.isEmpty { return interfaces.map { SegmentPlanner.Path(interface: $0) } }
            return [SegmentPlanner.Path(interface: pinnedInterface)]
        }
        let usable = path.interfaces.filter(isUplink)
        if !interfaces.isEmpty {
            return interfaces.compactMap { name in
                guard let interface = path.interfaces.first(where: { $0.name == name && $0.isUsable }),
                      access.permits(interface) else { return nil }
                return SegmentPlanner.Path(interface: name, isExpensive: interface.isExpensive)
            }
        }
        let candidates = usable.filter { access.permits($0) }
        let primary = path.primaryInterface
        let primaryIsUplink = primary.map { primary in usable.contains { $0.name == primary.name } } ?? false
        guard isMultipath || primaryIsUplink && candidates.count >= 2 else {
            guard path.isSatisfied else { return [] }
            let expensive = pinnedInterface.flatMap { name in path.interfaces.first { $0.name == name }?.isExpensive }
                ?? path.isExpensive
            return [SegmentPlanner.Path(interface: pinnedInterface, isExpensive: expensive)]
        }
        let ordered = candidates.filter { $0.name == primary?.name } + candidates.filter { $0.name != primary?.name }
        return ordered.map { SegmentPlanner.Path(interface: $0.name, isExpensive: $0.isExpensive) }
    }

    /// An interface that can carry a download by itself: up, carrier, a routable address, and a
    /// kind that is an uplink (not loopback, not a tunnel or virtual link).
    static func isUplink(_ interface: NetworkInterface) -> Bool {
        guard interface.isUsable, [.wired, .wifi, .cellular].contains(interface.type) else { return false }
        return interface.addresses.contains { !$0.lowercased().hasPrefix("fe80:") && !$0.hasPrefix("169.254.") }
    }
}
