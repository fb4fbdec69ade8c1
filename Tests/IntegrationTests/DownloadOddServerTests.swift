import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// Servers that are merely odd, not hostile (issue 21): connections cut short after a few KiB,
/// ETags that differ per response, rate limiters (ours and the server's). Each must finish with
/// the right bytes, without extra requests, or fail with a message that says what to do.
@Suite("Downloads from odd servers", .serialized)
struct DownloadOddServerTests: DownloadScenarios {

    static let content = F.randomData(count: 1 << 20, seed: 2121)

    /// Downloads `content` from `server` (`expectsDigest`: with its SHA-256) and returns the
    /// outcome, the events, the directory and how long it took.
    func fetch(from server: Server, expectsDigest: Bool = true, timeout: Duration = .seconds(60),
               edit: (inout DownloadAgent.Configuration) -> Void = { _ in })
        async throws -> (result: Result<URL, DownloadError>, log: F.EventLog, directory: F.Directory, elapsed: Duration) {
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.stallTimeout = .seconds(30)   // only the behaviour under test may end a transfer
            // These servers are judged by the requests one connection makes (a capped server
            // would otherwise get more connections, SegmentedDownloadTests).
            $0.maximumConnectionsPerHost = 1
            edit(&$0)
        })
        let options = DownloadOptions(expectedSHA256: expectsDigest ? F.sha256(Self.content) : nil)
        let download = try await agent.download(from: server.url(), to: directory.file("out.bin"), options: options)
        let log = F.EventLog(download)
        let started = ContinuousClock.now
        let result: Result<URL, DownloadError>
        do {
            result = .success(try await F.finish(download, log: log, timeout: timeout))
        } catch let error as DownloadError {
            result = .failure(error)
        }
        let elapsed = ContinuousClock.now - started
        await agent.shutdown()
        return (result, log, directory, elapsed)
    }

    func expectIntact(_ directory: F.Directory, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(Self.content), sourceLocation: sourceLocation)
    }

    // MARK: short connections

    /// A server (or proxy, or mobile link) that closes every connection after N body bytes. With
    /// a fixed 64 KiB overlap every resume spent its connection on bytes already stored and the
    /// download never finished; the overlap now follows the connections (a quarter of them, at
    /// least 4 KiB), and attempts that store new bytes are not rate limited.
    @Test(arguments: [16 << 10, 32 << 10, 64 << 10])
    func connectionsCutAfterAFewKiBStillFinish(_ cut: Int) async throws {
        let server = try Server { request, _ in
            .honest(request, content: Self.content, etag: "\"short\"", closeAfter: cut)
        }
        defer { server.stop() }
        let (result, log, directory, _) = try await fetch(from: server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.restarts == 0, "\(log.all)")
        // Every resume compared a quarter of a connection (the server's requests against the
        // offsets the download announced), never less than the floor.
        let resumes = Array(server.requests.dropFirst())
        #expect(resumes.count == log.resumedOffsets.count, "\(log.all)")
        for (request, offset) in zip(resumes, log.resumedOffsets) {
            #expect(request.ifRange == "\"short\"")
            #expect(request.rangeStart.map { offset - $0 } == max(ResumeOverlap.minimum, Int64(cut / 4)),
                    "resume at \(offset) asked from \(request.rangeStart.map(String.init) ?? "-")")
        }
        // Each connection stores at least three quarters of what it delivers.
        let needed = (Self.content.count + cut * 3 / 4 - 1) / (cut * 3 / 4)
        #expect(server.requests.count <= needed + 1, "\(server.requests.count) requests for \(needed) cuts")
    }

    // MARK: rate limits, ours and the server's

    /// `--limit-rate 256k`: the stall detector took the limiter's own pauses for a stall and
    /// raced a fresh connection about once a second, each starting a new burst (1 MiB arrived in
    /// about a second). Now one connection, and from the first byte to the last at most the limit
    /// plus one receive chunk (1/16 s of it).
    @Test func aLimitedTransferAveragesAtMostItsLimitOnOneConnection() async throws {
        let limit = 256 << 10
        let server = try Server { request, _ in .honest(request, content: Self.content, etag: "\"lim\"") }
        defer { server.stop() }
        let (result, log, directory, elapsed) = try await fetch(from: server) { $0.maximumBytesPerSecond = Int64(limit) }
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(server.connections == 1 && server.requests.count == 1, "\(server.requests.map(\.headers))")
        let seconds = Double(elapsed.milliseconds) / 1000
        let rate = Double(Self.content.count) / seconds
        #expect(rate <= Double(limit) * 1.02, "\(Int(rate)) bytes/s over \(seconds) s, limit \(limit)")
        #expect(log.resumedOffsets.isEmpty)
    }

    /// A per-second rate limiter on the server (lighttpd's connection.kbytes-per-second, nginx's
    /// limit_rate): a second's quota at once, then silence; here the silences last 1.25 s (a
    /// limiter whose timer runs late), longer than the bare one-second suspicion. The transfer
    /// learns the rhythm instead of racing it: one request, no range request.
    @Test func aBurstyRateLimiterIsLearnedNotRaced() async throws {
        let server = try Server { request, _ in
            var reply = Reply.honest(request, content: Self.content, etag: "\"burst\"")
            reply.burstSize = 256 << 10
            reply.burstInterval = .milliseconds(1250)
            return reply
        }
        defer { server.stop() }
        let (result, log, directory, _) = try await fetch(from: server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(server.requests.count == 1, "extra requests: \(server.requests.map(\.headers))")
        #expect(log.resumedOffsets.isEmpty && log.restarts == 0, "\(log.all)")
    }

    @Test(.needsNginx)
    func nginxLimitRateIsLearnedNotRaced() async throws {
        let nginx = try DownloadTestNginx(slowRate: "1m", accessLog: true)
        defer { nginx.stop() }
        let content = F.randomData(count: 4 << 20, seed: 2122)
        try nginx.serve(content, at: "slow/file.bin")
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.stallTimeout = .seconds(30)
            $0.maximumConnectionsPerHost = 1   // the requests of one connection
        })
        let download = try await agent.download(from: nginx.url("slow/file.bin"), to: directory.file("out.bin"),
                                                options: .init(expectedSHA256: F.sha256(content)))
        _ = try await F.finish(download, timeout: .seconds(30))
        await agent.shutdown()
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(content))
        let requests = nginx.loggedRequests
        #expect(requests.count == 1, "\(requests)")
    }

    // MARK: ETags that differ per response

    /// Load-balanced Apache with inode-based ETags: every response carries another ETag for the
    /// same bytes, and connections drop now and then. With the expected SHA-256 (which proves the
    /// result) the download finishes; without it, it fails and says what the server does and
    /// what to pass.
    @Test func etagsThatDifferPerBackendNeedTheDigest() async throws {
        let handler: @Sendable (Server.Request, Int) -> Reply = { request, index in
            // A fresh ETag per response; If-Range with another backend's ETag gets the whole file.
            .honest(request, content: Self.content, etag: "\"\(String(index, radix: 16))-100000-5f3a\"", closeAfter: 300_000)
        }
        let withDigest = try Server(handler: handler)
        defer { withDigest.stop() }
        let (result, log, directory, _) = try await fetch(from: withDigest)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.restarts <= 1, "\(log.all)")

        let withoutDigest = try Server(handler: handler)
        defer { withoutDigest.stop() }
        let (failed, _, plain, _) = try await fetch(from: withoutDigest, expectsDigest: false)
        guard case .failure(let error) = failed else {
            Issue.record("a spliced or restarted file was accepted: \(failed)")
            return
        }
        #expect(error.description.contains("another ETag with each response"), "\(error.description)")
        #expect(error.description.contains("--sha256"), "\(error.description)")
        #expect(!FileManager.default.fileExists(atPath: plain.file("out.bin").path))
    }
}

