import FoundationEssentials

/// Which downloads hold one of the `maximumConcurrentDownloads` slots (their driver runs) and
/// which wait in line for one. Pure bookkeeping; the agent starts and ends the drivers.
struct DownloadScheduler: Sendable, Hashable {
    /// Slots; at least one.
    var limit: Int
    /// Waiting for a slot, in order.
    private(set) var queue: [UUID] = []
    /// Holding a slot.
    private(set) var active: Set<UUID> = []

    init(limit: Int) { self.limit = max(1, limit) }

    func isQueued(_ id: UUID) -> Bool { queue.contains(id) }

    /// Puts `id` in line (once; not while it holds a slot).
    mutating func enqueue(_ id: UUID) {
        guard !queue.contains(id), !active.contains(id) else { return }
        queue.append(id)
    }

    /// Takes `id` out of the line (paused or cancelled while queued).
    mutating func dequeue(_ id: UUID) { queue.removeAll { $0 == id } }

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
        return admitted
    }
}
