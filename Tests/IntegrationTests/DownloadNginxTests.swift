import Foundation
import LinuxSystem
import LinuxReachability
import Testing
import TestSupport
@testable import ResumableDownloads

/// The download agent against a real nginx on 127.0.0.1.
@Suite("Downloads from nginx", .serialized, .needsNginx)
struct DownloadNginxTests: DownloadScenarios {

    @Test func downloadsAndVerifies() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 8 << 20 + 123, at: "big.bin")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = directory.file("big.bin")
        let download = try await agent.download(from: nginx.url("big.bin"), to: destination,
                                                options: .init(expectedSHA256: F.sha256(content)))
        let log = F.EventLog(download)
        let url = try await F.finish(download, log: log)
        #expect(url == destination.standardizedFileURL)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect(!FileManager.default.fileExists(atPath: destination.path + ".part"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).isEmpty)
        #expect(download.state == .completed)
        #expect(download.progress.bytesReceived == Int64(content.count))
        #expect(log.all.last == .completed(destination.standardizedFileURL))
        await agent.shutdown()
    }

    /// Issue 32 item 1: four low jobs fill the four slots (rate limited, so they stay busy); a
    /// foreground job added then starts at once: the latest low one is checkpointed and queued
    /// again (not failed), resumes with a range once a slot is free, and every file is right.
    @Test func foregroundJobTakesASlotFromALowOne() async throws {
        let nginx = try DownloadTestNginx(slowRate: "1m")   // ~6 s per low job: busy when the foreground one comes
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.maximumConcurrentDownloads = 4
        })
        let low = DownloadOptions(maximumConnections: 1, priority: DownloadPriority.low.value)
        var jobs: [(Download, F.EventLog, Data)] = []
        for index in 0..<4 {
            let content = F.randomData(count: 6 << 20, seed: UInt64(3200 + index))
            try nginx.serve(content, at: "slow/low\(index).bin")
            var options = low
            options.expectedSHA256 = F.sha256(content)
            let download = try await agent.download(from: nginx.url("slow/low\(index).bin"), to: directory.file("low\(index).bin"),
                                                    options: options)
            jobs.append((download, F.EventLog(download), content))
        }
        let lows = jobs.map(\.0)
        #expect(await F.wait { lows.allSatisfy { $0.progress.bytesReceived > 0 } }, "the low jobs fill every slot")

        let urgent = F.randomData(count: 1 << 20, seed: 3299)
        try nginx.serve(urgent, at: "urgent.bin")
        let added = ContinuousClock.now
        let foreground = try await agent.download(from: nginx.url("urgent.bin"), to: directory.file("urgent.bin"),
                                                  options: DownloadOptions(expectedSHA256: F.sha256(urgent),
                                                                           priority: DownloadPriority.foreground.value))
        let foregroundLog = F.EventLog(foreground)
        // 100 ms is the goal (measured in bench/); the deadline only has to be well below a low
        // job's 6 s, so that the start cannot come from a low job finishing.
        #expect(await F.wait(timeout: .seconds(3)) { foreground.state != .queued }, "the foreground job starts at once")
        let started = ContinuousClock.now - added
        #expect(jobs.allSatisfy { $0.0.progress.bytesReceived < Int64($0.2.count) }, "no low job had finished: \(started)")
        _ = try await F.finish(foreground, log: foregroundLog)
        #expect(F.sha256(fileAt: directory.file("urgent.bin")) == F.sha256(urgent))

        for (download, log, content) in jobs {
            _ = try await F.finish(download, log: log)
            #expect(F.sha256(fileAt: download.destination) == F.sha256(content))
        }
        // Exactly one low job gave its slot up, and it went on from its stored bytes.
        let yielded = jobs.filter { !$0.1.resumedOffsets.isEmpty }
        #expect(yielded.count == 1, "\(jobs.map { $0.1.all })")
        #expect(yielded.first.map { $0.1.resumedOffsets.allSatisfy { $0 > 0 } && $0.1.restarts == 0 } == true)
        await agent.shutdown()
    }

    @Test func pauseKeepsResumeDataAndResumeUsesARange() async throws {
        // ~12 s: paused mid-transfer even under load
        let (nginx, directory, content) = try F.nginxServing(count: 24 << 20, at: "slow/file.bin", slowRate: "2m")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = directory.file("file.bin")
        let download = try await agent.download(from: nginx.url("slow/file.bin"), to: destination,
                                                options: .init(expectedSHA256: F.sha256(content)))
        let log = F.EventLog(download)
        #expect(await F.wait { download.progress.bytesReceived > 2 << 20 })
        await download.pause()
        #expect(await log.wait { $0 == .paused })
        #expect(download.state == .paused)
        let record = try #require(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).first { $0.hasSuffix(".json") })
        let stored = try ResumeRecord.read(record, in: try CheckedDirectory.open(directory.file("state").path, policy: .privateState))
        #expect(stored.verifiedOffset > 0)
        #expect(stored.entityTag != nil)
        #expect(!FileManager.default.fileExists(atPath: destination.path))

        await download.resume()
        _ = try await F.finish(download, log: log)
        // The resume continues every stored byte (one prefix, or ranges when several
        // connections ran).
        let durable = stored.durable.ranges.reduce(Int64(0)) { $0 + $1.upperBound - $1.lowerBound }
        #expect(log.resumedOffsets.first == durable)
        #expect(log.restarts == 0)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        await agent.shutdown()
    }

    @Test func relaunchAfterAnInterruptionContinuesFromTheRecord() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 12 << 20, seed: 7, at: "slow/file.bin", slowRate: "4m")
        let state = directory.file("state")
        let destination = directory.file("file.bin")

        // First "process": interrupted mid-transfer.
        let first = try DownloadAgent(configuration: F.configuration(state: state))
        let download = try await first.download(from: nginx.url("slow/file.bin"), to: destination,
                                                options: .init(expectedSHA256: F.sha256(content)))
        #expect(await F.wait { download.progress.bytesReceived > 3 << 20 })
        await first.shutdown()
        // A SIGKILL leaves a record from the last checkpoint and, past it, bytes that may never have
        // reached the disk. Simulate the worst case: an older record (half the offset) and garbage
        // appended to the partial file.
        let recordName = try #require(try FileManager.default.contentsOfDirectory(atPath: state.path).first { $0.hasSuffix(".json") })
        let checkedState = try CheckedDirectory.open(state.path, policy: .privateState)
        var record = try ResumeRecord.read(recordName, in: checkedState)
        record.verifiedOffset /= 2
        try record.write(to: checkedState)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: destination.path + ".part"))
        let written = try handle.seekToEnd()
        try handle.write(contentsOf: Data(repeating: 0xEE, count: 100_000))
        try handle.close()

        // Second "process": restore from the state directory.
        let second = try DownloadAgent(configuration: F.configuration(state: state))
        let restored = await second.restoreDownloads()
        try #require(restored.count == 1)
        let log = F.EventLog(restored[0])
        #expect(restored[0].id == download.id)
        _ = try await F.finish(restored[0], log: log)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect(log.restarts == 0)
        // The block journal vouches for the blocks past the (older) checkpoint that reached the
        // file; the garbage has no entry, so the resume starts between the two.
        let resumed = try #require(log.resumedOffsets.first)
        #expect(resumed >= record.verifiedOffset)
        #expect(resumed <= Int64(written))
        await second.shutdown()
    }

    @Test func changedResourceRestartsInsteadOfSplicing() async throws {
        let (nginx, directory, _) = try F.nginxServing(count: 10 << 20, seed: 1, at: "slow/file.bin", slowRate: "4m")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = directory.file("file.bin")
        let download = try await agent.download(from: nginx.url("slow/file.bin"), to: destination)
        let log = F.EventLog(download)
        #expect(await F.wait { download.progress.bytesReceived > 2 << 20 })
        await download.pause()
        #expect(await log.wait { $0 == .paused })

        // A new version with another size and mtime: nginx's ETag changes, If-Range fails, 200.
        let replacement = F.randomData(count: 9 << 20 + 17, seed: 2)
        try nginx.serve(replacement, at: "slow/file.bin")
        await download.resume()
        _ = try await F.finish(download, log: log)
        #expect(F.sha256(fileAt: destination) == F.sha256(replacement))
        #expect(log.restarts == 1, "the user is told the stored bytes were thrown away: \(log.all)")
        await agent.shutdown()
    }

    @Test func notFoundFailsCleanly() async throws {
        let nginx = try DownloadTestNginx()
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = directory.file("missing.bin")
        let download = try await agent.download(from: nginx.url("missing.bin"), to: destination)
        do {
            _ = try await F.finish(download)
            Issue.record("expected a failure")
        } catch let error as DownloadError {
            #expect(error == .httpStatus)
            #expect(error.httpStatusCode == 404)
            #expect(error.urlErrorCode == .fileDoesNotExist)
        }
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(!FileManager.default.fileExists(atPath: destination.path + ".part"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).isEmpty)
        await agent.shutdown()
    }

    @Test func checksumMismatchLeavesNothingInPlace() async throws {
        let nginx = try DownloadTestNginx()
        let directory = try F.Directory()
        try nginx.serve(F.randomData(count: 100_000), at: "f.bin")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = directory.file("f.bin")
        let download = try await agent.download(from: nginx.url("f.bin"), to: destination,
                                                options: .init(expectedSHA256: String(repeating: "a", count: 64)))
        await #expect(throws: DownloadError.checksumMismatch) { _ = try await F.finish(download) }
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(!FileManager.default.fileExists(atPath: destination.path + ".part"))
        await agent.shutdown()
    }

    @Test func concurrencyLimitQueuesTheRest() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 16 << 20, seed: 3, at: "f.bin")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.maximumConcurrentDownloads = 2
        })
        var created: [Download] = []
        for index in 0..<6 {
            created.append(try await agent.download(from: nginx.url("f.bin"), to: directory.file("f\(index).bin"),
                                                    options: .init(expectedSHA256: F.sha256(content))))
        }
        let downloads = created
        // Sample states until all are done: never more than two transferring, and some queued.
        // A running download with all its bytes is only finishing (its slot may already be the
        // next one's: completions are committed in groups). The samples are read newest first:
        // a download starts only after an older one gave its slot up, so a sample cannot see
        // the newer one starting and then the older one still transferring.
        var maximumRunning = 0
        var sawQueued = false
        _ = await waitUntil(deadline: .now + .seconds(60), every: .milliseconds(1)) {
            let transferring = downloads.reversed().filter { download in
                guard download.state == .running else { return false }
                let progress = download.progress
                return progress.totalBytes.map { progress.bytesReceived < $0 } ?? true
            }
            maximumRunning = max(maximumRunning, transferring.count)
            let states = downloads.map(\.state)
            sawQueued = sawQueued || states.contains(.queued)
            return states.allSatisfy(\.isFinal)
        }
        #expect(maximumRunning <= 2)
        #expect(sawQueued)
        for download in downloads { _ = try await F.finish(download) }
        for index in 0..<6 { #expect(F.sha256(fileAt: directory.file("f\(index).bin")) == F.sha256(content)) }
        await agent.shutdown()
    }

    @Test func cancelMidTransferDeletesPartialAndRecord() async throws {
        let nginx = try DownloadTestNginx(slowRate: "2m")
        let directory = try F.Directory()
        try nginx.serve(F.randomData(count: 8 << 20, seed: 4), at: "slow/file.bin")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = directory.file("file.bin")
        let download = try await agent.download(from: nginx.url("slow/file.bin"), to: destination)
        #expect(await F.wait { download.progress.bytesReceived > 1 << 20 })
        await download.cancel()
        await #expect(throws: DownloadError.cancelled) { _ = try await F.finish(download) }
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(!FileManager.default.fileExists(atPath: destination.path + ".part"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).isEmpty)
        await agent.shutdown()
    }
}
