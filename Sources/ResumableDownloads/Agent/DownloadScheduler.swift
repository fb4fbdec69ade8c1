import FoundationEssentials

/// Which downloads hold one of the `maximumConcurrentDownloads` slots (their driver runs) and
/// which wait in line for one. Pure bookkeeping; the agent starts and ends the drivers.
struct DownloadScheduler: Sendable, Hashable {
    /// Slots; at least one.
    var limit: Int
    /// Waiting for a slot, in order: higher class first, then first come.
    private(set) var queue: [UUID] = []
    /// The members of `queue` (membership without a scan: 10,000 queued downloads).
    private var queued: Set<UUID> = []
    /// The class (as its `DownloadPriority.value`) of each queued download not in `normal`.
    private var priorities: [UUID: Float] = [:]
    /// Holding a slot.
    private(set) var active: Set<UUID> = []
    /// The class of each download holding a slot, and when it got it (the victim of a
    /// preemption is the lowest, latest admitted: it has the least to lose).
    private var held: [UUID: Holder] = [:]
    /// A slot's holder: its class (as its value) and admission number.
    private struct Holder: Sendable, Hashable { var priority: Float; var serial: Int }
    /// Admissions so far (orders `held`).
    private var admissions = 0
    /// Holding a slot but asked to give it up for a foreground download (checkpointing).
    private(set) var yielding: Set<UUID> = []
    /// Gave a slot up for a foreground download: queued again at the front of its class.
    private var preempted: Set<UUID> = []

    init(limit: Int) { self.limit = max(1, limit) }

    func isQueued(_ id: UUID) -> Bool { queued.contains(id) }

    /// Puts `id` in line (once; not while it holds a slot): behind every download of the same or
    /// a higher class (`DownloadPriority(value: priority)`), ahead of lower ones. Appending at
    /// the default class with no lower one queued (every `queue add`) costs no scan.
    /// A download that gave its slot up to a foreground one goes ahead of the others of its
    /// class instead (it was admitted before them).
    mutating func enqueue(_ id: UUID, priority: Float = 0.5) {
        guard !queued.contains(id), !active.contains(id) else { return }
        // The line orders by class, not by the raw number: 0.8 and 0.76 are both `high`, and
        // within one class the first to come goes first (BITS; a task nudged within its class
        // does not jump the line).
        let priority = DownloadPriority(value: priority).value
        if preempted.remove(id) != nil {
            if priority != 0.5 { priorities[id] = priority }
            queue.insert(id, at: queue.firstIndex { (priorities[$0] ?? 0.5) <= priority } ?? queue.endIndex)
            queued.insert(id)
            return
        }
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
        preempted.remove(id)
    }

    /// `id` gave its slot back (its driver ended).
    mutating func release(_ id: UUID) {
        active.remove(id)
        held[id] = nil
        if yielding.remove(id) != nil { preempted.insert(id) }
    }

    /// The downloads holding a slot that must give it up (checkpoint and queue again) so that
    /// the foreground downloads waiting in line (priority `DownloadPriority.foreground`, at the
    /// front of the line) start now: one per foreground download that no free slot or earlier
    /// preemption covers, the lowest class first and, within one, the latest admitted.
    /// Foreground downloads never preempt each other. Marks them yielding (`release` ends that).
    mutating func preempt() -> [UUID] {
        let foreground = DownloadPriority.foreground.value
        var waiting = 0
        for id in queue {
            guard (priorities[id] ?? 0.5) >= foreground else { break }
            waiting += 1
        }
        var needed = waiting - max(0, limit - active.count) - yielding.count
        guard needed > 0 else { return [] }
        let candidates = held.filter { $0.value.priority < foreground && !yielding.contains($0.key) }
            .sorted { ($0.value.priority, -$0.value.serial) < ($1.value.priority, -$1.value.serial) }
        var victims: [UUID] = []
        for candidate in candidates where needed > 0 {
            victims.append(candidate.key)
            yielding.insert(candidate.key)
            needed -= 1
        }
        return victims
    }

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
                admissions += 1
                held[id] = Holder(priority: priorities[id] ?? 0.5, serial: admissions)
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
