import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 31: a background task's resume data carries the engine's whole resume state. A task
/// fetched in segments is cancelled with resume data mid-transfer and continued from it; nginx's
/// access log shows the server sent only what was missing (each request's compare overlap aside),
/// where resume data that kept the prefix alone refetched every stored range.
@Suite("Background resume data in network namespaces", .serialized, .needsRoot,
       .needsNginx)
struct BackgroundResumeDataTests {
    static let size = 16 << 20

    /// The stored bytes the sealed blob promises: its verified prefix plus its ranges (the JSON
    /// payload between the 14-byte header and the 32-byte MAC; `ResumeData`'s layout).
    static func storedBytes(_ blob: Data) -> (prefix: Int, ranges: [[Int]])? {
        guard blob.count > 46,
              let payload = try? JSONSerialization.jsonObject(with: blob.dropFirst(14).dropLast(32)) as? [String: Any],
              let prefix = payload["offset"] as? Int else { return nil }
        return (prefix, payload["ranges"] as? [[Int]] ?? [])
    }

    @Test func aSegmentedTaskResumedFromItsResumeDataFetchesNoByteItHad() async throws {
        let lab = try BackgroundLab(rate: "1m", files: ["big.bin": Self.size], seed: 3101)
        defer { lab.close() }
        // Four connections per host: nginx caps each at 1 MiB/s, so the engine opens segments.
        let probe = try lab.probe("segments", ["--url", lab.url("big.bin"), "--connections", "4"])
        #expect(await probe.waitForLine(timeout: .seconds(40)) { line in
            line["call"]?.string == "wrote" && (line["total"]?.int ?? 0) >= 6 << 20
        } != nil, "\(probe.transcript)")
        probe.send("cancel-with-data 1")
        let answer = try #require(await probe.waitForCall("resumeData"), "\(probe.transcript)")
        let blob = try #require(answer.object["data"]?.string.flatMap { Data(base64Encoded: $0) }, "\(probe.transcript)")
        let stored = try #require(Self.storedBytes(blob), "the blob's payload")
        let rangeBytes = stored.ranges.reduce(0) { $0 + ($1.count == 2 ? $1[1] - $1[0] : 0) }
        // Segments past the prefix were stored: the case the resume state used to drop.
        #expect(!stored.ranges.isEmpty && rangeBytes >= 1 << 20, "ranges \(stored.ranges), prefix \(stored.prefix)")
        #expect(await probe.waitForCall("completed", task: 1) != nil, "\(probe.transcript)")
        _ = await lab.net.bytesSentWhenIdle()
        let requestsBefore = lab.net.servedSpans.count

        probe.send("resume-data-download")
        let completed = try #require(await probe.waitForCall("completed", task: 2, timeout: .seconds(60)), "\(probe.transcript)")
        #expect(completed.object["code"] == nil || completed.object["code"] == .null, "\(probe.transcript)")
        let finished = probe.calls("finished").first { $0.object["task"]?.int == 2 }
        #expect(finished?.object["sha256"]?.string == lab.sha256("big.bin"), "\(probe.transcript)")
        _ = await lab.net.bytesSentWhenIdle()
        let after = Array(lab.net.servedSpans.dropFirst(requestsBefore))
        var had = RangeSet(0..<stored.prefix)
        for pair in stored.ranges where pair.count == 2 { had.insert(contentsOf: pair[0]..<pair[1]) }
        // Bytes sent again that the resume data said were stored; each request may fetch its
        // compare overlap (`ResumeOverlap`) before its start again, nothing else.
        let refetched = after.reduce(0) { total, span in
            total + had.intersection(RangeSet(span)).ranges.reduce(0) { $0 + $1.count }
        }
        let allowed = after.count * Int(ResumeOverlap.maximum)
        print("background-resume-data: stored \(stored.prefix) + \(rangeBytes) in \(stored.ranges.count) ranges; "
              + "\(after.count) requests after the resume sent \(refetched) stored bytes again (allowed \(allowed))")
        #expect(!after.isEmpty && refetched <= allowed,
                "\(refetched) stored bytes sent again (allowed \(allowed)); stored \(stored), served after the resume \(after)")
        probe.send("quit")
        _ = await probe.waitForExit()
    }
}
