import FoundationEssentials
import LinuxReachability
import ResumableDownloads

extension AgentService {
    /// Why `download` waits now: the rule holding it in line (`Download.waitReason`), or, while it
    /// waits for connectivity, what is wrong with `path` for it; nil when it does not wait.
    nonisolated static func waitReason(of download: Download, path: NetworkPath?) -> JobWaitReason? {
        if let reason = download.waitReason { return reason }
        guard download.state == .waitingForConnectivity else { return nil }
        return .forPath(path, allowsExpensive: download.options.allowsExpensive,
                        allowsConstrained: download.options.allowsConstrained)
    }

    /// Fills a report's `waitingReason` and `waitingFor` from `waitReason(of:path:)`, and its
    /// `waitsForACPower` (the job's own power rule).
    nonisolated static func addWaitReason(to report: inout AgentDownload, of download: Download, path: NetworkPath?) {
        if download.options.waitsForACPower { report.waitsForACPower = true }
        guard let reason = waitReason(of: download, path: path) else { return }
        report.waitingReason = reason.description
        report.waitingFor = reason.kind.rawValue
    }

    /// Waiting jobs per reason, the background sessions' tasks included (`reachability_downloads_waiting`).
    func waitReasonCounts(_ downloads: [Download]) -> [JobWaitReason.Kind: Int] {
        var counts: [JobWaitReason.Kind: Int] = [:]
        for download in downloads {
            if let reason = Self.waitReason(of: download, path: currentPath) { counts[reason.kind, default: 0] += 1 }
        }
        for reason in background.waitReasons { counts[reason.kind, default: 0] += 1 }
        return counts
    }
}
