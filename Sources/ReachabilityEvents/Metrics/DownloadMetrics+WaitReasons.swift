import FoundationEssentials
import ResumableDownloads

extension DownloadMetrics {
    /// `reachability_downloads_waiting{reason="lowDiskSpace"}`: unfinished jobs held back now,
    /// by `JobWaitReason.Kind` (every reason listed, 0 included, so a dashboard's series exist
    /// before the first wait). Jobs waiting for a server are not here: they are counted by
    /// `reachability_downloads_waiting_for_server`.
    package static func waitReasonFamily(_ counts: [JobWaitReason.Kind: Int]) -> MetricFamily {
        MetricFamily("reachability_downloads_waiting", .gauge,
                     help: "Downloads held back now, by reason (no path, constrained or expensive path, on battery, low disk space, not before a date, a time window).",
                     samples: JobWaitReason.Kind.allCases.map { MetricSample(Double(counts[$0] ?? 0), labels: [("reason", $0.rawValue)]) })
    }
}
