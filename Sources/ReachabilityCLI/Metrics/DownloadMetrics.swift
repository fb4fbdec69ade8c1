import FoundationEssentials
import ResumableDownloads
import Synchronization

/// The agent's download counters. Fed from each download's event and progress streams (two
/// tasks per download, hence a `Mutex` rather than actor hops on every progress update).
///
/// Aggregates only, never a series per download: URLs can carry credentials and tokens, and
/// metrics files are read by other users (node_exporter) and shipped off the machine; per-download
/// detail is in `queue list`.
final class DownloadMetrics: Sendable {
    /// Counter values.
    struct Counters: Sendable, Equatable {
        /// Bytes received by this process's transfers (bytes already on disk at restore not counted).
        var receivedBytes: Int64 = 0
        /// `retrying` events: an attempt failed and another follows.
        var retries = 0
        /// `restarted` events: stored bytes were dropped and the download began again at zero.
        var restartsFromZero = 0
        var completed = 0
        var failed = 0
        var cancelled = 0
    }

    private struct State {
        var counters = Counters()
        /// The last progress offset seen per download, so only growth is counted.
        var offsets: [UUID: Int64] = [:]
    }

    private let state = Mutex(State())
    /// When counting started (the agent's start).
    let startedAt: Date

    init(startedAt: Date) {
        self.startedAt = startedAt
    }

    var counters: Counters { state.withLock { $0.counters } }

    /// Starts following a download whose stored bytes are `offset` (not counted as received).
    func follow(_ id: UUID, offset: Int64) {
        state.withLock { state in
            if state.offsets[id] == nil { state.offsets[id] = offset }
        }
    }

    /// A progress offset: growth since the last one counts as received; a smaller one (a restart
    /// from zero, a resume from an earlier verified offset) only moves the baseline.
    func progressed(_ id: UUID, to offset: Int64) {
        state.withLock { state in
            let previous = state.offsets[id] ?? offset
            if offset > previous { state.counters.receivedBytes += offset - previous }
            state.offsets[id] = offset
        }
    }

    /// A download event.
    func record(_ event: DownloadEvent, for id: UUID) {
        state.withLock { state in
            switch event {
            case .retrying: state.counters.retries += 1
            case .restartedFromZero: state.counters.restartsFromZero += 1
            case .completed: state.counters.completed += 1
            case .failed(let error):
                if error == .cancelled { state.counters.cancelled += 1 } else { state.counters.failed += 1 }
            case .started, .resumed, .waitingForConnectivity, .waitingForServer, .paused: break
            }
        }
    }

    /// Every state name `queue list` uses, in exposition order.
    static let stateNames = ["queued", "running", "waitingForConnectivity", "paused", "completed", "failed"]

    /// The download families; `counts` holds downloads per state name (as `agent status` reports).
    func families(counts: [String: Int]) -> [MetricFamily] {
        let counters = counters
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
        ]
    }
}
