import FoundationEssentials
import LinuxReachability

/// The agent's view of the network path for its downloads: the primary path, the path to each
/// download's host, what they mean for each download (`PathPolicy`), and in which order the
/// downloads woken by one update restart. Pure: the agent feeds it path updates with the
/// downloads that listen, and posts the returned facts to their drivers.
///
/// A download with a host is gated by the route to that host (`HostPath`), once its first answer
/// is in: a server on the local network is reachable without a default route, and the default
/// route moving does not disturb it. Until then, and when the host's name does not resolve or
/// paths to hosts are not followed, the primary path decides, as it always did.
struct PathWaiters: Sendable {
    /// A download that hears about path changes.
    struct Listener: Sendable, Hashable {
        var id: UUID
        var access: PathAccess
        /// Where its traffic goes first (the server, or the proxy), nil to follow the primary path.
        var host: String?
        /// The running transfer's path at its start and its pinned interface, if one runs.
        var transfer: (key: PathKey, pinnedInterface: String?)?

        init(id: UUID, access: PathAccess, host: String? = nil, transfer: (key: PathKey, pinnedInterface: String?)? = nil) {
            self.id = id
            self.access = access
            self.host = host
            self.transfer = transfer
        }

        static func == (lhs: Listener, rhs: Listener) -> Bool {
            lhs.id == rhs.id && lhs.access == rhs.access && lhs.host == rhs.host
                && lhs.transfer?.key == rhs.transfer?.key && lhs.transfer?.pinnedInterface == rhs.transfer?.pinnedInterface
        }

        func hash(into hasher: inout Hasher) { hasher.combine(id) }
    }

    /// One listener's news.
    struct Notice: Sendable, Hashable {
        var id: UUID
        var facts: DownloadStateMachine.PathFacts
        /// Position among the listeners this update makes able to transfer (0 first).
        var rank: Int
    }

    /// What gates a download: a path, or nothing known yet (wait quietly).
    enum Gate: Sendable, Hashable {
        case path(NetworkPath?)
        case pending
    }

    /// Whether paths come from a source; without one the network is assumed usable.
    let hasPathSource: Bool
    /// Whether paths to hosts are followed; without, every download follows the primary path.
    let followsHosts: Bool
    /// The primary path.
    private(set) var path: NetworkPath?
    /// The latest path to each followed host; a host without an entry has not answered yet.
    private(set) var hostPaths: [String: HostPath] = [:]
    /// Hosts whose paths stopped coming (the source ended): the primary path decides for them.
    private(set) var unfollowedHosts: Set<String> = []

    init(hasPathSource: Bool, followsHosts: Bool = false) {
        self.hasPathSource = hasPathSource
        self.followsHosts = followsHosts && hasPathSource
    }

    /// What gates a download to `host`.
    func gate(host: String?) -> Gate {
        guard followsHosts, let host, !unfollowedHosts.contains(host) else { return .path(path) }
        guard let hostPath = hostPaths[host] else { return .pending }
        // A name that does not resolve has no route of its own: the primary path decides, and
        // the transfer's own lookup reports what it finds (a server wait, as before).
        return .path(hostPath.path ?? path)
    }

    /// Whether the primary path gates a download to `host` (no host, hosts not followed, or a
    /// host whose name has no route of its own).
    func followsPrimaryPath(host: String?) -> Bool {
        guard followsHosts, let host, !unfollowedHosts.contains(host) else { return true }
        guard let hostPath = hostPaths[host] else { return false }
        return hostPath.path == nil
    }

    /// The path a download to `host` is gated by now (nil while nothing is known).
    func gatingPath(host: String?) -> NetworkPath? {
        if case .path(let path) = gate(host: host) { return path }
        return nil
    }

    /// What the path means for a download to `host` now.
    func usability(access: PathAccess, host: String? = nil) -> PathUsability {
        switch gate(host: host) {
        case .pending: return .unknown
        case .path(let path): return PathPolicy.usability(of: path, hasPathSource: hasPathSource, access: access)
        }
    }

    /// The facts for a download to `host` whose transfer (if any) started under `transfer`.
    func facts(access: PathAccess, host: String? = nil, transfer: (key: PathKey, pinnedInterface: String?)? = nil,
               isNewPath: Bool = false) -> DownloadStateMachine.PathFacts {
        var invalidates = false
        if let transfer, let path = gatingPath(host: host) {
            invalidates = PathPolicy.mustAbort(startedUnder: transfer.key, pinnedInterface: transfer.pinnedInterface,
                                               access: access, newPath: path)
        }
        return .init(usability: usability(access: access, host: host), invalidatesTransfer: invalidates,
                     isNewPath: isNewPath)
    }

    /// Takes a new primary path and returns the facts of each listener it gates, ranked for
    /// staggered restarts. Listeners gated by their host's route hear nothing: this change is
    /// not theirs.
    mutating func update(_ newPath: NetworkPath, listeners: [Listener]) -> [Notice] {
        let affected = listeners.filter { followsPrimaryPath(host: $0.host) }
        let isNewPath = path.map(PathKey.init) != PathKey(newPath)
        path = newPath
        return notices(for: affected, isNewPath: { _ in isNewPath })
    }

    /// Takes a new path to `host` and returns the facts of the listeners to it.
    mutating func update(_ hostPath: HostPath, for host: String, listeners: [Listener]) -> [Notice] {
        guard followsHosts else { return [] }
        let before = gatingPath(host: host)
        let wasPending = gate(host: host) == .pending
        unfollowedHosts.remove(host)
        hostPaths[host] = hostPath
        let after = gatingPath(host: host)
        let isNewPath = wasPending || before.map(PathKey.init) != after.map(PathKey.init)
        return notices(for: listeners.filter { $0.host == host }, isNewPath: { _ in isNewPath })
    }

    /// Paths to `host` stopped coming: its listeners follow the primary path from now on.
    mutating func unfollow(_ host: String, listeners: [Listener]) -> [Notice] {
        guard followsHosts else { return [] }
        let before = gate(host: host)
        hostPaths[host] = nil
        unfollowedHosts.insert(host)
        let isNewPath = before != gate(host: host)
        return notices(for: listeners.filter { $0.host == host }, isNewPath: { _ in isNewPath })
    }

    /// No download follows `host` any more.
    mutating func forget(_ host: String) {
        hostPaths[host] = nil
        unfollowedHosts.remove(host)
    }

    private func notices(for listeners: [Listener], isNewPath: (Listener) -> Bool) -> [Notice] {
        var rank = 0
        return listeners.map { listener in
            let facts = facts(access: listener.access, host: listener.host, transfer: listener.transfer,
                              isNewPath: isNewPath(listener))
            let notice = Notice(id: listener.id, facts: facts, rank: facts.isUsable ? rank : 0)
            if facts.isUsable { rank += 1 }
            return notice
        }
    }
}
