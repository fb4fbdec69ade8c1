import FoundationEssentials

/// Which downloads hold one of the `maximumConcurrentDownloads` slots (their driver runs) and
/// which wait in line for one. Pure bookkeeping; the agent starts and ends the drivers.
struct DownloadScheduler: Sendable, Hashable {
    /// Slots; at least one.
    var limit: Int
    /// Waiting for a slot, in order: higher priority first, then first come.
    private(set) var queue: [UUID] = []
    /// The members of `queue` (membership without a scan: 10,000 queued downloads).
    private var queued: Set<UUID> = []
    /// The priority of each queued download that has one other than the default.
    private var priorities: [UUID: Float] = [:]
    /// Holding a slot.
    private(set) var active: Set<UUID> = []

    init(limit: Int) { self.limit = max(1, limit) }

    func isQueued(_ id: UUID) -> Bool { queued.contains(id) }

    /// Puts `id` in line (once; not while it holds a slot): behind every download of the same or
    /// a higher `priority` (0...1), ahead of lower ones. Appending at the default priority with
    /// no lower one queued (every `queue add`) costs no scan.
    mutating func enqueue(_ id: UUID, priority: Float = 0.5) {
        guard !queued.contains(id), !active.contains(id) else { return }
        let defaultsQueued = queue.count - priorities.count
        let hasLower = priorities.values.contains { $0 < priority } || (priority > 0.5 && defaultsQueued > 0)
        if priority != 0.5 { priorities[id] = priority }
        let position = hasLower ? queue.firstIndex { (priorities[$0] ?? 0.5) < priority } ?? queue.endIndex : queue.endIndex
        queue.insert(id, at: position)
        queued.insert(id)
    }

    /// Takes `id` out of the line (paused or cancelled while queued).
    mutating func dequeue(_ id: UUID) {
        guard queued.remove(id) != nil else { return }
        queue.removeAll { $0 == id }
        priorities[id] = nil
    }

    /// `id` gave its slot back (its driver ended).
    mutating func release(_ id: UUID) { active.remove(id) }

    /// Hands free slots to queued downloads that `isRunnable` accepts, in order, and returns them;
    /// the others keep their place. Stops looking once the slots are full.
    mutating func admit(where isRunnable: (UUID) -> Bool) -> [UUID] {
        guard active.count < limit else { return [] }
        var admitted: Set<UUID> = []
        var order: [UUID] = []
        var visited = queue.startIndex
        while visited < queue.endIndex, active.count < limit {
            let id = queue[visited]
            visited += 1
            if isRunnable(id) {
                active.insert(id)
                admitted.insert(id)
                order.append(id)
            }
        }
        guard !order.isEmpty else { return [] }
        // Only the part looked at is filtered (a completion among 10,000 queued touches the
        // front of the line, not all of it).
        queue.replaceSubrange(..<visited, with: queue[..<visited].filter { !admitted.contains($0) })
        queued.subtract(admitted)
        for id in order { priorities[id] = nil }
        return order
    }
}
