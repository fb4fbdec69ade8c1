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
        let isPage = (response.omittedDownloads ?? 0) > 0
        var previous = reports.withLock { reports in
            defer { reports = [:] }
            return reports
        }
        var current: [String: Encoded] = [:]
        current.reserveCapacity(downloads.count)
        var line = Array(shell[..<hole.lowerBound])
        line.reserveCapacity(shell.count + downloads.count * 256)
        line += Array(#""downloads":["#.utf8)
        for (index, report) in downloads.enumerated() {
            if index > 0 { line.append(UInt8(ascii: ",")) }
            let bytes: [UInt8]
            if let cached = previous[report.id], cached.report == report {
                bytes = cached.bytes
            } else {
                bytes = ControlCodec.encode(report)
            }
            line += bytes
            current[report.id] = Encoded(report: report, bytes: bytes)
        }
        line.append(UInt8(ascii: "]"))
        line += shell[(hole.upperBound)...]
        if isPage {
            // A page (`queue list` without --all) keeps the other rows' encodings for the next
            // whole list, updated in place; a whole list keeps only its own rows.
            for (id, encoded) in current { previous[id] = encoded }
            current = previous
        }
        reports.withLock { [current] in $0 = current }
        return line
    }
}
