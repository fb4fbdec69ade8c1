import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 32 item 4 against loopback nginx on a small tmpfs the test mounts (and unmounts): with
/// a free-space rule, a download that would leave too little, or meets ENOSPC, waits queued
/// with `lowDiskSpace` instead of failing, keeps its bytes, and completes once space is back.
/// Mounting needs root (CI runs as root).
@Suite("Downloads waiting for disk space", .serialized,
       .enabled(if: DownloadFixtures.isRoot, "mounting a tmpfs needs root"),
       .needsNginx)
struct DownloadSpaceWaitTests: DownloadScenarios {

    /// A tmpfs of `size` mounted at a fresh `rchspace-…` directory; unmounted by `unmount()`.
    struct SmallDisk {
        let mountPoint: URL

        init(in directory: F.Directory, size: String) throws {
            mountPoint = directory.file("rchspace-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
            try #require(try Self.run(["/bin/mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", mountPoint.path]) == 0)
        }

        func resize(_ size: String) throws {
            try #require(try Self.run(["/bin/mount", "-o", "remount,size=\(size)", mountPoint.path]) == 0)
        }

        func unmount() { _ = try? Self.run(["/bin/umount", "-l", mountPoint.path]) }

        @discardableResult
        static func run(_ arguments: [String]) throws -> Int32 {
            try ChildProcess.run(arguments[0], Array(arguments.dropFirst()), environment: nil).status
        }
    }

    static func waitsForSpace(_ download: Download) async -> Bool {
        await waitUntil(deadline: .now + .seconds(30)) {
            download.state == .queued && download.waitReason?.kind == .lowDiskSpace
        }
    }

    @Test func aDownloadThatMeetsENOSPCWaitsKeepsItsBytesAndCompletesWhenSpaceReturns() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 6 << 20, seed: 32, at: "f.bin")
        let disk = try SmallDisk(in: directory, size: "2m")
        defer { disk.unmount() }
        // No minimum (the length is unknown until the server answers, so only ENOSPC stops it).
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.spacePolicy = SpacePolicy(minimumFree: MinimumFreeSpace(bytes: 0), recheckInterval: .milliseconds(200))
        })
        let destination = disk.mountPoint.appendingPathComponent("f.bin")
        let download = try await agent.download(from: nginx.url("f.bin"), to: destination,
                                                options: .init(expectedSHA256: F.sha256(content)))
        let log = F.EventLog(download)
        #expect(await Self.waitsForSpace(download), "state \(download.state), events \(log.all)")
        guard case .lowDiskSpace(let free, let needed) = download.waitReason else { Issue.record("no reason"); return }
        #expect(free < needed, "\(free) \(needed)")
        // The state is set before the event reaches the log's stream: wait for the event too.
        #expect(await log.wait(timeout: .seconds(10)) { if case .waiting(.lowDiskSpace) = $0 { true } else { false } }, "\(log.all)")
        #expect(!log.all.contains { if case .failed = $0 { true } else { false } }, "\(log.all)")
        // Its bytes stay, it is not finished, and it stays waiting while the disk is full.
        let partial = try FileManager.default.attributesOfItem(atPath: destination.path + ".part")[.size] as? Int ?? 0
        #expect(partial > 0)
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(await !waitUntil(deadline: .now + .milliseconds(600)) { download.state != .queued }, "still held while full")

        try disk.resize("32m")
        _ = try await F.finish(download, log: log)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect((log.resumedOffsets.last ?? 0) > 0, "continued from its bytes: \(log.all)")
        #expect(download.waitReason == nil)
        await agent.shutdown()
    }

    @Test func aDownloadThatWouldLeaveTooLittleWaitsBeforeWritingAndStartsWhenSpaceReturns() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 6 << 20, seed: 33, at: "g.bin", accessLog: true)
        let disk = try SmallDisk(in: directory, size: "8m")
        defer { disk.unmount() }
        // 6 MiB to write and 4 MiB to leave do not fit in 8 MiB.
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.spacePolicy = SpacePolicy(minimumFree: MinimumFreeSpace(bytes: 4 << 20), recheckInterval: .milliseconds(200))
        })
        let destination = disk.mountPoint.appendingPathComponent("g.bin")
        var options = DownloadOptions(expectedSHA256: F.sha256(content))
        options.expectedLength = Int64(content.count)
        let download = try await agent.download(from: nginx.url("g.bin"), to: destination, options: options)
        #expect(await Self.waitsForSpace(download), "state \(download.state)")
        guard case .lowDiskSpace(let free, let needed) = download.waitReason else { Issue.record("no reason"); return }
        #expect(needed == 10 << 20 && free <= 8 << 20, "\(free) \(needed)")
        #expect(download.waitReason?.description.hasSuffix(" free, needs 10 MiB") == true, "\(download.waitReason!)")
        #expect(!FileManager.default.fileExists(atPath: destination.path + ".part"), "nothing written while waiting")
        #expect(nginx.loggedRequests.isEmpty, "nothing asked of the server while waiting")

        try disk.resize("32m")
        _ = try await F.finish(download)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        await agent.shutdown()
    }

    /// The agent end to end: `min-free-space=` from agent.conf, the reason in `queue list` (text
    /// and `--json`), the `waiting` event and the metric, then completion once space returns.
    @Test func theAgentShowsTheReasonEverywhereAndCompletesWhenSpaceReturns() throws {
        let namespace = try ConnectedNamespace()
        let (nginx, directory, content) = try F.nginxServing(count: 6 << 20, seed: 34, at: "h.bin", label: "agent")
        // 0700: `download-dir=` must be a directory only the agent's owner can write.
        let disk = try SmallDisk(in: directory, size: "2m,mode=0700")
        defer { disk.unmount() }
        let state = directory.file("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try "download-dir=\(disk.mountPoint.path)\nmin-free-space=4m\n"
            .write(to: state.appendingPathComponent("agent.conf"), atomically: true, encoding: .utf8)
        let agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let destination = disk.mountPoint.appendingPathComponent("h.bin")
        let added = try agent.control(["queue", "add", nginx.url("h.bin").absoluteString, "-o", destination.path,
                                       "--sha256", F.sha256(content)])
        #expect(added.status == 0, "\(added)")

        // 2 MiB free, 4 MiB to leave: held before its first byte.
        #expect(F.waitSync { (try? agent.list())?.first?["waitingFor"] as? String == "lowDiskSpace" }, "\(agent.output)")
        let row = try #require(try agent.list().first)
        #expect(row["state"] as? String == "queued")
        #expect((row["waitingReason"] as? String ?? "").hasSuffix(" free, needs 4 MiB"), "\(row)")
        let text = try agent.control(["queue", "list"]).standardOutput
        #expect(text.contains("(waiting: ") && text.contains(" free, needs 4 MiB)"), "\(text)")
        #expect(agent.waitForLine { $0.contains(#""event":"waiting""#) && $0.contains(#""reason":"lowDiskSpace""#) } != nil,
                "\(agent.output)")
        let metrics = try agent.control(["agent", "metrics"]).standardOutput
        #expect(metrics.contains("reachability_downloads_waiting{reason=\"lowDiskSpace\"} 1"), "\(metrics)")
        let problems = agent.output.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")

        try disk.resize("32m")
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""type":"download","event":"completed""#) } != nil,
                "\(agent.output)")
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect(try agent.list().first?["waitingFor"] == nil)
        _ = agent.terminate()
    }
}
