import Synchronization

/// Connections open to each server from this process, over every engine (every agent): the
/// per-host bound of segmented downloads counts them all, so two agents (the CLI's downloads each
/// have one) to one server share it.
final class HostConnections: Sendable {
    static let shared = HostConnections()
    private let open = Mutex<(now: [String: Int], most: [String: Int])>(([:], [:]))

    func opened(_ host: String) {
        open.withLock { open in
            open.now[host, default: 0] += 1
            open.most[host] = max(open.most[host] ?? 0, open.now[host] ?? 0)
        }
    }

    func closed(_ host: String) {
        open.withLock { open in
            let count = (open.now[host] ?? 1) - 1
            open.now[host] = count > 0 ? count : nil
        }
    }

    /// Open connections to `host`.
    func count(_ host: String) -> Int { open.withLock { $0.now[host] ?? 0 } }

    /// The most connections to `host` that were open at once (for tests).
    func most(_ host: String) -> Int { open.withLock { $0.most[host] ?? 0 } }

    /// `most` starts again from the connections open now: a test's new server may listen on a
    /// port an earlier server of the same process had, whose peak would otherwise be counted.
    func forgetMost(_ host: String) { open.withLock { $0.most[host] = $0.now[host] } }
}
