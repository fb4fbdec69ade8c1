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

        /// How many downloads are in `kind`, of every class.
        package func count(_ kind: Kind) -> Int { DownloadPriority.allCases.reduce(0) { $0 + count(kind, $1) } }

        mutating func add(_ kind: Kind, _ priority: DownloadPriority, _ change: Int) { cells[Self.cell(kind, priority)] += change }
    }

    private let counts = Mutex(Counts())

    /// An empty census.
    package init() {}

    /// The counts now.
    package var current: Counts { counts.withLock { $0 } }

    func add(_ state: DownloadState, priority: DownloadPriority) {
        counts.withLock { $0.add(Kind(state), priority, 1) }
    }

    func remove(_ state: DownloadState, priority: DownloadPriority) {
        counts.withLock { $0.add(Kind(state), priority, -1) }
    }

    func move(from old: DownloadState, to new: DownloadState, priority: DownloadPriority) {
        let (from, to) = (Kind(old), Kind(new))
        guard from != to else { return }
        counts.withLock { counts in
            counts.add(from, priority, -1)
            counts.add(to, priority, 1)
        }
    }
}
