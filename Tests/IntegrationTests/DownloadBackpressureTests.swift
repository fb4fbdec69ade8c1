import Foundation
import LinuxSystem
import Testing
@testable import ResumableDownloads
import TestSupport

/// The engine against nginx with a simulated slow disk: the write callback must pause the
/// transfer instead of buffering, so memory stays bounded whatever the disk speed.
@Suite("Download backpressure", .needsNginx)
struct DownloadBackpressureTests: DownloadScenarios {

    @Test func slowDiskPausesTheTransferAndBoundsTheBuffer() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 24 << 20, seed: 12, at: "f.bin")
        let destination = directory.file("f.bin")
        let record = ResumeRecord(id: UUID(), url: nginx.url("f.bin"), destination: destination,
                                  expectedSHA256: F.sha256(content),
                                  totalLength: nil, allowsExpensive: true)
        let highWater = 1 << 20
        let file = try PartialFile(record: record,
                                   stateDirectory: try CheckedDirectory.open(directory.file("state").path, policy: .privateState, creating: true),
                                   limits: .init(highWater: highWater, lowWater: highWater / 4, checkpointInterval: 4 << 20,
                                                 simulatedWriteDelay: .milliseconds(1)))
        let engine = try TransferEngine()
        defer { engine.shutdown() }
        let settings = TransferSettings(connectTimeout: .seconds(5), stallTimeout: .seconds(10), stallBytesPerSecond: 1,
                                        maximumRedirects: 5, keepAliveIdle: .seconds(30), receiveBufferSize: 256 << 10,
                                        userAgent: "test")
        let request = TransferRequest(url: record.url, offset: 0, ifRange: nil, entityTag: nil, knownTotalLength: nil,
                                      interfaceName: nil, freshConnection: false, settings: settings)
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<TransferOutcome, Never>) in
            engine.start(engine.makeTransferID(), request, into: file, progress: { _ in },
                         completion: { continuation.resume(returning: $0) })
        }
        #expect(outcome.result == .completed(totalLength: Int64(content.count)))
        let statistics = file.statistics
        #expect(statistics.backpressurePauses > 0)
        // Never more than the limit plus one receive buffer in memory.
        #expect(statistics.peakPendingBytes <= highWater + (256 << 10))
        _ = try await file.complete(totalLength: Int64(content.count), expectedLength: nil)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
    }
}
