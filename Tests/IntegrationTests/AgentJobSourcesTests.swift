import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 34: a queued job's own sources survive an agent that is SIGKILLed and started again.
/// Its proxy, its mirrors and its Metalink's piece hashes are kept in its resume record
/// (`JobSources`); the restarted agent goes on through the same proxy, from the same mirrors,
/// with the same piece checks. Without them the proxy test cannot finish (the client reaches the
/// origin only through the cache) and the Metalink test ends with the bad mirror's bytes (it is
/// the job's first URL, and the Metalink has no whole-file hash).
@Suite("Agent: a job's proxy, mirrors and piece hashes across a restart", .serialized, .needsRoot,
       .needsNginx)
struct AgentJobSourcesTests: DownloadScenarios {

    /// Lines a server logged so far.
    static func requests(_ server: DownloadTestNginx) -> Int { server.loggedRequests.count }

    @Test func mirrorsAndPieceHashesOutliveASIGKILL() throws {
        try mirrorsAndPiecesOutliveASIGKILL(pieceLength: 256 << 10, seed: 3441)
    }

    /// A Metalink of 12,288 pieces (2 KiB each over 24 MiB), more than the record holds
    /// (`JobSources.maximumPieces`, 8192): they live in a side file beside the record, read back
    /// (and checked against the digest the record keeps) by the restarted agent, and removed with
    /// the record once the job completes.
    @Test func moreThan8192PieceHashesOutliveASIGKILL() throws {
        try mirrorsAndPiecesOutliveASIGKILL(pieceLength: 2 << 10, seed: 3443)
    }

    private func mirrorsAndPiecesOutliveASIGKILL(pieceLength: Int, seed: UInt64) throws {
        let mirrors = try MirrorSegmentsTests.Mirrors(seed: seed)
        defer { mirrors.stop() }
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("srcs34d")
        try AgentTests.allowDownloads(into: directory)
        // The bad mirror first: it is the job's URL, so the record would name it alone.
        try Data(DownloadMetalinkTests.metalink(name: "f.bin", content: mirrors.content, wholeHash: false,
                                                urls: [(mirrors.badURL, 1), (mirrors.fastURL, 2), (mirrors.slowURL, 3)],
                                                pieceLength: pieceLength).utf8)
            .write(to: directory.file("f.meta4"))
        var first: AgentProcess? = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        defer { first?.stop() }
        let added = try first!.control(["queue", "add", "--metalink", directory.file("f.meta4").path,
                                        "-o", directory.file("f.bin").path])
        #expect(added.status == 0, "\(added)")
        #expect(F.waitSync(timeout: .seconds(30)) { (try? first!.list())?.first.map { ($0["bytesReceived"] as? Int ?? 0) > 2 << 20 } == true },
                "\(first!.output)")
        let pieceFiles = { (try? FileManager.default.contentsOfDirectory(atPath: directory.file("state/records").path))?
            .filter { $0.hasSuffix(".pieces") } ?? [] }
        let isLarge = mirrors.content.count / pieceLength > JobSources.maximumPieces
        #expect(pieceFiles().count == (isLarge ? 1 : 0), "over 8192 piece hashes are kept beside the record: \(pieceFiles())")
        first!.stop()   // SIGKILL
        first = nil
        let before = (fast: Self.requests(mirrors.fast), slow: Self.requests(mirrors.slow), bad: Self.requests(mirrors.bad))

        let second = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        defer { second.stop() }
        #expect(second.waitForLine(timeout: .seconds(60)) { $0.contains(#""event":"completed""#) } != nil, "\(second.output)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content), "the bad mirror's bytes never stay")
        // The restored job used its mirrors, and checked the pieces of whatever the bad one sent.
        let after = (fast: Self.requests(mirrors.fast) - before.fast, slow: Self.requests(mirrors.slow) - before.slow,
                     bad: Self.requests(mirrors.bad) - before.bad)
        #expect(after.fast + after.slow > 0, "the mirrors were asked after the restart: \(after)")
        let dropped = AgentSetURLTests.events(second, "sourceDropped")
        #expect(after.bad == 0 || dropped.contains { ($0["reason"] as? String ?? "").contains("failed a piece hash") },
                "bad asked \(after.bad) times after the restart, dropped: \(dropped)")
        #expect(!second.output.contains("invalid resume record"), "the record and its side file were read back: \(second.output)")
        #expect(F.waitSync(timeout: .seconds(10)) { pieceFiles().isEmpty }, "the side file goes with the record: \(pieceFiles())")
        _ = second.terminate()
    }

    @Test func aJobsOwnProxyOutlivesASIGKILL() throws {
        // The origin 2 MB/s per connection: the job is in flight when killed.
        let site = try SiteCacheLab(cache: .nginxSlice, originRate: "2m")
        defer { site.close() }
        let content = F.randomData(count: 16 << 20, seed: 3442)
        try site.serve(content, at: "f.bin", modified: Date(timeIntervalSince1970: 1_700_000_000))
        let directory = try F.Directory("srcs34d")
        try AgentTests.allowDownloads(into: directory)
        // The agent runs in the client namespace, whose only way to the origin is the proxy; its
        // own setting is no proxy, so only the job's brings it there.
        let inClient = ["ip", "netns", "exec", site.client]
        var first: AgentProcess? = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--no-proxy"],
                                                    prefix: inClient)
        defer { first?.stop() }
        let added = try first!.control(["queue", "add", site.url("f.bin"), "-o", directory.file("f.bin").path,
                                        "--proxy", SiteCacheLab.proxyURL, "--sha256", F.sha256(content)])
        #expect(added.status == 0, "\(added)")
        #expect(F.waitSync(timeout: .seconds(30)) { (try? first!.list())?.first.map { ($0["bytesReceived"] as? Int ?? 0) > 1 << 20 } == true },
                "\(first!.output)")
        first!.stop()   // SIGKILL
        first = nil

        let second = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--no-proxy"], prefix: inClient)
        defer { second.stop() }
        #expect(second.waitForLine(timeout: .seconds(60)) { $0.contains(#""event":"completed""#) } != nil, "\(second.output)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content))
        let resumed = AgentSetURLTests.events(second, "resumed").first ?? AgentSetURLTests.events(second, "started").first
        #expect(resumed?["proxy"] as? String == SiteCacheLab.proxyURL, "\(second.output)")
        _ = second.terminate()
    }
}
