import FoundationEssentials

/// What changed in a background session's record since its previous write: one line of the
/// session's log (`BackgroundStore`), so a change costs what changed, not the whole session
/// (3,000 task creations rewrote a record growing to 281 KB 3,000 times, in 100.7 s).
///
/// Tasks and events are keyed (task identifier, event sequence): the changed or new ones are
/// given whole, the removed ones by key; the scalars are given whole. Applied in order to the
/// record the log follows, the lines give the record back exactly: `init(from:to:serial:)`
/// checks that, and returns nil for a change it cannot say (then the record is written whole).
package struct BackgroundSessionChange: Codable, Sendable, Hashable {
    /// This line's place in the log: one more than the line before it, or than the
    /// `journalSerial` of the record it follows.
    package var serial: UInt64
    /// The settings, when they changed.
    package var settings: BackgroundSessionSettings?
    /// Tasks changed or added (added ones go last, in this order).
    package var tasks: [BackgroundTaskRecord]?
    /// Identifiers of the tasks removed.
    package var removedTasks: [Int]?
    /// Events changed or added (added ones go last, in this order).
    package var events: [BackgroundPendingEvent]?
    /// Sequence numbers of the events removed (acknowledged).
    package var removedEvents: [UInt64]?
    package var nextSequence: UInt64
    package var nextTaskIdentifier: Int
    package var isInvalidated: Bool

    /// The change from `old` to `new`, or nil when the log cannot say it (another session, a
    /// reordering).
    package init?(from old: BackgroundSessionRecord, to new: BackgroundSessionRecord, serial: UInt64) {
        guard old.key == new.key, old.version == new.version, old.journalSerial == new.journalSerial else { return nil }
        self.serial = serial
        settings = old.settings == new.settings ? nil : new.settings
        let taskChange = Self.difference(old.tasks, new.tasks, key: \.spec.taskIdentifier)
        tasks = taskChange.changed.isEmpty ? nil : taskChange.changed
        removedTasks = taskChange.removed.isEmpty ? nil : taskChange.removed
        let eventChange = Self.difference(old.pending, new.pending, key: \.sequence)
        events = eventChange.changed.isEmpty ? nil : eventChange.changed
        removedEvents = eventChange.removed.isEmpty ? nil : eventChange.removed
        nextSequence = new.nextSequence
        nextTaskIdentifier = new.nextTaskIdentifier
        isInvalidated = new.isInvalidated
        guard applied(to: old) == new else { return nil }
    }

    /// `record` with this change made.
    package func applied(to record: BackgroundSessionRecord) -> BackgroundSessionRecord {
        var result = record
        if let settings { result.settings = settings }
        result.tasks = Self.apply(changed: tasks ?? [], removed: removedTasks ?? [], to: record.tasks, key: \.spec.taskIdentifier)
        result.pending = Self.apply(changed: events ?? [], removed: removedEvents ?? [], to: record.pending, key: \.sequence)
        result.nextSequence = nextSequence
        result.nextTaskIdentifier = nextTaskIdentifier
        result.isInvalidated = isInvalidated
        return result
    }

    /// The elements of `new` that are not in `old` as they are, and the keys of `old` not in
    /// `new`. Linear when the common part keeps its order (the usual change: one appended or
    /// one changed), so a session of 3,000 tasks is not compared pairwise.
    static func difference<Element: Equatable, Key: Hashable>(_ old: [Element], _ new: [Element],
                                                            key: (Element) -> Key) -> (changed: [Element], removed: [Key]) {
        var changed: [Element] = []
        var index = 0
        while index < old.count, index < new.count, key(old[index]) == key(new[index]) {
            if old[index] != new[index] { changed.append(new[index]) }
            index += 1
        }
        guard index < old.count || index < new.count else { return (changed, []) }
        var rest: [Key: Element] = [:]
        for element in old[index...] { rest[key(element)] = element }
        var kept = Set<Key>()
        for element in new[index...] {
            let elementKey = key(element)
            if let before = rest[elementKey] {
                kept.insert(elementKey)
                if before != element { changed.append(element) }
            } else {
                changed.append(element)
            }
        }
        let removed = old[index...].map(key).filter { !kept.contains($0) }
        return (changed, removed)
    }

    static func apply<Element, Key: Hashable>(changed: [Element], removed: [Key], to elements: [Element],
                                              key: (Element) -> Key) -> [Element] {
        guard !changed.isEmpty || !removed.isEmpty else { return elements }
        var result = elements
        if !removed.isEmpty {
            let gone = Set(removed)
            result.removeAll { gone.contains(key($0)) }
        }
        for element in changed {
            let elementKey = key(element)
            // Searched from the end: a change is usually to the newest elements.
            if let index = result.lastIndex(where: { key($0) == elementKey }) {
                result[index] = element
            } else {
                result.append(element)
            }
        }
        return result
    }
}
