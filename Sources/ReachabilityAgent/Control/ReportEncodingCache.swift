import Synchronization

/// Each download report's JSON from the last `list`, reused while the report is unchanged:
/// encoding 10,000 reports through JSONEncoder took about half a second per `queue list`, and
/// between two lists only the few running downloads (and those that changed state) differ.
/// The envelope and every changed report still go through `ControlCodec`, so the line is what
/// encoding the whole response would give.
final class ReportEncodingCache: Sendable {
    /// One per process: reports are keyed by download id.
    static let shared = ReportEncodingCache()

    private struct Encoded: Sendable {
        var report: AgentDownload
        var bytes: [UInt8]
    }

    private let reports = Mutex<[String: Encoded]>([:])

    /// `ControlCodec.encode(response)`, its `downloads` from the cache where unchanged.
    func encode(_ response: ControlResponse) -> [UInt8] {
        guard let downloads = response.downloads else { return ControlCodec.encode(response) }
        var envelope = response
        envelope.downloads = []
        let shell = ControlCodec.encode(envelope)
        let marker = Array(#""downloads":[]"#.utf8)
        guard let hole = shell.firstRange(of: marker) else { return ControlCodec.encode(response) }
        // Taken out while in use, so it is changed in place; a list made meanwhile encodes anew.
        // Updated in place for a page and a whole list alike: a `queue list --all` of 10,000
        // built a new table and freed the old one (freeing alone was 3.5 % of the agent's
        // samples while lists ran, perf, issue 29).
        var cached = reports.withLock { reports in
            defer { reports = [:] }
            return reports
        }
        var line = Array(shell[..<hole.lowerBound])
        line.reserveCapacity(shell.count + downloads.count * 256)
        line += Array(#""downloads":["#.utf8)
        for (index, report) in downloads.enumerated() {
            if index > 0 { line.append(UInt8(ascii: ",")) }
            if let entry = cached[report.id], entry.report == report {
                line += entry.bytes
            } else {
                let bytes = ControlCodec.encode(report)
                line += bytes
                cached[report.id] = Encoded(report: report, bytes: bytes)
            }
        }
        line.append(UInt8(ascii: "]"))
        line += shell[(hole.upperBound)...]
        // Rows of downloads no longer listed are dropped by a whole list once they could be as
        // many as the listed ones: the table stays within twice the list.
        let isPage = (response.omittedDownloads ?? 0) > 0
        if !isPage, cached.count > 2 * downloads.count + 64 {
            let listed = Set(downloads.map(\.id))
            cached = cached.filter { listed.contains($0.key) }
        }
        let current = cached
        reports.withLock { [current] in $0 = current }
        return line
    }
}
