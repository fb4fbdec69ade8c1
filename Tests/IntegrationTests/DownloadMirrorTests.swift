import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 34 item 1, one source at a time: `reachability download -o F --sha256 HEX URL
/// --mirror URL...` against three nginx servers on loopback: one serving different bytes of
/// the same length (and, with the same modification time, the same ETag: validators cannot tell
/// it apart, only the SHA-256 can), one rate-limited that dies mid-transfer, one fast.
@Suite("reachability download: mirrors one at a time (three loopback nginx)", .serialized,
       .needsNginx)
struct DownloadMirrorTests: DownloadScenarios {

    @Test func aBadMirrorIsCaughtAndADeadOneLeftKeepingItsBytes() async throws {
        let bad = try DownloadTestNginx(), slow = try DownloadTestNginx(slowRate: "1m"), fast = try DownloadTestNginx()
        defer { bad.stop(); slow.stop(); fast.stop() }
        let directory = try F.Directory("mirror")
        let content = F.randomData(count: 8 << 20, seed: 3401)
        let other = F.randomData(count: 8 << 20, seed: 3402)
        try bad.serve(other, at: "f.bin")
        try slow.serve(content, at: "slow/f.bin")
        try fast.serve(content, at: "f.bin")
        // The same Last-Modified and length everywhere: nginx's ETags are equal too.
        let stamp = Date(timeIntervalSince1970: 1_700_000_000)
        for file in [bad.root.appendingPathComponent("f.bin"), slow.root.appendingPathComponent("slow/f.bin"),
                     fast.root.appendingPathComponent("f.bin")] {
            try FileManager.default.setAttributes([.modificationDate: stamp], ofItemAtPath: file.path)
        }
        let slowURL = slow.url("slow/f.bin").absoluteString, fastURL = fast.url("f.bin").absoluteString
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-o", "f.bin",
                                  "--sha256", F.sha256(content), "--connections", "1", bad.url("f.bin").absoluteString,
                                  "--mirror", slowURL, "--mirror", fastURL], directory: directory.url)
        // The bad mirror's whole file fails the SHA-256: discarded, fetched again from the next.
        #expect(await run.waitForEvent { $0["event"] as? String == "progress" && $0["url"] as? String == slowURL
                                         && ($0["bytes"] as? Int ?? 0) >= 1 << 20 }, "\(run.transcript)")
        slow.stop()   // the slow mirror dies mid-transfer: the next takes over
        #expect(await run.waitForExit() == 0, "\(run.transcript)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content), "the bad mirror's bytes never reach the file")

        let changes = run.events.filter { $0["event"] as? String == "sourceChanged" }
        #expect(changes.count == 2, "\(run.transcript)")
        #expect(changes.first?["url"] as? String == slowURL)
        #expect((changes.first?["reason"] as? String ?? "").contains("its bytes were discarded"), "\(changes)")
        #expect(changes.last?["from"] as? String == slowURL && changes.last?["url"] as? String == fastURL)
        // The fast mirror serves the same length and validator: the slow one's bytes are kept.
        let resumed = try #require(run.events.last { $0["event"] as? String == "resumed" }, "\(run.transcript)")
        #expect(resumed["url"] as? String == fastURL && (resumed["offset"] as? Int ?? 0) >= 1 << 20, "\(resumed)")
        #expect(run.count("failed") == 0 && run.count("completed") == 1, "\(run.transcript)")
        let problems = run.lines.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
    }

    /// A mirror answering 503 is left at its first retry, not waited out with back-off.
    @Test func aBusyMirrorIsLeftAtOnce() async throws {
        let busy = try DownloadTestNginx(locations: "location /busy/ { return 503; }"), fast = try DownloadTestNginx()
        defer { busy.stop(); fast.stop() }
        let directory = try F.Directory("mirror")
        let content = F.randomData(count: 1 << 20, seed: 3404)
        try fast.serve(content, at: "busy/f.bin")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--same-file",
                                  busy.url("busy/f.bin").absoluteString, fast.url("busy/f.bin").absoluteString], directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(20)) == 0, "\(run.transcript)")
        let change = try #require(run.events.first { $0["event"] as? String == "sourceChanged" }, "\(run.transcript)")
        #expect((change["reason"] as? String ?? "").contains("503"), "\(change)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content))
    }

    @Test func withoutMirrorsLeftTheLastFailureStands() async throws {
        let bad = try DownloadTestNginx()
        defer { bad.stop() }
        let directory = try F.Directory("mirror")
        try bad.serve(F.randomData(count: 1 << 20, seed: 3403), at: "f.bin")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-o", "f.bin",
                                  "--sha256", String(repeating: "0", count: 64), "--same-file",
                                  bad.url("f.bin").absoluteString, bad.url("missing.bin").absoluteString], directory: directory.url)
        #expect(await run.waitForExit() == 1, "\(run.transcript)")
        #expect(run.count("sourceChanged") == 1 && run.count("failed") == 1, "\(run.transcript)")
        #expect(run.standardError.contains("HTTP 404"), "\(run.transcript)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("f.bin").path))
    }
}
