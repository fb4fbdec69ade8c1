import TestSupport
import Foundation
import LinuxSystem
import Testing
@testable import ResumableDownloads

/// The block journal: what a restart keeps after SIGKILL (everything written but the last
/// partial block) and after a simulated power loss (data or journal truncated, zero-filled or
/// torn past the last fsync): never a wrong byte, never less than the checkpoint. Seeded.
@Suite("Crash journal")
struct CrashJournalTests {
    static let block = Int(1 << BlockJournal.defaultBlockShift)
    let limits = PartialFile.Limits(highWater: 1 << 20, lowWater: 256 << 10, checkpointInterval: 1 << 40)

    func record(in directory: TemporaryDirectory, tag: String = "\"v1\"") -> ResumeRecord {
        var record = ResumeRecord(id: UUID(), url: URL(string: "http://h/f")!,
                                  destination: URL(fileURLWithPath: directory.path("f")), expectedSHA256: nil,
                                  totalLength: nil, allowsExpensive: true)
        record.entityTag = tag
        return record
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var generator = SplitMix(seed: seed)
        var words = (0..<(count + 7) / 8).map { _ in generator.next() }
        return words.withUnsafeMutableBytes { Array($0.prefix(count)) }
    }

    /// Appends `content[range]` to `file` at its offset, and checkpoints the first time the bytes
    /// written (`writtenBefore` plus these) reach `checkpoint`: the kill tests' one checkpoint.
    static func write(_ content: [UInt8], _ range: Range<Int>, to file: PartialFile, writtenBefore: Int, checkpoint: Int,
                      checkpointed: inout Bool) async throws {
        content.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[range]), at: Int64(range.lowerBound)) }
        if !checkpointed, writtenBefore + range.count >= checkpoint {
            _ = try await file.checkpoint()
            checkpointed = true
        }
    }

    /// Writes `content` in uneven chunks, checkpointing after `checkpoint` bytes, then drops the
    /// file without closing anything cleanly, as SIGKILL would. Returns the record on disk.
    func writeAndKill(_ content: [UInt8], checkpoint: Int, record: ResumeRecord, directory: TemporaryDirectory,
                      generator: inout SplitMix) async throws -> ResumeRecord {
        var file: PartialFile? = try PartialFile(record: record, stateDirectory: try directory.state(), limits: limits)
        var offset = 0
        var checkpointed = false
        while offset < content.count {
            let count = min(content.count - offset, 1 + Int(generator.next() % 200_000))
            try await Self.write(content, offset..<offset + count, to: file!, writtenBefore: offset, checkpoint: checkpoint,
                                 checkpointed: &checkpointed)
            offset += count
        }
        await file!.settled()
        file = nil
        return try directory.readRecord()
    }

    func reopen(_ directory: TemporaryDirectory) throws -> (PartialFile, ResumeRecord) {
        let record = try directory.readRecord()
        return (try PartialFile(record: record, stateDirectory: try directory.state(), limits: limits), record)
    }

    /// The first kept range whose bytes on disk are not the content's, if any.
    func mismatch(_ kept: RangeSet<Int64>, in partial: [UInt8], _ content: [UInt8]) -> Range<Int64>? {
        kept.ranges.first { range in
            Int(range.upperBound) > partial.count || Int(range.upperBound) > content.count
                || partial[Int(range.lowerBound)..<Int(range.upperBound)] != content[Int(range.lowerBound)..<Int(range.upperBound)]
        }
    }

    /// Writes every byte of `content` that `kept` lacks, as a download would.
    func fillGaps(_ file: PartialFile, kept: RangeSet<Int64>, _ content: [UInt8]) {
        for gap in RangeSet(0..<Int64(content.count)).subtracting(kept).ranges {
            content.withUnsafeBytes {
                file.append(UnsafeRawBufferPointer(rebasing: $0[Int(gap.lowerBound)..<Int(gap.upperBound)]), at: gap.lowerBound)
            }
        }
    }

    func partial(_ directory: TemporaryDirectory) -> [UInt8] {
        [UInt8](FileManager.default.contents(atPath: directory.path("f.part")) ?? Data())
    }

    /// Every write gets an entry (a whole block's, or the written prefix of the block it ends
    /// in), so after SIGKILL every byte that reached the file is kept, the last partial block too.
    @Test func afterSIGKILLEveryWrittenByteIsKept() async throws {
        var generator = SplitMix(seed: 10)
        for trial in 0..<6 {
            let directory = try TemporaryDirectory()
            let content = Self.bytes(Self.block * 6 + Int(generator.next() % UInt64(Self.block)), seed: UInt64(trial))
            let checkpoint = Int(generator.next() % UInt64(content.count / 2))
            let written = try await writeAndKill(content, checkpoint: checkpoint, record: record(in: directory),
                                                 directory: directory, generator: &generator)
            let (file, _) = try reopen(directory)
            let expected = content.count
            #expect(file.writtenEnd == Int64(expected), "trial \(trial)")
            #expect(difference(partial(directory), content[..<expected]) == nil)
            // Finishing from there gives the whole file.
            content.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[expected...]), at: Int64(expected)) }
            let url = try await file.complete(totalLength: Int64(content.count), expectedLength: nil)
            #expect(difference([UInt8](FileManager.default.contents(atPath: url.path) ?? Data()), content[...]) == nil)
            #expect(!FileManager.default.fileExists(atPath: directory.path("state/\(BlockJournal.fileName(for: written.id))")))
        }
    }

    /// Data and journal damaged past the checkpoint in every way a power loss can: the restart
    /// keeps a prefix of the true content, never less than the checkpoint, never a wrong byte.
    @Test func powerLossNeverYieldsAWrongFile() async throws {
        var generator = SplitMix(seed: 20)
        for trial in 0..<40 {
            let directory = try TemporaryDirectory()
            let content = Self.bytes(Self.block * 8 + Int(generator.next() % UInt64(Self.block)), seed: 1_000 + UInt64(trial))
            let checkpoint = Int(generator.next() % UInt64(content.count / 2))
            let written = try await writeAndKill(content, checkpoint: checkpoint, record: record(in: directory),
                                                 directory: directory, generator: &generator)
            let verified = Int(written.verifiedOffset)
            let dataPath = directory.path("f.part")
            let journalPath = directory.path("state/\(BlockJournal.fileName(for: written.id))")
            let damage = Int(generator.next() % 6)
            let what: String
            switch damage {
            case 0:
                what = "data truncated"
                try truncate(dataPath, to: verified + Int(generator.next() % UInt64(content.count - verified + 1)))
            case 1:
                what = "data zero-filled"
                try zeroFill(dataPath, from: verified, generator: &generator)
            case 2:
                what = "journal truncated"
                try truncate(journalPath, to: Int(generator.next() % UInt64(fileSize(journalPath) + 1)))
            case 3:
                what = "journal zero-filled"
                try zeroFill(journalPath, from: 0, generator: &generator)
            case 4:
                what = "both zero-filled and cut"
                try zeroFill(dataPath, from: verified, generator: &generator)
                try truncate(journalPath, to: Int(generator.next() % UInt64(fileSize(journalPath) + 1)))
            default:
                what = "data extended with zeros (size reached the disk, blocks did not)"
                try truncate(dataPath, to: verified + Int(generator.next() % UInt64(content.count - verified + 1)))
                try truncate(dataPath, to: content.count)
            }
            let (file, _) = try reopen(directory)
            let kept = file.written
            #expect(Int(file.writtenEnd) >= verified, "trial \(trial), \(what)")
            #expect((kept.ranges.last?.upperBound ?? 0) <= Int64(content.count))
            #expect(mismatch(kept, in: partial(directory), content) == nil, "trial \(trial), \(what): kept \(kept) of \(content.count)")
            fillGaps(file, kept: kept, content)
            let url = try await file.complete(totalLength: Int64(content.count), expectedLength: nil)
            #expect(difference([UInt8](FileManager.default.contents(atPath: url.path) ?? Data()), content[...]) == nil, "trial \(trial), \(what)")
        }
    }

    /// Journals that are not this download's: another download's, another entity's, garbage,
    /// a symbolic link, a hard link to a file elsewhere, a FIFO or a directory in its place. None
    /// makes us keep a byte past the checkpoint or touch anything else; a planted link is
    /// removed, never written through (a directory cannot be removed by unlink: the download
    /// then runs with checkpoints only).
    @Test func hostileJournalsKeepOnlyTheCheckpoint() async throws {
        var generator = SplitMix(seed: 30)
        let content = Self.bytes(Self.block * 4, seed: 77)
        for attack in ["another download", "another entity", "garbage", "symlink", "hard link", "fifo", "directory",
                       "oversized header"] {
            let directory = try TemporaryDirectory()
            let mine = record(in: directory)
            let written = try await writeAndKill(content, checkpoint: Self.block, record: mine, directory: directory,
                                                 generator: &generator)
            let journalPath = directory.path("state/\(BlockJournal.fileName(for: written.id))")
            let outside = directory.path("outside")
            try Data("keep me".utf8).write(to: URL(fileURLWithPath: outside))
            var reopenedRecord = written
            switch attack {
            case "another download":
                // A journal that vouches for these very bytes, but under another download's id.
                let other = try TemporaryDirectory()
                let theirs = try await writeAndKill(content, checkpoint: 0, record: record(in: other), directory: other,
                                                    generator: &generator)
                try FileManager.default.removeItem(atPath: journalPath)
                try FileManager.default.copyItem(atPath: other.path("state/\(BlockJournal.fileName(for: theirs.id))"), toPath: journalPath)
            case "another entity":
                reopenedRecord.entityTag = "\"v2\""   // the record moved on; the journal did not
                try reopenedRecord.write(to: try directory.state())
            case "garbage":
                try Data(Self.bytes(100_000, seed: 5)).write(to: URL(fileURLWithPath: journalPath))
            case "symlink":
                try FileManager.default.removeItem(atPath: journalPath)
                try FileManager.default.createSymbolicLink(atPath: journalPath, withDestinationPath: outside)
            case "hard link":
                // A journal that is also a file outside the state directory: writing entries
                // (or cutting the journal) through it would change that file.
                try FileManager.default.removeItem(atPath: journalPath)
                try FileManager.default.linkItem(atPath: outside, toPath: journalPath)
            case "fifo":
                try FileManager.default.removeItem(atPath: journalPath)
                #expect(mkfifo(journalPath, 0o600) == 0)
            case "directory":
                try FileManager.default.removeItem(atPath: journalPath)
                try FileManager.default.createDirectory(atPath: journalPath, withIntermediateDirectories: false)
            default:
                var header = BlockJournal.header(binding: BlockJournal.binding(for: written), blockShift: 40)
                header += [UInt8](repeating: 0xff, count: 4096)
                try Data(header).write(to: URL(fileURLWithPath: journalPath))
            }
            let (file, _) = try reopen(directory)
            #expect(file.writtenEnd == written.verifiedOffset, "\(attack)")
            #expect(difference(partial(directory), content[..<Int(written.verifiedOffset)]) == nil, "\(attack)")
            #expect(FileManager.default.contents(atPath: outside) == Data("keep me".utf8), "\(attack)")
            let attributes = try FileManager.default.attributesOfItem(atPath: journalPath)
            let kind = attributes[.type] as? FileAttributeType
            if attack == "directory" {
                #expect(kind == .typeDirectory, "a directory is left alone")
            } else {
                #expect(kind == .typeRegular, "\(attack): the journal is a file of ours again")
                #expect((attributes[.referenceCount] as? Int) == 1, "\(attack): the journal has one link")
            }
            // Finishing from the checkpoint still gives the whole file.
            let kept = Int(file.writtenEnd)
            content.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[kept...]), at: Int64(kept)) }
            let url = try await file.complete(totalLength: Int64(content.count), expectedLength: nil)
            #expect(difference([UInt8](FileManager.default.contents(atPath: url.path) ?? Data()), content[...]) == nil, "\(attack)")
            #expect(FileManager.default.contents(atPath: outside) == Data("keep me".utf8), "\(attack)")
        }
    }

    // MARK: segments

    /// Writes `content` as a segmented download would: `writers` connections, each from a
    /// block-aligned start (the first at zero), interleaved in uneven chunks, with a checkpoint
    /// when about `checkpoint` bytes are in; then drops everything as SIGKILL would. Returns the
    /// record and how far each writer got.
    func writeSegmentsAndKill(_ content: [UInt8], writers: Int, checkpoint: Int, stopAt: Double, record: ResumeRecord,
                              directory: TemporaryDirectory, generator: inout SplitMix) async throws -> (ResumeRecord, [Range<Int>]) {
        var file: PartialFile? = try PartialFile(record: record, stateDirectory: try directory.state(), limits: limits)
        let share = content.count / writers / Self.block * Self.block
        var starts = (0..<writers).map { $0 * share }
        let ends = starts.dropFirst().map { $0 } + [content.count]
        file!.setSeams(Set(starts.dropFirst().map { Int64($0) }))
        var total = 0
        var checkpointed = false
        let limit = Int(Double(content.count) * stopAt)
        while total < limit {
            let writer = Int(generator.next() % UInt64(writers))
            guard starts[writer] < ends[writer] else { continue }
            let count = min(ends[writer] - starts[writer], 1 + Int(generator.next() % 100_000))
            let offset = starts[writer]
            try await Self.write(content, offset..<offset + count, to: file!, writtenBefore: total, checkpoint: checkpoint,
                                 checkpointed: &checkpointed)
            starts[writer] += count
            total += count
        }
        await file!.settled()
        file = nil
        let reached = (0..<writers).map { index in (index * share)..<starts[index] }
        return (try directory.readRecord(), reached)
    }

    @Test func segmentsWrittenOutOfOrderSurviveSIGKILLLosingNothingWritten() async throws {
        var generator = SplitMix(seed: 40)
        for trial in 0..<5 {
            let directory = try TemporaryDirectory()
            let content = Self.bytes(Self.block * 16 + Int(generator.next() % UInt64(Self.block)), seed: 400 + UInt64(trial))
            let writers = 2 + trial % 5
            var mine = record(in: directory)
            mine.totalLength = Int64(content.count)
            let (written, reached) = try await writeSegmentsAndKill(
                content, writers: writers, checkpoint: Int(generator.next() % UInt64(content.count / 2)), stopAt: 0.7,
                record: mine, directory: directory, generator: &generator)
            // The seams were on record before any byte of the segments.
            #expect(written.seamSet.count == writers - 1, "trial \(trial)")
            let (file, reopened) = try reopen(directory)
            let kept = file.written
            #expect(kept.isSuperset(of: reopened.durable), "trial \(trial)")
            #expect(mismatch(kept, in: partial(directory), content) == nil, "trial \(trial)")
            // Each writer's partial block is journaled by its prefix: nothing written is lost.
            var lost: Int64 = 0
            for range in reached where !range.isEmpty {
                let missing = RangeSet(Int64(range.lowerBound)..<Int64(range.upperBound)).subtracting(kept)
                lost = max(lost, Self.count(missing))
            }
            #expect(lost == 0, "trial \(trial): a writer lost \(lost) bytes")
            fillGaps(file, kept: kept, content)
            let url = try await file.complete(totalLength: Int64(content.count), expectedLength: nil)
            #expect(difference([UInt8](FileManager.default.contents(atPath: url.path) ?? Data()), content[...]) == nil, "trial \(trial)")
        }
    }

    static func count(_ set: RangeSet<Int64>) -> Int64 { set.ranges.reduce(0) { $0 + $1.upperBound - $1.lowerBound } }

    /// A block only partly written is never kept, whatever the rest of it holds on disk.
    @Test func aBlockPartlyWrittenIsNeverKept() async throws {
        let directory = try TemporaryDirectory()
        let block = Self.block
        let content = Self.bytes(block * 4, seed: 41)
        // A crash left blocks 0 and 1 holding another version's bytes (never vouched for) and
        // block 2 durable; the file is not cut before block 2, so the stale bytes stay on disk.
        var onDisk = Self.bytes(block * 2, seed: 42)
        onDisk += content[(block * 2)..<(block * 3)]
        try Data(onDisk).write(to: URL(fileURLWithPath: directory.path("f.part")))
        var mine = record(in: directory)
        mine.totalLength = Int64(content.count)
        mine.ranges = [[Int64(block * 2), Int64(block * 3)]]
        try mine.write(to: try directory.state())
        do {
            let (file, _) = try reopen(directory)
            #expect(file.written == RangeSet(Int64(block * 2)..<Int64(block * 3)))
            // This run writes from the middle of block 0 to the end of block 1, then is killed.
            content.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[(block / 2)..<(block * 2)]), at: Int64(block / 2)) }
            await file.settled()
        }
        let (again, _) = try reopen(directory)
        #expect(again.written == RangeSet(Int64(block)..<Int64(block * 3)),
                "block 1 is whole and block 2 durable; block 0 is half this download's and half stale")
        #expect(mismatch(again.written, in: partial(directory), content) == nil)
    }

    /// A range continuing a stored prefix in the middle of a block (a resume after a kill) reads
    /// that prefix back once and journals its progress from there: a second kill loses nothing.
    @Test func aResumedBlockIsJournaledByItsPrefixToo() async throws {
        let directory = try TemporaryDirectory()
        let content = Self.bytes(Self.block * 2, seed: 43)
        let first = Self.block + 1_000
        let second = Self.block + 50_000
        try record(in: directory).write(to: try directory.state())
        do {
            let (file, _) = try reopen(directory)
            content.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[..<first]), at: 0) }
            await file.settled()
        }
        do {
            let (file, _) = try reopen(directory)
            #expect(file.written == RangeSet(0..<Int64(first)))
            content.withUnsafeBytes { file.append(UnsafeRawBufferPointer(rebasing: $0[first..<second]), at: Int64(first)) }
            await file.settled()
        }
        let (again, _) = try reopen(directory)
        #expect(again.written == RangeSet(0..<Int64(second)))
        #expect(mismatch(again.written, in: partial(directory), content) == nil)
    }

    /// An entry whose bytes did not reach the disk (a power loss kept the journal page and not
    /// the data's, or cut the file) vouches for nothing: the data is read back and compared.
    @Test func anEntryNeverVouchesForBytesNotOnDisk() async throws {
        for damage in ["zeroed", "cut"] {
            let directory = try TemporaryDirectory()
            let content = Self.bytes(Self.block / 2, seed: 44)
            try record(in: directory).write(to: try directory.state())
            do {
                let (file, _) = try reopen(directory)
                content.withUnsafeBytes { file.append($0, at: 0) }
                await file.settled()
            }
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: directory.path("f.part")))
            if damage == "zeroed" {
                try handle.seek(toOffset: 70_000)
                try handle.write(contentsOf: Data(count: 4_096))
            } else {
                try handle.truncate(atOffset: UInt64(content.count - 1))
            }
            try handle.close()
            let (file, _) = try reopen(directory)
            #expect(file.written.isEmpty, "\(damage): kept \(file.written)")
        }
    }

    /// An older build's journal (version 1: one UInt64 per whole block) is read and rewritten in
    /// this layout, so its blocks are kept now and after another kill.
    @Test func anOlderBuildsJournalIsKeptAndRewritten() async throws {
        let directory = try TemporaryDirectory()
        let content = Self.bytes(Self.block * 2 + 500, seed: 45)
        let mine = record(in: directory)
        try mine.write(to: try directory.state())
        try Data(content).write(to: URL(fileURLWithPath: directory.path("f.part")))
        let binding = BlockJournal.binding(for: mine)
        var journal = BlockJournal.header(binding: binding, blockShift: BlockJournal.defaultBlockShift,
                                          version: BlockJournal.versionWholeBlocks)
        for index in 0..<2 {
            let block = content[(index * Self.block)..<((index + 1) * Self.block)]
            let entry = block.withUnsafeBytes {
                BlockJournal.checksum(seed: BlockJournal.seed(binding), index: Int64(index), $0)
            }
            withUnsafeBytes(of: entry.littleEndian) { journal += $0 }
        }
        let journalPath = directory.path("state/\(BlockJournal.fileName(for: mine.id))")
        try Data(journal).write(to: URL(fileURLWithPath: journalPath))
        do {
            let (file, _) = try reopen(directory)
            #expect(file.written == RangeSet(0..<Int64(Self.block * 2)))
        }
        let rewritten = [UInt8](FileManager.default.contents(atPath: journalPath) ?? Data())
        #expect(Array(rewritten.prefix(BlockJournal.headerSize)) == BlockJournal.header(binding: binding, blockShift: BlockJournal.defaultBlockShift))
        let (again, _) = try reopen(directory)
        #expect(again.written == RangeSet(0..<Int64(Self.block * 2)))
    }

    @Test func aSegmentedFileWithAnExpectedDigestVerifiesAndRefusesHoles() async throws {
        let directory = try TemporaryDirectory()
        let content = Self.bytes(Self.block * 9 + 1234, seed: 43)
        var mine = record(in: directory)
        mine.expectedSHA256 = SHA256.hex(Data(content))
        let file = try PartialFile(record: mine, stateDirectory: try directory.state(), limits: limits)
        // Three ranges written back to front, the middle one last.
        let cuts = [0, Self.block * 3, Self.block * 6, content.count]
        for index in [2, 0, 1] {
            content.withUnsafeBytes {
                file.append(UnsafeRawBufferPointer(rebasing: $0[cuts[index]..<cuts[index + 1]]), at: Int64(cuts[index]))
            }
        }
        let url = try await file.complete(totalLength: Int64(content.count), expectedLength: nil)
        #expect(difference([UInt8](FileManager.default.contents(atPath: url.path) ?? Data()), content[...]) == nil)

        // The same with a range never written: the length is right, the file is not.
        let other = try TemporaryDirectory()
        var theirs = record(in: other)
        theirs.expectedSHA256 = mine.expectedSHA256
        let holed = try PartialFile(record: theirs, stateDirectory: try other.state(), limits: limits)
        for index in [2, 0] {
            content.withUnsafeBytes {
                holed.append(UnsafeRawBufferPointer(rebasing: $0[cuts[index]..<cuts[index + 1]]), at: Int64(cuts[index]))
            }
        }
        await #expect(throws: DownloadError.self) { _ = try await holed.complete(totalLength: Int64(content.count), expectedLength: nil) }
    }

    @Test func powerLossWithSegmentsNeverKeepsAWrongByte() async throws {
        var generator = SplitMix(seed: 44)
        for trial in 0..<12 {
            let directory = try TemporaryDirectory()
            let content = Self.bytes(Self.block * 8 + Int(generator.next() % UInt64(Self.block)), seed: 4_400 + UInt64(trial))
            var mine = record(in: directory)
            mine.totalLength = Int64(content.count)
            let (written, _) = try await writeSegmentsAndKill(
                content, writers: 2 + trial % 4, checkpoint: Int(generator.next() % UInt64(content.count / 2)), stopAt: 0.8,
                record: mine, directory: directory, generator: &generator)
            let dataPath = directory.path("f.part")
            let journalPath = directory.path("state/\(BlockJournal.fileName(for: written.id))")
            switch trial % 3 {
            case 0: try zeroFill(dataPath, from: 0, generator: &generator)
            case 1: try zeroFill(journalPath, from: 0, generator: &generator)
            default: try truncate(dataPath, to: Int(generator.next() % UInt64(try fileSize(dataPath) + 1)))
            }
            var durable = written.durable
            durable.formIntersection(RangeSet(0..<Int64(try fileSize(dataPath))))
            let (file, _) = try reopen(directory)
            // The durable bytes the file still holds are kept; zero-filling the data file damages
            // durable bytes too (not a power loss after an fsync), so there only what the
            // journal vouches for must match.
            #expect(file.written.isSuperset(of: durable), "trial \(trial)")
            let checked = trial % 3 == 0 ? file.written.subtracting(durable) : file.written
            #expect(mismatch(checked, in: partial(directory), content) == nil, "trial \(trial)")
        }
    }

    /// Where two byte strings first differ (or their lengths), nil when equal: a failing
    /// #expect on megabytes would print (and diff) them whole.
    func difference(_ actual: [UInt8], _ expected: ArraySlice<UInt8>) -> String? {
        guard actual.count == expected.count else { return "\(actual.count) bytes, expected \(expected.count)" }
        let same = actual.withUnsafeBytes { a in expected.withUnsafeBytes { b in a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 } }
        return same ? nil : "the bytes differ"
    }

    // MARK: damage

    func fileSize(_ path: String) throws -> Int {
        try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0
    }

    func truncate(_ path: String, to length: Int) throws {
        #expect(Glibc.truncate(path, off_t(length)) == 0)
    }

    /// Zeroes one random range at or past `from` (the blocks a power loss never wrote).
    func zeroFill(_ path: String, from: Int, generator: inout SplitMix) throws {
        let size = try fileSize(path)
        guard size > from else { return }
        let start = from + Int(generator.next() % UInt64(size - from))
        let count = 1 + Int(generator.next() % UInt64(size - start))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64(start))
        try handle.write(contentsOf: Data(count: count))
        try handle.close()
    }
}


@Suite("Block checksum (XXH64)")
struct BlockChecksumTests {
    @Test(arguments: [("", 0xEF46_DB37_51D8_E999 as UInt64), ("a", 0xD24E_C4F1_A98C_6E5B), ("abc", 0x44BC_2CF5_AD77_0999)])
    func referenceVectors(_ text: String, _ expected: UInt64) {
        #expect(Array(text.utf8).withUnsafeBytes { BlockChecksum.hash($0) } == expected)
    }

    @Test func streamingEqualsOneShotAndSeedsDiffer() {
        var generator = SplitMix(seed: 3)
        let bytes = CrashJournalTests.bytes(100_003, seed: 4)
        let whole = bytes.withUnsafeBytes { BlockChecksum.hash($0, seed: 9) }
        var streaming = BlockChecksum(seed: 9)
        var offset = 0
        while offset < bytes.count {
            let count = min(bytes.count - offset, 1 + Int(generator.next() % 70))
            bytes.withUnsafeBytes { streaming.update(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + count])) }
            offset += count
        }
        #expect(streaming.finalize() == whole)
        #expect(bytes.withUnsafeBytes { BlockChecksum.hash($0, seed: 10) } != whole)
    }
}
