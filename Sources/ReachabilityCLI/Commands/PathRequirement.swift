import LinuxReachability

/// What `wait` needs from a path: satisfied, over a kind of link, maybe not expensive.
struct PathRequirement: Sendable, Equatable, CustomStringConvertible {
    /// `--require` values.
    enum Connection: String, Sendable, CaseIterable {
        case wired, wifi, cellular, any
        /// A path whose connectivity check reads `full`.
        case internet
    }

    /// The kind of link the path must use.
    var connection: Connection = .any
    /// False for `--not-expensive`.
    var allowsExpensive = true
    /// False for `--not-roaming`.
    var allowsRoaming = true
    /// `--host`: the path is the route to this host, not the default route.
    var host: String?

    /// Whether `path` qualifies. The kind compares `NetworkPath.connection`, so a VPN over wifi is wifi.
    func isMet(by path: NetworkPath) -> Bool {
        guard path.isSatisfied else { return false }
        if !allowsExpensive && path.isExpensive { return false }
        if !allowsRoaming && path.isRoaming { return false }
        switch connection {
        case .any: return true
        case .wired: return path.connection == .wired
        case .wifi: return path.connection == .wifi
        case .cellular: return path.connection == .cellular
        case .internet: return path.connectivity == .full
        }
    }

    /// `a reachable wifi path that is not expensive`.
    var description: String {
        let kind = connection == .any || connection == .internet ? "" : "\(connection.rawValue) "
        let internet = connection == .internet ? " with full internet connectivity" : ""
        let destination = host.map { " to \(PathText.escaped($0))" } ?? ""
        let limits = [allowsExpensive ? nil : "expensive", allowsRoaming ? nil : "roaming"].compactMap { $0 }
        return "a reachable \(kind)path\(destination)\(internet)" + (limits.isEmpty ? "" : " that is not " + limits.joined(separator: " or "))
    }
}
