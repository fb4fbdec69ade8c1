import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// The digest covers the bytes as they are on disk, and a SHA-256 given when resuming is adopted.
@Suite("Verification of resumed downloads", .serialized)
struct DownloadVerificationTests: DownloadScenarios {

    static let content = F.randomData(count: 4 << 20 + 3, seed: 5)

    /// A first run without a checksum stops half way (stalled server, then shutdown); the rerun
    /// gives `expectedSHA256`. Intact: verified, exit 0. The partial file corrupted meanwhile:
    /// a checksum mismatch, never an unverified success.
    @Test(arguments: [false, true])
    func aChecksumGivenOnResumeIsAdoptedAndCoversTheStoredBytes(corrupt: Bool) async throws {
        let server = try Server { request, index in
            var reply = Server.Reply.honest(request, content: Self.content, etag: "\"e\"")
            if index == 0 { reply.stallAfter = Self.content.count / 2 }
            return reply
        }
        let directory = try F.Directory()
        let destination = directory.file("out.bin")
        let first = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) { $0.stallTimeout = .seconds(60) })
        let download = try await first.download(from: server.url(), to: destination)
        let part = destination.path + ".part"
        _ = download
        // Progress is reported at most every 100 ms; the file itself says how far the burst got.
        #expect(await F.wait { ((try? FileManager.default.attributesOfItem(atPath: part)[.size] as? Int) ?? 0) >= 3 << 19 })
        await first.shutdown()
        #expect((try FileManager.default.attributesOfItem(atPath: part)[.size] as? Int ?? 0) > 1 << 20)
        if corrupt {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: part))
            try handle.seek(toOffset: 1000)
            try handle.write(contentsOf: Data([0xFF, 0x00, 0xFF]))
            try handle.close()
        }
        let second = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let resumed = try #require(await second.restoreDownload(from: server.url(), to: destination,
                                                                options: .init(expectedSHA256: F.sha256(Self.content))))
        #expect(resumed.options.expectedSHA256 == F.sha256(Self.content))
        let log = F.EventLog(resumed)
        if corrupt {
            await #expect(throws: DownloadError.checksumMismatch) { _ = try await F.finish(resumed, log: log) }
            #expect(!FileManager.default.fileExists(atPath: destination.path))
        } else {
            _ = try await F.finish(resumed, log: log)
            #expect(F.sha256(fileAt: destination) == F.sha256(Self.content))
            #expect(log.resumedOffsets.first ?? 0 > 0, "it resumed rather than starting over")
        }
        await second.shutdown()
    }
}
