import FoundationEssentials
import ResumableDownloads
import Synchronization

/// The agent's download counters. Fed from each download's event and progress streams (two
/// tasks per download, hence a `Mutex` rather than actor hops on every progress update).
///
/// Aggregates only, never a series per download: URLs can carry credentials and tokens, and
/// metrics files are read by other users (node_exporter) and shipped off the machine; per-download
/// detail is in `queue list`.
package final class DownloadMetrics: Sendable {
    /// Counter values.
    package struct Counters: Sendable, Equatable {
        /// Bytes received by this process's transfers (bytes already on disk at restore not counted).
        package var receivedBytes: Int64 = 0
        /// `retrying` events: an attempt failed and another follows.
        package var retries = 0
        /// `restarted` events: stored bytes were dropped and the download began again at zero.
        package var restartsFromZero = 0
        package var completed = 0
        package var failed = 0
        package var cancelled = 0
        /// `waitingForServer` events: a download began waiting for a server that did not answer on
        /// a working path (one per outage, however many probes it took).
        package var serverWaits = 0
        /// Seconds spent in server waits that have ended (`serverWaitSeconds(at:)` adds the open ones).
        package var endedServerWaitSeconds: Double = 0
    }

    private struct State {
        package var counters = Counters()
        /// The last progress offset seen per download, so only growth is counted.
        package var offsets: [UUID: Int64] = [:]
        /// When each download now waiting for a server began to; its next event ends the wait
        /// (`resumed` when a probe got an answer, or `retrying`, `waitingForConnectivity`,
        /// `paused`, `failed`...). The state stays `running` meanwhile, so this is the only place a
        /// fleet sees such waits.
        package var serverWaitsSince: [UUID: Date] = [:]
        /// Each running download's connections per path (interface, or "default").
        package var connections: [UUID: [String: Int]] = [:]
    }

    private let state = Mutex(State())
    /// When counting started (the agent's start).
    package let startedAt: Date

    package init(startedAt: Date) {
        self.startedAt = startedAt
    }

    package var counters: Counters { state.withLock { $0.counters } }

    /// Downloads waiting for a server now.
    package var waitingForServer: Int { state.withLock { $0.serverWaitsSince.count } }

    /// Seconds spent waiting for servers since start, the waits still open counted up to `now`.
    package func serverWaitSeconds(at now: Date) -> Double {
        state.withLock { Self.serverWaitSeconds(in: $0, at: now) }
    }

    /// Ended waits plus the open ones up to `now` (a wall clock stepped back never makes a wait
    /// negative).
    private static func serverWaitSeconds(in state: State, at now: Date) -> Double {
        state.serverWaitsSince.values.reduce(state.counters.endedServerWaitSeconds) { $0 + max(0, now.timeIntervalSince($1)) }
    }

    /// Starts following a download whose stored bytes are `offset` (not counted as received).
    package func follow(_ id: UUID, offset: Int64) {
        state.withLock { state in
            if state.offsets[id] == nil { state.offsets[id] = offset }
        }
    }

    /// A progress offset: growth since the last one counts as received; a smaller one (a restart
    /// from zero, a resume from an earlier verified offset) only moves the baseline.
    package func progressed(_ id: UUID, to offset: Int64) {
        state.withLock { state in
            let previous = state.offsets[id] ?? offset
            if offset > previous { state.counters.receivedBytes += offset - previous }
            state.offsets[id] = offset
        }
    }

    /// A download's connections now (none once it stops transferring).
    package func connections(_ id: UUID, _ connections: DownloadConnections) {
        state.withLock { state in
            var byPath: [String: Int] = [:]
            for path in connections.paths { byPath[path.interface ?? "default", default: 0] += path.connections }
            state.connections[id] = byPath.isEmpty ? nil : byPath
        }
    }

    /// A download event, at `now`.
    package func record(_ event: DownloadEvent, for id: UUID, at now: Date = Date()) {
        state.withLock { state in
            if case .waitingForServer = event {
                if state.serverWaitsSince[id] == nil {
                    state.serverWaitsSince[id] = now
                    state.counters.serverWaits += 1
                }
            } else if let since = state.serverWaitsSince.removeValue(forKey: id) {
                state.counters.endedServerWaitSeconds += max(0, now.timeIntervalSince(since))
            }
            switch event {
            case .paused, .completed, .failed: state.connections[id] = nil
            default: break
            }
            switch event {
            case .retrying: state.counters.retries += 1
            case .restartedFromZero: state.counters.restartsFromZero += 1
            case .completed: state.counters.completed += 1
            case .failed(let error):
                if error == .cancelled { state.counters.cancelled += 1 } else { state.counters.failed += 1 }
            case .started, .resumed, .waitingForConnectivity, .waitingForServer, .waiting, .paused, .sourceDropped: break
            }
        }
    }

    /// Every state name `queue list` uses, in exposition order.
    package static let stateNames = ["queued", "running", "waitingForConnectivity", "paused", "completed", "failed"]

    /// The download families at `now`; `counts` holds downloads per state name (as `agent status`
    /// reports).
    package func families(counts: [String: Int], at now: Date = Date()) -> [MetricFamily] {
        // One snapshot, so a wait ending meanwhile is in both server-wait families or in neither.
        let (counters, waiting, waitSeconds, connections) = state.withLock { state in
            var byPath: [String: Int] = [:]
            for paths in state.connections.values { for (path, count) in paths { byPath[path, default: 0] += count } }
            return (state.counters, state.serverWaitsSince.count, Self.serverWaitSeconds(in: state, at: now), byPath)
        }
        return [
            MetricFamily("reachability_downloads", .gauge,
                         help: "Downloads the agent knows, by state (every state listed, 0 included).",
                         samples: Self.stateNames.map { MetricSample(Double(counts[$0] ?? 0), labels: [("state", $0)]) }),
            MetricFamily("reachability_download_received_bytes", .counter, unit: "bytes",
                         help: "Bytes received by downloads since start (bytes already on disk when a download was restored not counted).",
                         created: startedAt, value: Double(counters.receivedBytes)),
            MetricFamily("reachability_download_retries", .counter,
                         help: "Failed attempts followed by another (the 'retrying' event) since start.",
                         created: startedAt, value: Double(counters.retries)),
            MetricFamily("reachability_download_restarts_from_zero", .counter,
                         help: "Downloads that dropped their stored bytes and began again at byte zero (the 'restarted' event) since start.",
                         created: startedAt, value: Double(counters.restartsFromZero)),
            MetricFamily("reachability_downloads_finished", .counter,
                         help: "Downloads that ended since start, by result.",
                         created: startedAt, samples: [
                            MetricSample(Double(counters.completed), labels: [("result", "completed")]),
                            MetricSample(Double(counters.failed), labels: [("result", "failed")]),
                            MetricSample(Double(counters.cancelled), labels: [("result", "cancelled")]),
                         ]),
            MetricFamily("reachability_downloads_waiting_for_server", .gauge,
                         help: "Downloads waiting for a server that does not answer on a working path (counted as running in reachability_downloads).",
                         value: Double(waiting)),
            MetricFamily("reachability_download_server_waits", .counter,
                         help: "Times a download began waiting for a server that did not answer on a working path (the 'waitingForServer' event) since start.",
                         created: startedAt, value: Double(counters.serverWaits)),
            MetricFamily("reachability_download_connections", .gauge,
                         help: "Connections downloads hold open now, by path (the interface they are bound to; default when the routing table chooses).",
                         samples: connections.keys.sorted().map { MetricSample(Double(connections[$0] ?? 0), labels: [("interface", $0)]) }),
            MetricFamily("reachability_download_server_wait_seconds", .counter, unit: "seconds",
                         help: "Seconds downloads spent waiting for servers since start, summed over downloads (open waits counted up to now).",
                         created: startedAt, value: waitSeconds),
        ]
    }
}
