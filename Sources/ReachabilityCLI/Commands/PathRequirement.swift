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

    /// How waiting ended.
    enum Outcome: Equatable {
        /// This path qualified.
        case qualified(NetworkPath)
        /// The deadline passed first.
        case timedOut
        /// The updates finished (the monitor was cancelled) without a qualifying path.
        case ended
    }

    /// Checks `current`, then waits for the first qualifying path in `updates`, racing `timeout`
    /// (nil waits forever; zero checks `current` only). `sleep` is injected so tests need no clock.
    func firstQualifyingPath(current: NetworkPath, updates: AsyncStream<NetworkPath>, timeout: Duration?,
                             sleep: @escaping @Sendable (Duration) async throws -> Void) async -> Outcome {
        if isMet(by: current) { return .qualified(current) }
        if timeout == .zero { return .timedOut }
        return await withTaskGroup(of: Outcome?.self) { group in
            group.addTask {
                for await path in updates where isMet(by: path) { return .qualified(path) }
                return Task.isCancelled ? nil : .ended
            }
            if let timeout {
                group.addTask {
                    do { try await sleep(timeout) } catch { return nil }
                    return .timedOut
                }
            }
            defer { group.cancelAll() }
            while let outcome = await group.next() {
                if let outcome { return outcome }
            }
            return .timedOut
        }
    }
}
