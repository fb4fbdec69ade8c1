import FoundationEssentials
import LinuxReachability
import Synchronization

/// An upload's place in its host's server wait: the same `ServerProbeCoordinator` downloads use,
/// so an upload whose server resets or drops probes it at the downloads' pace (a quick first
/// probe, then one every 500 ms, at most two attempts a second over any stretch of the wait, one
/// probe per host however many uploads and downloads wait on it) and tries at once when another
/// transfer of the host gets an answer. No back-off of its own: issue 31 counts them.
final class UploadServerWait: Sendable {
    /// What ended a wait.
    enum Turn: Sendable, Equatable {
        /// This upload's next attempt is the host's probe: a fresh connection that gives up
        /// connecting after `connectTimeout`.
        case probe(connectTimeout: Duration)
        /// Another transfer of the host got an answer: try at once.
        case released
        /// The path changed (another interface or source address, or it went): try on the new
        /// one at once, or wait for one.
        case pathChanged
    }

    enum Wake: Sendable {
        case server(DownloadStateMachine.Input)
        case path
    }

    let id = UUID()
    let host: String
    /// Race turns asked so far (each a new attempt number for the scheduler).
    private let races = Atomic<Int>(0)
    private let coordinator: ServerProbeCoordinator
    let wakes: AsyncStream<Wake>
    private let wake: AsyncStream<Wake>.Continuation

    init(url: URL, coordinator: ServerProbeCoordinator) {
        host = DownloadAgent.hostKey(url)
        self.coordinator = coordinator
        (wakes, wake) = AsyncStream.makeStream(of: Wake.self)
    }

    /// Joins the host's wait (a no-op but for the handler when this upload already waits: a probe
    /// that could not connect stays first in line).
    func join() {
        let wake = wake
        coordinator.join(id, host: host, justProbed: false) { wake.yield(.server($0)) }
    }

    /// A new path was read.
    func pathRead() { wake.yield(.path) }

    /// What an attempt learned of the server: any answer, or a connection made, releases the
    /// host's waiters; a connection that could not be made keeps this upload first in line.
    func report(reachable: Bool) { coordinator.report(id, host: host, reachable: reachable) }

    /// The connect timeout of an attempt to a host suspected gone.
    var connectTimeout: Duration { coordinator.connectTimeout(for: host) }

    func recordConnectTime(_ duration: Duration) { coordinator.recordConnectTime(duration, host: host) }

    /// Leaves the host's wait and ends the stream (the upload is over).
    func end() {
        coordinator.leave(id)
        wake.finish()
    }

    /// Leaves the host's wait (the path went; the upload waits for one).
    func leave() { coordinator.leave(id) }

    /// Waits for the host's turn to race a silent append (shared with downloads: one race at a
    /// time per host, at most two started a second): true when granted (then `finishRace`),
    /// false when refused (the host is waited for, or its last racer could not connect), nil
    /// when the task is cancelled first.
    func raceTurn() async -> Bool? {
        let (turns, turn) = AsyncStream.makeStream(of: Bool.self)
        let attempt = races.add(1, ordering: .relaxed).newValue
        coordinator.requestRace(id, attempt: attempt, host: host) { input in
            switch input {
            case .raceGranted: turn.yield(true)
            case .raceRefused: turn.yield(false)
            default: return
            }
            turn.finish()
        }
        let coordinator = coordinator, id = id
        return await withTaskCancellationHandler {
            for await granted in turns { return granted }
            return nil
        } onCancel: {
            turn.finish()
            coordinator.finishRace(id, attempt: attempt, reachable: nil)
        }
    }

    /// The race turn is over; `reachable` is what the racer learned (false refuses the host's
    /// other waiting races).
    func finishRace(reachable: Bool?) { coordinator.finishRace(id, reachable: reachable) }
}

extension DownloadAgent {
    /// Waits for `wait`'s next turn: the host's probe, a release, or a path to `gateHost` other
    /// than `startedOn`. Throws `cancelled` when the task is cancelled first.
    func nextTurn(of wait: UploadServerWait, wakes: inout AsyncStream<UploadServerWait.Wake>.Iterator,
                  startedOn: PathKey, gateHost: String?) async throws(DownloadError) -> UploadServerWait.Turn {
        wait.join()
        while true {
            guard let wake = await wakes.next(isolation: self), !Task.isCancelled else {
                wait.leave()
                throw DownloadError.cancelled
            }
            switch wake {
            case .server(.probeGranted(let connectTimeout)): return .probe(connectTimeout: connectTimeout)
            case .server(.serverReachable): return .released
            case .server: continue
            case .path:
                // A path read again unchanged (an address event elsewhere) is no reason to try.
                guard PathKey(pathWaiters.gatingPath(host: gateHost)) != startedOn || !hasUsablePath(toward: gateHost) else { continue }
                wait.leave()
                return .pathChanged
            }
        }
    }

    /// Feeds every path the agent reads to `wait` until the task is cancelled.
    func watchPaths(for wait: UploadServerWait) -> Task<Void, Never> {
        Task { [weak self] in
            while let self, await self.waitForNextPath() { wait.pathRead() }
        }
    }
}
