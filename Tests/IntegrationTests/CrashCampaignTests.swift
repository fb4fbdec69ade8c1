import TestSupport
import Foundation
import Testing
@testable import ResumableDownloads

/// `reachability download` SIGKILLed at seeded random moments against nginx on loopback, then
/// run again: the rerun resumes from what the killed run wrote (the block journal, not only the
/// last checkpoint), and after a simulated power loss (the partial file or the journal cut or
/// zero-filled past the last fsync) it still never keeps a wrong byte. Every file ends with the
/// right SHA-256. Bounded: 10 kills of a 12 MiB download at 8 MB/s.
@Suite("SIGKILL and power-loss campaign (built binary, loopback nginx)", .serialized,
       .needsNginx)
struct CrashCampaignTests: DownloadScenarios {

    /// What a power loss may have done to the bytes past the last fsync.
    enum Damage: CaseIterable {
        case none, dataZeroFilled, dataCut, journalCut, journalZeroFilled
    }

    @Test func killsAndPowerLossesNeverCostMoreThanABlockOrYieldAWrongFile() async throws {
        let nginx = try DownloadTestNginx(slowRate: "8m")
        defer { nginx.stop() }
        let content = F.randomData(count: 12 << 20, seed: 42)
        try nginx.serve(content, at: "slow/big.iso")
        let url = nginx.url("slow/big.iso").absoluteString
        var generator = SplitMix(seed: 2026)
        for trial in 0..<10 {
            let directory = try F.Directory("crash")
            let state = directory.file("state").path
            let partial = directory.file("big.iso.part").path
            // One connection: the bound is one connection's (SegmentedDownloadTests kills several).
            let arguments = ["download", "--json", "--connections", "1", "--state-dir", state, "--sha256", F.sha256(content), url]
            let killAt = 1 << 20 + Int(generator.next() % UInt64(9 << 20))
            let damage = trial < 5 ? Damage.none : Damage.allCases[1 + trial % 4]

            let first = try CLIProcess(arguments, directory: directory.url)
            let reached = F.waitSync(timeout: .seconds(20)) { fileSize(partial) >= killAt }
            first.kill()   // SIGKILL
            #expect(reached, "trial \(trial): the download never reached \(killAt) bytes: \(first.transcript)")
            let left = fileSize(partial)
            let record = try #require(try readRecord(in: state), "trial \(trial): no resume record")
            try damageFiles(damage, partial: partial, journal: journalPath(in: state, id: record.id),
                            from: Int(record.verifiedOffset), generator: &generator)

            let second = try CLIProcess(arguments, directory: directory.url)
            #expect(await second.waitForExit() == 0, "trial \(trial), \(damage): \(second.transcript)")
            #expect(F.sha256(fileAt: directory.file("big.iso")) == F.sha256(content), "trial \(trial), \(damage)")
            let resumed = second.events.first { $0["event"] as? String == "resumed" }?["offset"] as? Int ?? 0
            #expect(resumed >= Int(record.verifiedOffset), "trial \(trial), \(damage): resumed below the checkpoint")
            if damage == .none {
                // A crash loses at most the last partial block (256 KiB) of what reached the file.
                #expect(left - resumed < 1 << 20, "trial \(trial): \(left) bytes on disk, resumed at \(resumed)")
            }
        }
    }

    func fileSize(_ path: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }

    func readRecord(in state: String) throws -> ResumeRecord? {
        let downloads = URL(fileURLWithPath: state).appendingPathComponent("downloads")
        for job in (try? FileManager.default.contentsOfDirectory(atPath: downloads.path)) ?? [] {
            let folder = downloads.appendingPathComponent(job)
            for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".json") {
                return try ResumeRecord.decode(Data(contentsOf: folder.appendingPathComponent(name)))
            }
        }
        return nil
    }

    func journalPath(in state: String, id: UUID) -> String? {
        let downloads = URL(fileURLWithPath: state).appendingPathComponent("downloads")
        for job in (try? FileManager.default.contentsOfDirectory(atPath: downloads.path)) ?? [] {
            let path = downloads.appendingPathComponent(job).appendingPathComponent(BlockJournal.fileName(for: id)).path
            if FileManager.default.fileExists(atPath: path) { return path }
        }
        return nil
    }

    /// Applies `damage` to what lies past the checkpoint at `from`.
    func damageFiles(_ damage: Damage, partial: String, journal: String?, from: Int,
                     generator: inout SplitMix) throws {
        func zeroFill(_ path: String, from: Int) throws {
            let size = fileSize(path)
            guard size > from else { return }
            let start = from + Int(generator.next() % UInt64(size - from))
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seek(toOffset: UInt64(start))
            try handle.write(contentsOf: Data(count: 1 + Int(generator.next() % UInt64(size - start))))
            try handle.close()
        }
        switch damage {
        case .none: break
        case .dataZeroFilled: try zeroFill(partial, from: from)
        case .dataCut: _ = truncate(partial, off_t(from + Int(generator.next() % UInt64(max(1, fileSize(partial) - from)))))
        case .journalCut:
            if let journal { _ = truncate(journal, off_t(Int(generator.next() % UInt64(fileSize(journal) + 1)))) }
        case .journalZeroFilled:
            if let journal { try zeroFill(journal, from: 64) }
        }
    }
}

