import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 32 item 5 with a real agent: a job's deadline ends a transfer that is still running, and
/// its no-progress timeout ends a wait for a server that refuses; both keep the resume data.
@Suite("A job's time limits", .serialized, .needsNginx)
struct JobDeadlineNginxTests: DownloadScenarios {

    static func failure(of download: Download) -> DownloadError? {
        if case .failed(let error) = download.state { return error }
        return nil
    }

    @Test func theDeadlineAndTheNoProgressTimeoutFailTheJobAndKeepItsBytes() async throws {
        // 8 MiB: about 30 s, far past the deadline
        let (nginx, directory, content) = try F.nginxServing(count: 8 << 20, seed: 3250, at: "slow/late.bin", slowRate: "256k")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        var options = DownloadOptions(expectedSHA256: F.sha256(content))
        options.deadline = Date().addingTimeInterval(1.5)
        let late = try await agent.download(from: nginx.url("slow/late.bin"), to: directory.file("late.bin"), options: options)
        #expect(await F.wait(timeout: .seconds(10)) { Self.failure(of: late) != nil })
        let error = try #require(Self.failure(of: late))
        #expect(error.urlErrorCode == .timedOut && error.description.contains("deadline passed"), "\(error)")
        #expect(late.progress.bytesReceived > 0)
        #expect(FileManager.default.fileExists(atPath: directory.file("late.bin").path + ".part"), "the bytes stay")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).contains { $0.hasSuffix(".json") },
                "the resume record stays")

        // Nothing listens on this port: the job waits for the server, and gives up after 1 s of that.
        let port = try F.freePort()
        var patient = DownloadOptions()
        patient.noProgressTimeout = .seconds(1)
        let started = ContinuousClock.now
        let refused = try await agent.download(from: URL(string: "http://127.0.0.1:\(port)/x.bin")!, to: directory.file("x.bin"),
                                               options: patient)
        #expect(await F.wait(timeout: .seconds(10)) { Self.failure(of: refused) != nil })
        let elapsed = ContinuousClock.now - started
        let timeout = try #require(Self.failure(of: refused))
        #expect(timeout.description.contains("no progress for 1 s"), "\(timeout)")
        #expect(elapsed >= .seconds(1) && elapsed < .seconds(8), "\(elapsed), the agent's own outage bound is 30 s")
        await agent.shutdown()
    }

    /// A job waiting in line behind a slow one fails at its deadline, while the slow one still
    /// holds the only slot (not when its turn comes).
    @Test func aQueuedJobFailsAtItsDeadlineNotWhenItsTurnComes() async throws {
        let nginx = try DownloadTestNginx(slowRate: "256k")   // 8 MiB: about 30 s, holding the slot
        let directory = try F.Directory()
        try nginx.serve(F.randomData(count: 8 << 20, seed: 3251), at: "slow/first.bin")
        try nginx.serve(F.randomData(count: 1 << 10, seed: 3252), at: "second.bin")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.maximumConcurrentDownloads = 1
        })
        let first = try await agent.download(from: nginx.url("slow/first.bin"), to: directory.file("first.bin"))
        #expect(await F.wait { first.progress.bytesReceived > 0 })
        var options = DownloadOptions()
        options.deadline = Date().addingTimeInterval(1)
        let started = ContinuousClock.now
        let queued = try await agent.download(from: nginx.url("second.bin"), to: directory.file("second.bin"), options: options)
        #expect(await F.wait(timeout: .seconds(10)) { Self.failure(of: queued) != nil })
        let elapsed = ContinuousClock.now - started
        let error = try #require(Self.failure(of: queued))
        #expect(error.urlErrorCode == .timedOut && error.description.contains("deadline passed"), "\(error)")
        #expect(elapsed >= .milliseconds(900) && elapsed < .seconds(5), "\(elapsed)")
        #expect(first.state == .running, "the first still holds the slot: \(first.state)")
        await agent.shutdown()
    }
}
