import Foundation
import LinuxSystem
import Synchronization
import Testing
@testable import ResumableDownloads
import TestSupport

/// A temporary directory removed when the test ends.
typealias TemporaryDirectory = ScratchDirectory

extension ScratchDirectory {
    convenience init() throws { try self.init("rd") }
    /// The checked state directory `state/` inside it.
    func state() throws -> CheckedDirectory {
        try CheckedDirectory.open(path("state"), policy: .privateState, creating: true)
    }
    /// The one resume record in `state/`.
    func readRecord() throws -> ResumeRecord {
        let state = try state()
        let name = try #require(try state.entries().first { $0.hasSuffix(".json") })
        return try ResumeRecord.read(name, in: state)
    }
    /// Whether `state/` holds a record.
    var hasRecord: Bool {
        ((try? FileManager.default.contentsOfDirectory(atPath: path("state"))) ?? []).contains { $0.hasSuffix(".json") }
    }
}

@Suite("Partial file")
struct PartialFileTests {
    func record(in directory: TemporaryDirectory, verifiedOffset: Int64 = 0, sha: String? = nil) -> ResumeRecord {
        var record = ResumeRecord(id: UUID(), url: URL(string: "http://h/f")!,
                                  destination: URL(fileURLWithPath: directory.path("f")), expectedSHA256: sha, totalLength: nil,
                                  allowsExpensive: true)
        record.verifiedOffset = verifiedOffset
        return record
    }

    let limits = PartialFile.Limits(highWater: 1 << 20, lowWater: 256 << 10, checkpointInterval: 1 << 30)

    @Test func truncatesToTheVerifiedOffsetOnOpen() throws {
        let directory = try TemporaryDirectory()
        try Data(repeating: 7, count: 100).write(to: URL(fileURLWithPath: directory.path("f.part")))
        let file = try PartialFile(record: record(in: directory, verifiedOffset: 60), stateDirectory: try directory.state(),
                                   limits: limits)
        #expect(file.writtenEnd == 60)
        #expect(try FileManager.default.attributesOfItem(atPath: directory.path("f.part"))[.size] as? Int == 60)
    }

    @Test func checkpointPersistsTheWrittenOffset() async throws {
        let directory = try TemporaryDirectory()
        let file = try PartialFile(record: record(in: directory), stateDirectory: try directory.state(), limits: limits)
        let bytes = Data((0..<1000).map { UInt8($0 % 251) })
        bytes.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[0..<400]), at: 0) }
        bytes.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[400...]), at: 400) }
        #expect(try await file.checkpoint() == 1000)
        #expect(try directory.readRecord().verifiedOffset == 1000)
        #expect(FileManager.default.contents(atPath: directory.path("f.part")) == bytes)
        await file.close()
    }

    /// Issue 30: a fast download is not stopped for an fsync every `checkpointInterval`; by
    /// bytes only (spacing zero, as before), 4 MiB at 256 KiB took 16 periodic checkpoints.
    @Test(arguments: [(Duration.zero, 16), (Duration.seconds(3600), 0)])
    func periodicCheckpointsAreSpacedInTime(spacing: Duration, expected: Int) async throws {
        let directory = try TemporaryDirectory()
        var limits = PartialFile.Limits(highWater: 8 << 20, lowWater: 1 << 20, checkpointInterval: 256 << 10)
        limits.checkpointSpacing = spacing
        let file = try PartialFile(record: record(in: directory), stateDirectory: try directory.state(), limits: limits)
        let block = Data(repeating: 5, count: 256 << 10)
        for index in 0..<16 { block.withUnsafeBytes { file.append($0, at: Int64(index) << 18) } }
        await file.settled()
        #expect(file.statistics.periodicCheckpoints == expected)
        #expect(file.writtenEnd == 4 << 20)
        // An explicit checkpoint (pause, shutdown, an attempt's end) is never spaced out.
        #expect(try await file.checkpoint() == 4 << 20)
        await file.close()
    }

    @Test func completionVerifiesAndMovesIntoPlace() async throws {
        let directory = try TemporaryDirectory()
        let bytes = Data("hello, world\n".utf8)
        let file = try PartialFile(record: record(in: directory, sha: SHA256.hex(bytes)),
                                   stateDirectory: try directory.state(), limits: limits)
        bytes.withUnsafeBytes { file.append($0, at: 0) }
        let url = try await file.complete(totalLength: Int64(bytes.count), expectedLength: nil)
        #expect(FileManager.default.contents(atPath: url.path) == bytes)
        #expect(!FileManager.default.fileExists(atPath: directory.path("f.part")))
        #expect(!directory.hasRecord)
    }

    @Test func checksumMismatchMovesNothing() async throws {
        let directory = try TemporaryDirectory()
        let file = try PartialFile(record: record(in: directory, sha: String(repeating: "0", count: 64)),
                                   stateDirectory: try directory.state(), limits: limits)
        Data("abc".utf8).withUnsafeBytes { file.append($0, at: 0) }
        await #expect(throws: DownloadError.checksumMismatch) {
            _ = try await file.complete(totalLength: 3, expectedLength: nil)
        }
        #expect(!FileManager.default.fileExists(atPath: directory.path("f")))
        await file.discard()
        #expect(!FileManager.default.fileExists(atPath: directory.path("f.part")))
    }

    @Test func lengthMismatchMovesNothing() async throws {
        let directory = try TemporaryDirectory()
        let file = try PartialFile(record: record(in: directory), stateDirectory: try directory.state(), limits: limits)
        Data("abc".utf8).withUnsafeBytes { file.append($0, at: 0) }
        await #expect(throws: DownloadError.lengthMismatch) {
            _ = try await file.complete(totalLength: 4, expectedLength: nil)
        }
        #expect(!FileManager.default.fileExists(atPath: directory.path("f")))
        await file.close()
    }

    @Test func backpressurePausesAndTheDrainUnpauses() async throws {
        let directory = try TemporaryDirectory()
        let file = try PartialFile(record: record(in: directory), stateDirectory: try directory.state(), limits: limits)
        let drained = Mutex(0)
        file.setDrainHandler { drained.withLock { $0 += 1 } }
        let chunk = Data(repeating: 1, count: 256 << 10)
        var offset: Int64 = 0
        var paused = false
        // Push until the buffer refuses: bounded memory whatever the disk does.
        for _ in 0..<10_000 {
            if file.shouldPause(adding: chunk.count) { paused = true; break }
            chunk.withUnsafeBytes { file.append($0, at: offset) }
            offset += Int64(chunk.count)
        }
        #expect(paused)
        try await file.checkpoint()   // waits for the queue to drain
        #expect(drained.withLock { $0 } == 1)
        #expect(file.writtenEnd == offset)
        #expect(!file.shouldPause(adding: chunk.count))
        await file.close()
    }

    @Test func restartFromZeroForgetsTheEntity() async throws {
        let directory = try TemporaryDirectory()
        var initial = record(in: directory)
        initial.entityTag = "\"v1\""
        let file = try PartialFile(record: initial, stateDirectory: try directory.state(), limits: limits)
        Data("abc".utf8).withUnsafeBytes { file.append($0, at: 0) }
        try await file.checkpoint()
        try await file.restartFromZero()
        let stored = try directory.readRecord()
        #expect(stored.verifiedOffset == 0)
        #expect(stored.entityTag == nil)
        #expect(file.writtenEnd == 0)
        await file.close()
    }

    @Test func sha256KnownVectors() throws {
        #expect(SHA256.hex(Data()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Data("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}

@Suite("Incremental SHA-256")
struct IncrementalHashTests {
    @Test func resumedFileHashesThePrefixFromDisk() async throws {
        let directory = try TemporaryDirectory()
        let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        // 100 000 bytes already on disk from an earlier run.
        try bytes.prefix(100_000).write(to: URL(fileURLWithPath: directory.path("f.part")))
        var record = ResumeRecord(id: UUID(), url: URL(string: "http://h/f")!, destination: URL(fileURLWithPath: directory.path("f")), expectedSHA256: SHA256.hex(bytes),
                                  totalLength: 300_000, allowsExpensive: true)
        record.verifiedOffset = 100_000
        let file = try PartialFile(record: record, stateDirectory: try directory.state(),
                                   limits: .init(highWater: 1 << 20, lowWater: 1 << 18, checkpointInterval: 1 << 30))
        bytes.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[100_000..<200_000]), at: 100_000) }
        bytes.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[200_000...]), at: 200_000) }
        let url = try await file.complete(totalLength: 300_000, expectedLength: nil)
        #expect(FileManager.default.contents(atPath: url.path) == bytes)
    }

    @Test func restartFromZeroResetsTheHash() async throws {
        let directory = try TemporaryDirectory()
        let final = Data("the new version".utf8)
        let record = ResumeRecord(id: UUID(), url: URL(string: "http://h/f")!, destination: URL(fileURLWithPath: directory.path("f")), expectedSHA256: SHA256.hex(final),
                                  totalLength: nil, allowsExpensive: true)
        let file = try PartialFile(record: record, stateDirectory: try directory.state(),
                                   limits: .init(highWater: 1 << 20, lowWater: 1 << 18, checkpointInterval: 1 << 30))
        Data("old bytes".utf8).withUnsafeBytes { file.append($0, at: 0) }
        try await file.checkpoint()
        file.begin(.init(startOffset: 0, endOffset: nil, totalLength: nil, entityTag: "\"v2\"", lastModified: nil,
                         restartsFromZero: true))
        final.withUnsafeBytes { file.append($0, at: 0) }
        _ = try await file.complete(totalLength: Int64(final.count), expectedLength: nil)
        #expect(FileManager.default.contents(atPath: directory.path("f")) == final)
    }
}
