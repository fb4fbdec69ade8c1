import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// No server behaviour makes a download send a storm of requests (issue 7's reproduction: a
/// server that ignores Range and resets every response after 1 MiB got 26,262 requests in 90 s).
/// Restarts from zero are bounded and backed off, progress only counts past the furthest byte
/// ever stored, and attempt starts go through a token bucket (a burst of 4, then 2 a second)
/// unless the attempt before stored at least 4 KiB of new bytes: a server that ends every
/// connection early is followed at its own pace, with requests in proportion to the bytes.
@Suite("Retry budgets: no request storm from any server", .serialized)
struct DownloadBudgetTests: DownloadScenarios {

    static let etag = "\"v1\""

    @Test func aServerThatIgnoresRangeAndResetsEveryResponseIsGivenUpOnQuickly() async throws {
        let content = F.randomData(count: 4 << 20, seed: 71)
        let server = try Server { _, _ in
            var reply = Reply(status: 200, headers: [("ETag", Self.etag)], body: content)
            reply.resetAfter = 1 << 20
            return reply
        }
        defer { server.stop() }
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let download = try await agent.download(from: server.url(), to: directory.file("out.bin"))
        let log = F.EventLog(download)
        let started = ContinuousClock.now
        await #expect(throws: DownloadError.badServerResponse) { _ = try await F.finish(download, log: log) }
        let elapsed = ContinuousClock.now - started
        await agent.shutdown()
        let requests = server.requests.count
        // The first response, then one per restart until the restart budget (3) is spent.
        #expect(requests <= 6, "\(requests) requests in \(elapsed): \(log.all)")
        if case .failed(let error) = download.state {
            #expect(error.description.contains("restarted from zero"), "\(error)")
        }
        #expect(log.restarts >= 3)
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin").path))
    }

    @Test func aServerThatResetsEveryFewHundredKilobytesGetsRequestsInProportionToTheBytes() async throws {
        let content = F.randomData(count: 2 << 20, seed: 72)
        let server = try Server { request, _ in
            var reply = Reply.honest(request, content: content, etag: Self.etag)
            reply.resetAfter = 256 << 10
            return reply
        }
        defer { server.stop() }
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.maximumConsecutiveFailures = 100
        })
        let download = try await agent.download(from: server.url(), to: directory.file("out.bin"),
                                                options: .init(expectedSHA256: F.sha256(content)))
        let started = ContinuousClock.now
        _ = try await F.finish(download, timeout: .seconds(60))
        let seconds = Double((ContinuousClock.now - started).milliseconds) / 1000
        await agent.shutdown()
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(content))
        // Every response makes progress, so each is retried at once and gives its token back
        // (issue 21: a server that cuts connections short must still finish). The requests are
        // bounded by the bytes: each stores at least the 4 KiB floor (in practice most of the
        // 256 KiB the server sends, minus the overlap).
        let requests = server.requests.count
        #expect(requests > 4, "the test needs more attempts than the burst: \(requests)")
        #expect(requests <= content.count / (4 << 10), "\(requests) requests in \(seconds) s")
        #expect(requests <= 40, "each reset connection stores most of its 256 KiB: \(requests) requests")
    }
}
