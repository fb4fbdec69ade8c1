import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Disk full on a small tmpfs: a clear error, the partial file and record kept, and completion
/// once space is freed. Mounting needs root (CI runs as root).
@Suite("Downloads onto a full disk", .serialized,
       .enabled(if: DownloadFixtures.isRoot, "mounting a tmpfs needs root"),
       .needsNginx)
struct DownloadDiskFullTests: DownloadScenarios {

    @discardableResult
    static func run(_ arguments: [String]) throws -> Int32 {
        try ChildProcess.run(arguments[0], Array(arguments.dropFirst()), environment: nil).status
    }

    @Test func diskFullKeepsThePartialFileAndCompletesAfterSpaceIsFreed() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 6 << 20, seed: 11, at: "f.bin")
        let mountPoint = directory.file("small")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        try #require(try Self.run(["/bin/mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mountPoint.path]) == 0)
        defer { _ = try? Self.run(["/bin/umount", "-l", mountPoint.path]) }

        // The state directory lives elsewhere: only the data disk is full.
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let destination = mountPoint.appendingPathComponent("f.bin")
        let download = try await agent.download(from: nginx.url("f.bin"), to: destination,
                                                options: .init(expectedSHA256: F.sha256(content)))
        await #expect(throws: DownloadError.diskFull) { _ = try await F.finish(download) }
        guard case .failed(let error) = download.state else { Issue.record("expected failed"); return }
        #expect(error.isResumable)
        #expect(error.urlErrorCode == .cannotWriteToFile)
        #expect(error.description.contains("No space left"))
        let partial = try FileManager.default.attributesOfItem(atPath: destination.path + ".part")[.size] as? Int ?? 0
        #expect(partial > 0)
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        let records = try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).filter { $0.hasSuffix(".json") }
        #expect(records.count == 1)

        // Free space, resume: continues from the kept bytes.
        try #require(try Self.run(["/bin/mount", "-o", "remount,size=16m", mountPoint.path]) == 0)
        // The log is created after resume(): the event stream of a failed download has ended, and
        // a subscription taken before resume() would not see the resumed run.
        let endedLog = F.EventLog(download)
        #expect(await endedLog.settled(), "the events of a failed download end after the replay")
        await download.resume()
        let log = F.EventLog(download)
        _ = try await F.finish(download, log: log)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect((log.resumedOffsets.first ?? 0) > 0, "\(log.all)")
        await agent.shutdown()
    }
}
