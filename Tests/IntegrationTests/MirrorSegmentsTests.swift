import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 34 item 1, ranges from several mirrors at once: `reachability download` against three
/// nginx servers on loopback, each capping a connection (`limit_rate`): a fast one, a slow one
/// and one serving different bytes of the same length. The file is right, the bad mirror is
/// dropped (a `sourceDropped` event), and the fast one carried most of the bytes, counted from
/// the servers' access logs.
@Suite("reachability download: ranges over three loopback mirrors", .serialized,
       .needsNginx)
struct MirrorSegmentsTests: DownloadScenarios {

    struct Mirrors {
        let fast: DownloadTestNginx, slow: DownloadTestNginx, bad: DownloadTestNginx
        let content: Data
        var fastURL: String { fast.url("slow/f.bin").absoluteString }
        var slowURL: String { slow.url("slow/f.bin").absoluteString }
        var badURL: String { bad.url("slow/f.bin").absoluteString }

        init(seed: UInt64, size: Int = 24 << 20) throws {
            fast = try DownloadTestNginx(slowRate: "4m", accessLog: true)
            slow = try DownloadTestNginx(slowRate: "1m", accessLog: true)
            bad = try DownloadTestNginx(slowRate: "2m", accessLog: true)
            content = F.randomData(count: size, seed: seed)
            var other = content
            for offset in stride(from: 0, to: other.count, by: 4096) { other[offset] ^= 0x5A }   // every block differs
            try fast.serve(content, at: "slow/f.bin")
            try slow.serve(content, at: "slow/f.bin")
            try bad.serve(other, at: "slow/f.bin")
        }

        func stop() { fast.stop(); slow.stop(); bad.stop() }

        /// Body bytes a server sent, from its access log (`status bytes range` lines).
        static func bytesSent(_ server: DownloadTestNginx) -> Int {
            server.loggedRequests.reduce(0) { $0 + (Int($1.split(separator: " ").dropFirst().first ?? "") ?? 0) }
        }
    }

    @Test func withSHA256TheFastMirrorCarriesMostAndTheBadOneIsDropped() async throws {
        let mirrors = try Mirrors(seed: 3421)
        defer { mirrors.stop() }
        let directory = try F.Directory("mirr34b")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-o", "f.bin",
                                  "--sha256", F.sha256(mirrors.content), mirrors.fastURL,
                                  "--mirror", mirrors.slowURL, "--mirror", mirrors.badURL], directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        try check(run, mirrors, directory)
    }

    @Test func withMetalinkPiecesTheBadMirrorIsDroppedWhereverItIsListed() async throws {
        let mirrors = try Mirrors(seed: 3422)
        defer { mirrors.stop() }
        let directory = try F.Directory("mirr34b")
        try Data(DownloadMetalinkTests.metalink(name: "f.bin", content: mirrors.content, wholeHash: false,
                                                urls: [(mirrors.badURL, 1), (mirrors.fastURL, 2), (mirrors.slowURL, 3)]).utf8)
            .write(to: directory.file("f.meta4"))
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--metalink", "f.meta4"],
                                 directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        try check(run, mirrors, directory, reason: "failed a piece hash", mustReachBad: true)
    }

    /// `download --metalink URL`: the document is fetched (at most 1 MiB), then used as a file is.
    @Test func aMetalinkByURLIsFetchedThenUsed() async throws {
        let mirrors = try Mirrors(seed: 3423, size: 4 << 20)
        defer { mirrors.stop() }
        let directory = try F.Directory("mirr34b")
        try mirrors.fast.serve(Data(DownloadMetalinkTests.metalink(name: "f.bin", content: mirrors.content, wholeHash: true,
                                                                   urls: [(mirrors.fastURL, 1), (mirrors.slowURL, 2)]).utf8), at: "f.meta4")
        try mirrors.fast.serve(Data(repeating: 0x20, count: (1 << 20) + 1), at: "huge.meta4")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--metalink",
                                  mirrors.fast.url("f.meta4").absoluteString], directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content))
        let huge = try CLIProcess(["download", "--state-dir", directory.file("state").path, "--metalink",
                                   mirrors.fast.url("huge.meta4").absoluteString], directory: directory.url)
        #expect(await huge.waitForExit() == 65, "\(huge.transcript)")
        #expect(huge.standardError.contains("larger than 1048576 bytes"), "\(huge.transcript)")
        let missing = try CLIProcess(["download", "--state-dir", directory.file("state").path, "--metalink",
                                      mirrors.fast.url("missing.meta4").absoluteString], directory: directory.url)
        #expect(await missing.waitForExit() == 1, "\(missing.transcript)")
        #expect(missing.standardError.contains("HTTP 404"), "\(missing.transcript)")
    }

    /// `queue add --mirror URL`: the agent spreads the job over its sources and drops the bad one.
    @Test(.needsRoot) func theAgentTakesMirrors() throws {
        let mirrors = try Mirrors(seed: 3424)
        defer { mirrors.stop() }
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("mirr34b")
        try AgentTests.allowDownloads(into: directory)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let added = try agent.control(["queue", "add", mirrors.fastURL, "-o", directory.file("f.bin").path,
                                       "--sha256", F.sha256(mirrors.content), "--mirror", mirrors.slowURL, "--mirror", mirrors.badURL])
        #expect(added.status == 0, "\(added)")
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""event":"completed""#) } != nil, "\(agent.output)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content))
        // Whether the planner reaches the bad mirror before the end depends on its rounds: when
        // the bad mirror sent bytes, it is dropped, and never another.
        let dropped = AgentSetURLTests.events(agent, "sourceDropped")
        let badSent = Mirrors.bytesSent(mirrors.bad)
        #expect(dropped.allSatisfy { $0["source"] as? String == mirrors.badURL }, "\(agent.output)")
        #expect(badSent == 0 || dropped.count == 1, "bad mirror sent \(badSent) bytes, \(dropped.count) dropped: \(agent.output)")
        let refused = try agent.control(["queue", "add", mirrors.fastURL, "--mirror", "ftp://x/f"])
        #expect(refused.status == 64, "\(refused)")
        _ = agent.terminate()
    }

    private func check(_ run: CLIProcess, _ mirrors: Mirrors, _ directory: F.Directory, reason: String? = nil,
                       mustReachBad: Bool = false) throws {
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content), "the bad mirror's bytes never stay in the file")
        let dropped = run.events.filter { $0["event"] as? String == "sourceDropped" }
        let badSent = Mirrors.bytesSent(mirrors.bad)
        #expect(dropped.allSatisfy { $0["source"] as? String == mirrors.badURL }, "only the bad mirror is dropped: \(run.transcript)")
        if mustReachBad {
            #expect(dropped.count == 1, "\(run.transcript)")
        } else {
            // Listed last, the bad mirror is reached only if the ramp's rounds come to it before
            // the end (under load they may not: its bytes are then never fetched).
            #expect(badSent == 0 || dropped.count == 1, "bad mirror sent \(badSent) bytes, \(dropped.count) dropped: \(run.transcript)")
        }
        if let reason { #expect((dropped.first?["reason"] as? String ?? "").contains(reason), "\(dropped)") }
        #expect(run.count("completed") == 1 && run.count("failed") == 0 && run.count("sourceChanged") == 0, "\(run.transcript)")
        let fast = Mirrors.bytesSent(mirrors.fast), slow = Mirrors.bytesSent(mirrors.slow), bad = badSent
        #expect(fast > slow && fast > bad && fast > mirrors.content.count / 2,
                "fast \(fast), slow \(slow), bad \(bad) bytes sent of \(mirrors.content.count)")
        let problems = run.lines.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
    }
}
