import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// A transfer that stops receiving is suspected after a silence several times its recent gaps
/// (at least `minimumStallSuspicion`) and raced by a fresh connection asking for the rest: the
/// first to deliver the next byte carries on, the other is closed. No TCP retransmission timer
/// and no stall timeout decides when the download continues.
@Suite("Racing a stalled transfer", .serialized)
struct DownloadRaceTests: DownloadScenarios {

    static let content = F.randomData(count: 2 << 20 + 7, seed: 81)
    static let half = content.count / 2
    static let etag = "\"r1\""

    func agent(_ directory: F.Directory) throws -> DownloadAgent {
        try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.stallTimeout = .seconds(30)   // far beyond the bounds below: only the race can help
            $0.minimumStallSuspicion = .milliseconds(300)
            // The races of one connection (several have their own rules: SegmentedDownloadTests).
            $0.maximumConnectionsPerHost = 1
        })
    }

    /// An honest answer for `content`, its head sent only after `delay`.
    static func honest(_ request: Server.Request, answeringAfter delay: Duration) -> Reply {
        var reply = Reply.honest(request, content: content, etag: etag)
        reply.headDelay = delay
        return reply
    }

    /// Downloads `content` from `server` with such an agent to completion, checks the file's
    /// SHA-256, and returns the download's events and how long it took.
    func fetch(from server: Server) async throws -> (log: F.EventLog, elapsed: Duration) {
        let directory = try F.Directory()
        let agent = try agent(directory)
        let download = try await agent.download(from: server.url(), to: directory.file("out.bin"),
                                                options: .init(expectedSHA256: F.sha256(Self.content)))
        let log = F.EventLog(download)
        let started = ContinuousClock.now
        _ = try await F.finish(download, log: log, timeout: .seconds(20))
        let elapsed = ContinuousClock.now - started
        await agent.shutdown()
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(Self.content))
        return (log, elapsed)
    }

    @Test func aFreshConnectionWinsAgainstASilentOne() async throws {
        let server = try Server { request, index in
            index == 0 ? Reply(status: 200, headers: [("ETag", Self.etag)], body: Self.content, stallAfter: Self.half)
                       : .honest(request, content: Self.content, etag: Self.etag)
        }
        defer { server.stop() }
        let (log, elapsed) = try await fetch(from: server)
        #expect(elapsed < .seconds(10))
        // One race: the racer asked for exactly the rest of the same entity, within the attempt.
        #expect(server.requests.count == 2, "\(server.requests.map(\.headers))")
        #expect(server.requests[1].rangeStart == Int64(Self.half))
        #expect(server.requests[1].ifRange == Self.etag)
        #expect(log.resumedOffsets.isEmpty && log.restarts == 0, "\(log.all)")
    }

    @Test func theOldConnectionWinsWhenItSpeaksFirst() async throws {
        let server = try Server { request, index in
            if index == 0 {
                var reply = Reply(status: 200, headers: [("ETag", Self.etag)], body: Self.content)
                reply.pauseAfter = Self.half
                reply.pause = .milliseconds(1500)
                return reply
            }
            // The racer's server is slower still: the old connection speaks first.
            return Self.honest(request, answeringAfter: .seconds(6))
        }
        defer { server.stop() }
        let (_, elapsed) = try await fetch(from: server)
        #expect(server.requests.count == 2, "a race was started")
        #expect(elapsed < .seconds(6), "finished on the old connection, before the racer answered: \(elapsed)")
    }

    @Test func aServerSlowToAnswerIsRacedAndTheFirstAnswerCarriesOn() async throws {
        // No answer for 1.5 s (five suspicions): the request is suspected and sent again on a
        // fresh connection; the first connection answers first and carries on.
        let server = try Server { request, _ in Self.honest(request, answeringAfter: .milliseconds(1500)) }
        defer { server.stop() }
        let (log, _) = try await fetch(from: server)
        let requests = server.requests
        try #require(requests.count == 2, "one race: \(requests.map(\.headers))")
        #expect(requests[1].rangeStart == requests[0].rangeStart, "the same request again")
        #expect(!log.all.contains { if case .waitingForServer = $0 { true } else { false } }, "\(log.all)")
        // The host's answer time is known now: the next download waits for it instead of racing.
        _ = try await fetch(from: server)
        #expect(server.requests.count == 3, "no race once the pace is known: \(server.requests.count)")
    }

    /// A tarpit (accepts, never answers) and a server dripping its head a byte at a time hold
    /// the first connection; a fresh connection sending the same request, about a second later,
    /// gets the answer. Before, only the 30 s stall timeout ended such a request.
    @Test(arguments: ["tarpit", "drip"])
    func aResponseThatDoesNotStartIsRacedByAFreshConnection(_ kind: String) async throws {
        let server = try Server { request, index in
            guard index == 0 else { return .honest(request, content: Self.content, etag: Self.etag) }
            var reply = Reply.honest(request, content: Self.content, etag: Self.etag)
            if kind == "tarpit" { reply.neverAnswers = true } else { reply.headByteInterval = .milliseconds(500) }
            return reply
        }
        defer { server.stop() }
        let (log, elapsed) = try await fetch(from: server)
        #expect(elapsed < .seconds(10), "\(elapsed)")
        #expect(server.requests.count == 2, "\(server.requests.map(\.headers))")
        let times = server.connectionTimes
        #expect(times.count == 2)
        if times.count >= 2 {
            let fresh = times[1] - times[0]
            #expect(fresh < .seconds(3), "a fresh connection after \(fresh)")
        }
        #expect(log.restarts == 0 && log.resumedOffsets.isEmpty, "\(log.all)")
    }
}
