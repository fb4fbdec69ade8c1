import FoundationEssentials
import LinuxReachability

/// The agent's view of the network path for its downloads: the latest path, what it means for
/// each download (`PathPolicy`), and in which order the downloads woken by one update restart.
/// Pure: the agent feeds it path updates with the downloads that listen, and posts the returned
/// facts to their drivers.
struct PathWaiters: Sendable {
    /// A download that hears about path changes.
    struct Listener: Sendable, Hashable {
        var id: UUID
        var access: PathAccess
        /// The running transfer's path at its start and its pinned interface, if one runs.
        var transfer: (key: PathKey, pinnedInterface: String?)?

        init(id: UUID, access: PathAccess, transfer: (key: PathKey, pinnedInterface: String?)? = nil) {
            self.id = id
            self.access = access
            self.transfer = transfer
        }

        static func == (lhs: Listener, rhs: Listener) -> Bool {
            lhs.id == rhs.id && lhs.access == rhs.access && lhs.transfer?.key == rhs.transfer?.key
                && lhs.transfer?.pinnedInterface == rhs.transfer?.pinnedInterface
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

    /// Whether paths come from a source; without one the network is assumed usable.
    let hasPathSource: Bool
    private(set) var path: NetworkPath?

    init(hasPathSource: Bool) { self.hasPathSource = hasPathSource }

    /// What the path means for a download now.
    func usability(access: PathAccess) -> PathUsability {
        PathPolicy.usability(of: path, hasPathSource: hasPathSource, access: access)
    }

    /// The facts for a download whose transfer (if any) started under `transfer`.
    func facts(access: PathAccess, transfer: (key: PathKey, pinnedInterface: String?)? = nil,
               isNewPath: Bool = false) -> DownloadStateMachine.PathFacts {
        var invalidates = false
        if let transfer, let path {
            invalidates = PathPolicy.mustAbort(startedUnder: transfer.key, pinnedInterface: transfer.pinnedInterface,
                                               access: access, newPath: path)
        }
        return .init(usability: usability(access: access), invalidatesTransfer: invalidates,
                     isNewPath: isNewPath)
    }

    /// Takes a new path and returns each listener's facts, ranked for staggered restarts.
    mutating func update(_ newPath: NetworkPath, listeners: [Listener]) -> [Notice] {
        let isNewPath = path.map(PathKey.init) != PathKey(newPath)
        path = newPath
        var rank = 0
        return listeners.map { listener in
            let facts = facts(access: listener.access, transfer: listener.transfer, isNewPath: isNewPath)
            let notice = Notice(id: listener.id, facts: facts, rank: facts.isUsable ? rank : 0)
            if facts.isUsable { rank += 1 }
            return notice
        }
    }
}
