import TestSupport
import Foundation
import LinuxReachability
import Synchronization
import Testing
@testable import ResumableDownloads

@Suite("Download agent without network")
struct DownloadAgentTests {
    @Test func waitsForConnectivityThenGivesUpAtTheOutageLimit() async throws {
        let directory = try TemporaryDirectory()
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: directory.url.appendingPathComponent("state"),
                maximumOutageWait: .milliseconds(300)), startingAt: Paths.offline)
        let download = try await agent.download(from: URL(string: "http://127.0.0.1:9/never")!,
                                                to: directory.url.appendingPathComponent("out"))
        let log = EventLog(download)
        await #expect(throws: DownloadError.connectivityTimeout) { _ = try await download.finished() }
        #expect(log.all.contains(.waitingForConnectivity) || download.state == .failed(.connectivityTimeout))
        // The resume data survives the failure so a later resume() or relaunch continues.
        let records = try FileManager.default.contentsOfDirectory(atPath: directory.path("state")).filter { $0.hasSuffix(".json") }
        #expect(records.count == 1)
        await agent.shutdown()
    }

    @Test func rejectsNonHTTPURLs() async throws {
        let directory = try TemporaryDirectory()
        let agent = try DownloadAgent(configuration: .init(stateDirectory: directory.url))
        await #expect(throws: DownloadError.unsupportedURL) {
            _ = try await agent.download(from: URL(string: "ftp://example.invalid/x")!, to: directory.url.appendingPathComponent("x"))
        }
        await agent.shutdown()
    }

    @Test func refusesAnExpectedDigestThatIsNotOne() async throws {
        let directory = try TemporaryDirectory()
        let agent = try DownloadAgent(configuration: .init(stateDirectory: directory.url))
        for bad in ["abc", String(repeating: "０", count: 64)] {
            await #expect(throws: DownloadError.invalidRequest) {
                _ = try await agent.download(from: URL(string: "http://127.0.0.1:9/x")!, to: directory.url.appendingPathComponent("x"),
                                             options: .init(expectedSHA256: bad))
            }
        }
        await agent.shutdown()
    }

    @Test func cancelWhileWaitingDeletesResumeData() async throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: state), startingAt: Paths.offline)
        let download = try await agent.download(from: URL(string: "http://127.0.0.1:9/never")!,
                                                to: directory.url.appendingPathComponent("out"))
        let log = EventLog(download)
        #expect(await log.wait { $0 == .waitingForConnectivity })
        await download.cancel()
        await #expect(throws: DownloadError.cancelled) { _ = try await download.finished() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.path).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: directory.path("out.part")))
        await agent.shutdown()
    }

    @Test func pauseAndResumeWhileWaiting() async throws {
        let directory = try TemporaryDirectory()
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: directory.url.appendingPathComponent("state")), startingAt: Paths.offline)
        let download = try await agent.download(from: URL(string: "http://127.0.0.1:9/never")!,
                                                to: directory.url.appendingPathComponent("out"))
        let log = EventLog(download)
        #expect(await log.wait { $0 == .waitingForConnectivity })
        await download.pause()
        #expect(await log.wait { $0 == .paused })
        #expect(download.state == .paused)
        await download.resume()
        #expect(await log.wait { event in
            // waiting again after the resume
            return event == .waitingForConnectivity
        })
        await agent.shutdown()
    }
}

@Suite("Download event replay")
struct DownloadEventReplayTests {
    @Test func lateSubscribersSeeEarlierEvents() async throws {
        let directory = try TemporaryDirectory()
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: directory.url.appendingPathComponent("state"),
                maximumOutageWait: .milliseconds(100)), startingAt: Paths.offline)
        let download = try await agent.download(from: URL(string: "http://127.0.0.1:9/never")!,
                                                to: directory.url.appendingPathComponent("out"))
        _ = try? await download.finished()
        // Subscribing after the end still delivers the whole story, then finishes.
        var seen: [DownloadEvent] = []
        for await event in download.events { seen.append(event) }
        #expect(seen == [.waitingForConnectivity, .failed(.connectivityTimeout)])
        await agent.shutdown()
    }
}

@Suite("Queueing without network")
struct DownloadQueueTests {
    @Test func queuedDownloadsPauseResumeAndCancelWithoutASlot() async throws {
        let directory = try TemporaryDirectory()
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: directory.url.appendingPathComponent("state"),
                maximumConcurrentDownloads: 1), startingAt: Paths.offline)
        let first = try await agent.download(from: URL(string: "http://127.0.0.1:9/a")!, to: directory.url.appendingPathComponent("a"))
        let second = try await agent.download(from: URL(string: "http://127.0.0.1:9/b")!, to: directory.url.appendingPathComponent("b"))
        let firstLog = EventLog(first)
        #expect(await firstLog.wait { $0 == .waitingForConnectivity } || first.state == .waitingForConnectivity)
        #expect(second.state == .queued)
        await second.pause()
        #expect(second.state == .paused)
        await second.resume()
        #expect(second.state == .queued)
        await second.cancel()
        #expect(second.state == .failed(.cancelled))
        #expect(!FileManager.default.fileExists(atPath: directory.path("state/\(second.id.uuidString).json")))
        #expect(FileManager.default.fileExists(atPath: directory.path("state/\(first.id.uuidString).json")))
        #expect(await agent.downloads.map(\.id) == [first.id, second.id])
        await #expect(throws: DownloadError.invalidRequest) {
            _ = try await agent.download(from: URL(string: "http://127.0.0.1:9/a")!, to: directory.url.appendingPathComponent("a"))
        }
        await agent.shutdown()
        #expect(first.state == .paused)
    }

    @Test func cancellingAWaiterLeavesTheDownloadAlone() async throws {
        let directory = try TemporaryDirectory()
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: directory.url.appendingPathComponent("state")), startingAt: Paths.offline)
        let download = try await agent.download(from: URL(string: "http://127.0.0.1:9/a")!,
                                                to: directory.url.appendingPathComponent("a"))
        let waiter = Task { try await download.finished() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { _ = try await waiter.value }
        #expect(!download.state.isFinal)
        await agent.shutdown()
    }
}
