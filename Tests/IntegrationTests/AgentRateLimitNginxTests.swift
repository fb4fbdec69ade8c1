import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 32 item 2 with real transfers: one limit over every connection of four downloads from
/// loopback nginx (which sends as fast as it can), changed while they run. A short window with a
/// loose bound here; the 10 s measure against aria2c is bench/limit_bench.py.
@Suite("The agent's one limit against nginx", .serialized, .needsNginx)
struct AgentRateLimitNginxTests: DownloadScenarios {

    /// Bytes per second received by all of `downloads` over `span` (a measurement window, not a
    /// wait for an event), and each one's bytes in it.
    func rate(of downloads: [Download], over span: Duration) async throws -> (total: Double, shares: [Int64]) {
        let before = downloads.map(\.progress.bytesReceived)
        let start = ContinuousClock.now
        try await measuringWindow(span)
        let shares = zip(downloads.map(\.progress.bytesReceived), before).map { $0 - $1 }
        let elapsed = (ContinuousClock.now - start).components
        return (Double(shares.reduce(0, +)) / (Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18), shares)
    }

    @Test func fourDownloadsShareOneLimitThatChangesLive() async throws {
        let nginx = try DownloadTestNginx()
        let directory = try F.Directory()
        let limit = AgentRateLimit(bytesPerSecond: 4 << 20)
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.maximumConcurrentDownloads = 4
            $0.agentRateLimit = limit
        })
        var jobs: [(Download, F.EventLog, Data)] = []
        for index in 0..<4 {
            let content = F.randomData(count: 24 << 20, seed: UInt64(3210 + index))
            try nginx.serve(content, at: "limited\(index).bin")
            let download = try await agent.download(from: nginx.url("limited\(index).bin"), to: directory.file("limited\(index).bin"),
                                                    options: DownloadOptions(expectedSHA256: F.sha256(content)))
            jobs.append((download, F.EventLog(download), content))
        }
        let downloads = jobs.map(\.0)
        #expect(await F.wait { downloads.allSatisfy { $0.progress.bytesReceived > 0 } })
        let (limited, shares) = try await rate(of: downloads, over: .seconds(2))
        #expect(abs(limited - Double(4 << 20)) < Double(4 << 20) * 0.15, "\(limited) B/s under 4 MiB/s")
        // Four jobs of one class: a quarter each, give or take progress reports 100 ms apart.
        #expect(shares.allSatisfy { Double($0) > Double(shares.reduce(0, +)) * 0.15 }, "every job gets its share: \(shares)")

        // Raised while they run: no transfer restarts. Once a quarter second shows more than the
        // old limit (the raise took), two seconds measure the new rate.
        limit.setLimit(8 << 20)
        let tookEffect = try await waitUntil(deadline: .now + .seconds(5), every: .zero) {
            try await rate(of: downloads, over: .milliseconds(250)).total > Double(6 << 20)
        }
        #expect(tookEffect, "the raised limit never showed within 5 s")
        let raised = try await rate(of: downloads, over: .seconds(2)).total
        #expect(abs(raised - Double(8 << 20)) < Double(8 << 20) * 0.15, "\(raised) B/s under 8 MiB/s")

        limit.setLimit(nil)
        for (download, log, content) in jobs {
            _ = try await F.finish(download, log: log)
            #expect(F.sha256(fileAt: download.destination) == F.sha256(content))
            #expect(log.restarts == 0)
        }
        await agent.shutdown()
    }
}
