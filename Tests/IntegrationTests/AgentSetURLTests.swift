import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// Issue 34 item 2 for the agent: `reachability queue set-url ID URL` replaces a job's expired
/// link and keeps its bytes. nginx on loopback: `/expiring/` answers 403 once `www/expired`
/// exists, `/slow/` serves the same file (a hard link: same inode, so the same ETag and
/// Last-Modified, as a re-signed URL for the same object) or, in the second test, another one.
/// The agent watches a namespace of its own with a satisfied path (`ConnectedNamespace`).
@Suite("Agent: queue set-url (loopback nginx)", .serialized, .needsRoot,
       .needsNginx)
struct AgentSetURLTests: DownloadScenarios {

    static func events(_ agent: AgentProcess, _ name: String) -> [[String: Any]] {
        agent.events.filter { $0["type"] as? String == "download" && $0["event"] as? String == name }
    }

    @Test func anExpiredLinkReplacedBySetURLContinuesAtItsOffset() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadExpiredLinkTests.nginx()
        defer { nginx.stop() }
        let directory = try F.Directory("seturl")
        let content = F.randomData(count: 16 << 20, seed: 341)   // 8 s at 2 MB/s: in flight when paused
        try nginx.serve(content, at: "expiring/movie.bin")
        try FileManager.default.linkItem(at: nginx.root.appendingPathComponent("expiring/movie.bin"),
                                         to: nginx.root.appendingPathComponent("slow/movie.bin"))
        try AgentTests.allowDownloads(into: directory)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }

        // One connection: the figure is what the link change costs, not the segment ramp's overlaps.
        let added = try agent.control(["queue", "add", nginx.url("expiring/movie.bin").absoluteString,
                                       "-o", directory.file("movie.bin").path, "--sha256", F.sha256(content), "--connections", "1"])
        #expect(added.status == 0, "\(added)")
        let id = String(added.standardOutput.prefix(8))
        #expect(F.waitSync { (try? agent.list())?.first.map { ($0["bytesReceived"] as? Int ?? 0) > 1 << 20 } == true })

        // The link expires while the connection is down (paused): the next request gets 403,
        // and the job fails keeping its bytes.
        #expect(try agent.control(["queue", "pause", id]).status == 0)
        try Data().write(to: nginx.root.appendingPathComponent("expired"))
        #expect(try agent.control(["queue", "resume", id]).status == 0)
        #expect(agent.waitForLine { $0.contains(#""event":"failed""#) && $0.contains(#""httpStatus":403"#) } != nil, "\(agent.output)")
        let stored = try #require(Self.events(agent, "paused").last?["bytes"] as? Int)

        let replaced = try agent.control(["queue", "set-url", id, nginx.url("slow/movie.bin").absoluteString])
        #expect(replaced.status == 0, "\(replaced)")
        #expect(replaced.standardOutput.contains("/slow/movie.bin -> "), "\(replaced)")
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""event":"completed""#) } != nil, "\(agent.output)")
        #expect(F.sha256(fileAt: directory.file("movie.bin")) == F.sha256(content))

        // It went on from its stored offset (no restart) from the new URL.
        let resumed = try #require(Self.events(agent, "resumed").last, "\(agent.output)")
        #expect((resumed["url"] as? String ?? "").hasSuffix("/slow/movie.bin"), "\(resumed)")
        #expect((resumed["offset"] as? Int ?? 0) >= stored - (1 << 20), "\(resumed) after \(stored)")
        #expect(Self.events(agent, "restarted").isEmpty, "\(agent.output)")
        #expect((try agent.list().first?["url"] as? String ?? "").hasSuffix("/slow/movie.bin"))
        // Bytes nginx sent twice (its access log, `$body_bytes_sent`): at most 1 MiB.
        let twice = DownloadExpiredLinkTests.bytesSentTwice(nginx.loggedRequests)
        print("queue set-url after a 403: stored \(stored) bytes, resumed at \(resumed["offset"] as? Int ?? -1), \(twice) bytes sent twice")
        #expect(twice <= 1 << 20, "\(twice) bytes sent twice: \(nginx.loggedRequests)")
        _ = agent.terminate()
    }

    @Test func aRunningJobMovedToADifferentFileStartsOverWithAReason() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadExpiredLinkTests.nginx()
        defer { nginx.stop() }
        let directory = try F.Directory("seturl")
        let content = F.randomData(count: 8 << 20, seed: 342)
        let other = F.randomData(count: 8 << 20, seed: 343)   // same length, another file (another ETag)
        try nginx.serve(content, at: "expiring/movie.bin")
        try nginx.serve(other, at: "slow/movie.bin")
        try AgentTests.allowDownloads(into: directory)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }

        let added = try agent.control(["queue", "add", nginx.url("expiring/movie.bin").absoluteString,
                                       "-o", directory.file("movie.bin").path, "--connections", "1"])
        #expect(added.status == 0, "\(added)")
        let id = String(added.standardOutput.prefix(8))
        #expect(F.waitSync { (try? agent.list())?.first.map { ($0["bytesReceived"] as? Int ?? 0) > 1 << 20 } == true })

        // Moved while it runs: checkpointed, then the new URL's other file is fetched from zero.
        let replaced = try agent.control(["queue", "set-url", id, nginx.url("slow/movie.bin").absoluteString])
        #expect(replaced.status == 0, "\(replaced)")
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""event":"completed""#) } != nil, "\(agent.output)")
        let restarted = try #require(Self.events(agent, "restarted").first, "\(agent.output)")
        #expect(!(restarted["reason"] as? String ?? "").isEmpty, "\(restarted)")
        #expect(F.sha256(fileAt: directory.file("movie.bin")) == F.sha256(other))

        // A finished job has nothing left to fetch: refused, with the reason.
        let late = try agent.control(["queue", "set-url", id, nginx.url("slow/movie.bin").absoluteString])
        #expect(late.status == 1, "\(late)")
        #expect(late.standardError.contains("has already completed"), "\(late)")
        _ = agent.terminate()
    }
}
