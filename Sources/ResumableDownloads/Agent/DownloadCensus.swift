import FoundationEssentials
import Synchronization

/// How many of an agent's downloads are in each state and class, kept as they change: a status
/// of 10,000 downloads read each one's state under its lock, and every read retained a
/// `Download` through its side table (objects with weak references take swift_retain's slow
/// path): two thirds of a status's CPU time (perf, issue 29). Each download moves its own count
/// under its own lock, so the counts always match the states a reader would have found.
package final class DownloadCensus: Sendable {
    /// A state without its details (a failure's error), as the census counts it.
    package enum Kind: Int, Sendable, CaseIterable {
        case queued, running, waitingForConnectivity, paused, completed, failed

        /// The kind of `state`.
        package init(_ state: DownloadState) {
            self = switch state {
            case .queued: .queued
            case .running: .running
            case .waitingForConnectivity: .waitingForConnectivity
            case .paused: .paused
            case .completed: .completed
            case .failed: .failed
            }
        }
    }

    /// Downloads per kind and class at one instant.
    package struct Counts: Sendable, Equatable {
        private var cells = [Int](repeating: 0, count: Kind.allCases.count * DownloadPriority.allCases.count)

        private static func cell(_ kind: Kind, _ priority: DownloadPriority) -> Int {
            let column = switch priority {
            case .foreground: 0
            case .high: 1
            case .normal: 2
            case .low: 3
            }
            return kind.rawValue * DownloadPriority.allCases.count + column
        }

        /// How many downloads of `priority` are in `kind`.
        package func count(_ kind: Kind, _ priority: DownloadPriority) -> Int { cells[Self.cell(kind, priority)] }

        /// How many downloads are counted, in every kind and class.
        package var listed: Int { cells.reduce(0, +) }

        /// How many downloads are in `kind`, of every class.
        package func count(_ kind: Kind) -> Int { DownloadPriority.allCases.reduce(0) { $0 + count(kind, $1) } }

        mutating func add(_ kind: Kind, _ priority: DownloadPriority, _ change: Int) { cells[Self.cell(kind, priority)] += change }
    }

    /// The first unfinished and the latest finished downloads in list order, and how many are
    /// listed: what a `queue list` page shows (`page(rows:)`).
    package struct Page: Sendable {
        /// The page's downloads in list order.
        package var rows: [Download]
        /// How many downloads the census counts (the page's and the others), the excluded ones
        /// not among them.
        package var listed: Int
        /// How many entries of the list order were read to choose the rows: the page's cost
        /// (at most `rows` and the excluded ones met, on each side), for tests.
        package var visited = 0
    }

    /// The counts, and the listed downloads' positions split by whether they are finished, each
    /// part in list order: a `queue list` page read every download's state to choose its 200
    /// rows (a lock and a side-table retain each: `queue list` p99 272 ms at 10,000 jobs,
    /// issue 29); kept as states change, a page costs O(rows). Inserting into the middle of a
    /// sorted array moves at most 80 KB at 10,000 jobs, and a download mostly finishes near
    /// the front of the unfinished part and lands near the end of the finished one.
    private struct Book {
        var counts = Counts()
        var nextPosition: UInt64 = 0
        var unfinished: [UInt64] = []
        var finished: [UInt64] = []
        /// Weak: each download holds its census while listed (a strong pair would be a cycle
        /// that outlives an agent whose downloads were never removed).
        var downloads: [UInt64: WeakDownload] = [:]
        /// Each listed download's position, so an exclusion by identifier is found without
        /// visiting the downloads.
        var positions: [UUID: UInt64] = [:]

        mutating func insert(_ position: UInt64, isFinished: Bool) {
            if isFinished { DownloadCensus.insert(position, into: &finished) } else { DownloadCensus.insert(position, into: &unfinished) }
        }

        mutating func remove(_ position: UInt64, isFinished: Bool) {
            if isFinished { DownloadCensus.remove(position, from: &finished) } else { DownloadCensus.remove(position, from: &unfinished) }
        }
    }

    private struct WeakDownload {
        weak var download: Download?
        /// Its identifier, read without reaching the download (a weak load retains it).
        var id: UUID
    }

    private let book = Mutex(Book())

    /// An empty census.
    package init() {}

    /// The counts now.
    package var current: Counts { book.withLock { $0.counts } }

    /// The first `rows` unfinished and the latest `rows` finished downloads, in list order.
    package func page(rows limit: Int) -> Page { page(rows: limit, excluding: []) }

    /// The first `rows` unfinished and the latest `rows` finished downloads that are not in
    /// `excluded` (a background session's, listed by the session's own rows), in list order.
    /// It reads `rows` entries of each part and the excluded ones met on the way, never the
    /// whole list: with background sessions present a `queue list` page read every download
    /// (issue 29).
    package func page(rows limit: Int, excluding excluded: Set<UUID>) -> Page {
        let (chosen, listed, visited) = book.withLock { book -> ([WeakDownload], Int, Int) in
            var visited = 0
            func isIncluded(_ position: UInt64) -> Bool {
                visited += 1
                guard let entry = book.downloads[position] else { return false }
                return excluded.isEmpty || !excluded.contains(entry.id)
            }
            var unfinished: [UInt64] = [], finished: [UInt64] = []
            var index = book.unfinished.startIndex
            while unfinished.count < limit, index < book.unfinished.endIndex {
                if isIncluded(book.unfinished[index]) { unfinished.append(book.unfinished[index]) }
                index += 1
            }
            index = book.finished.endIndex
            while finished.count < limit, index > book.finished.startIndex {
                index -= 1
                if isIncluded(book.finished[index]) { finished.append(book.finished[index]) }
            }
            // Excluded downloads the census lists (identifiers of others are not counted).
            let excludedListed = excluded.isEmpty ? 0 : excluded.reduce(0) { $0 + (book.positions[$1] == nil ? 0 : 1) }
            let chosen = (unfinished + finished).sorted().compactMap { book.downloads[$0] }
            return (chosen, book.unfinished.count + book.finished.count - excludedListed, visited)
        }
        return Page(rows: chosen.compactMap(\.download), listed: listed, visited: visited)
    }

    /// The next download's position in the list: the order of the agent's list, which appends
    /// each download right after making it.
    func nextPosition() -> UInt64 { book.withLock { book in defer { book.nextPosition += 1 }; return book.nextPosition } }

    func add(_ download: Download, at position: UInt64, _ state: DownloadState, priority: DownloadPriority) {
        book.withLock { book in
            book.counts.add(Kind(state), priority, 1)
            book.downloads[position] = WeakDownload(download: download, id: download.id)
            book.positions[download.id] = position
            book.insert(position, isFinished: state.isFinal)
        }
    }

    func remove(at position: UInt64, _ state: DownloadState, priority: DownloadPriority) {
        book.withLock { book in
            book.counts.add(Kind(state), priority, -1)
            if let id = book.downloads.removeValue(forKey: position)?.id, book.positions[id] == position {
                book.positions[id] = nil
            }
            book.remove(position, isFinished: state.isFinal)
        }
    }

    func move(at position: UInt64, from old: DownloadState, to new: DownloadState, priority: DownloadPriority) {
        let (from, to) = (Kind(old), Kind(new))
        guard from != to else { return }
        book.withLock { book in
            book.counts.add(from, priority, -1)
            book.counts.add(to, priority, 1)
            guard old.isFinal != new.isFinal else { return }
            book.remove(position, isFinished: old.isFinal)
            book.insert(position, isFinished: new.isFinal)
        }
    }

    /// Where `position` is, or would go, in the sorted `positions`.
    private static func index(of position: UInt64, in positions: [UInt64]) -> Int {
        // Most changes happen at the end (a new download, a completion in line).
        if let last = positions.last, last < position { return positions.count }
        var (low, high) = (0, positions.count)
        while low < high {
            let middle = (low + high) / 2
            if positions[middle] < position { low = middle + 1 } else { high = middle }
        }
        return low
    }

    private static func insert(_ position: UInt64, into positions: inout [UInt64]) {
        let index = index(of: position, in: positions)
        guard index == positions.count || positions[index] != position else { return }
        positions.insert(position, at: index)
    }

    private static func remove(_ position: UInt64, from positions: inout [UInt64]) {
        let index = index(of: position, in: positions)
        guard index < positions.count, positions[index] == position else { return }
        positions.remove(at: index)
    }
}
