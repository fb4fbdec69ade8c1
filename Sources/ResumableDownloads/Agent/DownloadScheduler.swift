import FoundationEssentials

/// Which downloads hold one of the `maximumConcurrentDownloads` slots (their driver runs) and
/// which wait in line for one. Pure bookkeeping; the agent starts and ends the drivers.
struct DownloadScheduler: Sendable, Hashable {
    /// Slots; at least one.
    var limit: Int
    /// Waiting for a slot, in order: higher priority first, then first come.
    private(set) var queue: [UUID] = []
    /// The priority of each queued download that has one other than the default.
    private var priorities: [UUID: Float] = [:]
    /// Holding a slot.
    private(set) var active: Set<UUID> = []

    init(limit: Int) { self.limit = max(1, limit) }

    func isQueued(_ id: UUID) -> Bool { queue.contains(id) }

    /// Puts `id` in line (once; not while it holds a slot): behind every download of the same or
    /// a higher `priority` (0...1), ahead of lower ones.
    mutating func enqueue(_ id: UUID, priority: Float = 0.5) {
        guard !queue.contains(id), !active.contains(id) else { return }
        if priority != 0.5 { priorities[id] = priority }
        let position = queue.firstIndex { (priorities[$0] ?? 0.5) < priority } ?? queue.endIndex
        queue.insert(id, at: position)
    }

    /// Takes `id` out of the line (paused or cancelled while queued).
    mutating func dequeue(_ id: UUID) {
        queue.removeAll { $0 == id }
        priorities[id] = nil
    }

    /// `id` gave its slot back (its driver ended).
    mutating func release(_ id: UUID) { active.remove(id) }

    /// Hands free slots to queued downloads that `isRunnable` accepts, in order, and returns them;
    /// the others keep their place.
    mutating func admit(where isRunnable: (UUID) -> Bool) -> [UUID] {
        var admitted: [UUID] = []
        for id in queue where active.count < limit && isRunnable(id) {
            active.insert(id)
            admitted.append(id)
        }
        queue.removeAll { admitted.contains($0) }
        for id in admitted { priorities[id] = nil }
        return admitted
    }
}
