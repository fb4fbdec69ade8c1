import FoundationEssentials
import Glibc
import LinuxSystem

/// A per-block checksum journal beside a download's resume record: what lets a restart after a
/// crash keep the bytes written since the last checkpoint, without trusting anything a power
/// loss could have lost.
///
/// The resume record's durable bytes (`verifiedOffset` and, for a download fetched in segments,
/// `ranges`) stay the bound: they were fsynced before the record was written. Everything else is
/// in the page cache, on the disk, or lost, and only the journal tells which: once every byte of
/// a block was written (in any order, by any connection), the journal gets a 64-bit checksum of
/// the block (XXH64, seeded with the binding and the block's index), not fsynced: fed from the
/// buffers when the block was written in order from its start, else read back from the file. On
/// restart each block with an entry that is not already durable is read back and kept only when
/// its digest matches; a block that does not (torn, zero-filled, never written, or its entry
/// missing or torn) is not kept, and neither is any byte of a block that was only partly written
/// (a block's entry exists only once all of it was). After a plain crash (SIGKILL, OOM kill) the
/// page cache kept everything, so a rerun re-fetches at most the partial blocks of the ranges
/// being written and the bytes that were still in memory; after a power loss it falls back,
/// block by block, to the checkpoint.
///
/// The binding is a digest of the download's id and the entity's validator (strong ETag or
/// Last-Modified), so entries of another download, or of an older version of the resource, never
/// match. Kept bytes stay non-durable until the next checkpoint fsyncs them; their entries stay
/// in the journal until then, so another crash checks them again.
///
/// The journal is hostile input like the record: it is opened relative to the checked state
/// directory by a name made from the record's id (never a path read from a file), only when it
/// is a regular file of ours with one link (O_NOFOLLOW; a planted link or FIFO is removed, not
/// followed), read with fixed-size reads at offsets it cannot choose, and it can only make us
/// keep bytes whose checksum it holds. The checksum is not a MAC and need not be: planting
/// entries takes write access to the state directory (0700), and whoever has it can rewrite the
/// record and, as that user, the partial file; the end-to-end SHA-256 (`--sha256`) covers that.
///
/// Layout (little-endian): a 64-byte header (`RCHJRNL1`, version 1, log2 of the block size, the
/// 32-byte binding (SHA-256), zero padding), then entry `i`, a UInt64, at `64 + 8 i`; zero is no
/// entry (a checksum that is zero is not written: that block is re-fetched after a crash).
///
/// Not thread-safe: `PartialFile` uses it only on its write queue.
final class BlockJournal {
    static let headerSize = 64
    static let entrySize = 8
    static let magic = Array("RCHJRNL1".utf8)
    static let version: UInt32 = 1
    /// 256 KiB: a crash costs at most one partial block, and a GiB needs 32 KiB of entries.
    static let defaultBlockShift = 18

    /// The journal's file name in the state directory (beside `ID.json`).
    static func fileName(for id: UUID) -> String { id.uuidString + ".journal" }

    let blockSize: Int64
    private let blockShift: Int
    private let name: String
    private let directory: CheckedDirectory
    private var file: FileDescriptor?
    private var binding: [UInt8] { didSet { seed = Self.seed(binding) } }
    /// The binding entries are written under now.
    var currentBinding: [UInt8] { binding }
    private var seed: UInt64
    /// Blocks being checksummed in order from their first byte, by index: the data offset fed so
    /// far and the running checksum (one per range being written).
    private var running: [Int64: (fed: Int64, checksum: BlockChecksum)] = [:]

    /// Opens (or creates) the journal for `record` in `directory`; nil when it cannot be opened
    /// safely, in which case the download runs with checkpoints only.
    init?(record: ResumeRecord, directory: CheckedDirectory, blockShift: Int = BlockJournal.defaultBlockShift) {
        self.blockShift = blockShift
        blockSize = 1 << Int64(blockShift)
        name = Self.fileName(for: record.id)
        self.directory = directory
        binding = Self.binding(for: record)
        seed = Self.seed(binding)
        let opened: CheckedDirectory.OpenedFile
        do {
            opened = try directory.openOwnedFile(name, creating: .openOrCreate, mode: 0o600)
        } catch {
            // A planted link, FIFO, foreign or hard-linked file: remove the name (never what it
            // points to) and start a fresh journal once.
            guard (try? directory.remove(name)) != nil,
                  let fresh = try? directory.openOwnedFile(name, creating: .exclusive, mode: 0o600) else { return nil }
            opened = fresh
        }
        file = opened.descriptor
    }

    deinit { file?.close() }

    /// `SHA-256("reachability block journal v1" ‖ id ‖ 0 ‖ validator)`.
    static func binding(for record: ResumeRecord) -> [UInt8] {
        let digest = SHA256()
        digest.update(Array("reachability block journal v1".utf8))
        digest.update(Array(record.id.uuidString.utf8))
        digest.update([0])
        digest.update(Array((record.validator ?? "").utf8))
        return digest.finalizeBytes()
    }

    /// The binding's first 8 bytes, which seed every block's checksum.
    static func seed(_ binding: [UInt8]) -> UInt64 {
        binding.prefix(8).reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The checksum for block `index`: XXH64 seeded with the binding and the index.
    static func checksum(seed: UInt64, index: Int64, _ bytes: UnsafeRawBufferPointer) -> UInt64 {
        BlockChecksum.hash(bytes, seed: seed &+ UInt64(index))
    }

    // MARK: restart

    /// What of the partial file can be trusted: the `durable` bytes, plus every block whose
    /// digest matches its entry. Entries of blocks that do not match are cleared, and a journal
    /// for another download or entity is emptied. Reads only blocks that are not durable.
    func recover(record: ResumeRecord, durable: RangeSet<Int64>, data: FileDescriptor, dataSize: Int64) -> RangeSet<Int64> {
        var kept = durable
        kept.formIntersection(RangeSet(0..<max(0, dataSize)))
        binding = Self.binding(for: record)
        running = [:]
        guard let file else { return kept }
        guard Self.headerMatches(file, binding: binding, blockShift: blockShift) else {
            reset()
            return kept
        }
        return Self.kept(journal: file, data: data, dataSize: dataSize, durable: kept, seed: seed, blockShift: blockShift) { index in
            _ = writeEntry(index, 0)
        }
    }

    /// How many bytes `recover` would keep for `record`, changing nothing (no file is created,
    /// cut or emptied): what a restored download's partial file holds that can be trusted, to
    /// report before its transfer opens it. Reads the blocks outside the durable bytes that have
    /// entries.
    static func recoverableBytes(record: ResumeRecord, stateDirectory: CheckedDirectory,
                                 blockShift: Int = BlockJournal.defaultBlockShift) -> Int64 {
        guard let folder = try? CheckedDirectory.open(record.destination.deletingLastPathComponent().path, policy: .shared),
              let partial = try? folder.openOwnedFile(record.partialName, creating: .existing, writable: false) else { return 0 }
        defer { partial.descriptor.close() }
        let dataSize = partial.status.size
        var durable = record.durable
        durable.formIntersection(RangeSet(0..<max(0, dataSize)))
        guard let opened = try? stateDirectory.openOwnedFile(fileName(for: record.id), creating: .existing, writable: false) else {
            return count(durable)
        }
        defer { opened.descriptor.close() }
        let binding = binding(for: record)
        guard headerMatches(opened.descriptor, binding: binding, blockShift: blockShift) else { return count(durable) }
        return count(kept(journal: opened.descriptor, data: partial.descriptor, dataSize: dataSize, durable: durable,
                          seed: seed(binding), blockShift: blockShift) { _ in })
    }

    private static func count(_ set: RangeSet<Int64>) -> Int64 {
        set.ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) }
    }

    /// `durable` plus every whole block of `data` that matches its journal entry; `mismatch` is
    /// told each block whose entry does not match.
    private static func kept(journal: FileDescriptor, data: FileDescriptor, dataSize: Int64, durable: RangeSet<Int64>,
                             seed: UInt64, blockShift: Int, mismatch: (Int64) -> Void) -> RangeSet<Int64> {
        var kept = durable
        let blockSize = Int64(1) << Int64(blockShift)
        let journalSize = (try? journal.status().size) ?? 0
        let entries = Int(min(max(0, (journalSize - Int64(headerSize)) / Int64(entrySize)), dataSize >> Int64(blockShift)))
        guard entries > 0 else { return kept }
        var table = [UInt64](repeating: 0, count: entries)
        let count = table.withUnsafeMutableBytes { (try? journal.readFully(into: $0, at: Int64(headerSize))) ?? 0 }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(blockSize), alignment: 16)
        defer { buffer.deallocate() }
        for index in 0..<min(entries, count / entrySize) {
            let entry = UInt64(littleEndian: table[index])
            guard entry != 0 else { continue }
            let start = Int64(index) << Int64(blockShift)
            let block = start..<start + blockSize
            guard !kept.isSuperset(of: RangeSet(block)) else { continue }
            if let read = try? data.readFully(into: buffer, at: start), read == Int(blockSize),
               checksum(seed: seed, index: Int64(index), UnsafeRawBufferPointer(buffer)) == entry {
                kept.insert(contentsOf: block)
            } else {
                mismatch(Int64(index))
            }
        }
        return kept
    }

    private static func headerMatches(_ file: FileDescriptor, binding: [UInt8], blockShift: Int) -> Bool {
        var header = [UInt8](repeating: 0, count: headerSize)
        let count = header.withUnsafeMutableBytes { (try? file.readFully(into: $0, at: 0)) ?? 0 }
        return count == headerSize && header == Self.header(binding: binding, blockShift: blockShift)
    }

    static func header(binding: [UInt8], blockShift: Int) -> [UInt8] {
        var header = magic
        withUnsafeBytes(of: version.littleEndian) { header += $0 }
        withUnsafeBytes(of: UInt32(blockShift).littleEndian) { header += $0 }
        header += binding
        header += [UInt8](repeating: 0, count: headerSize - header.count)
        return header
    }

    // MARK: writing

    /// Records bytes that reached the partial file at `offset`. `written` is every byte written
    /// so far, these included: a block gets its entry once all of it was written, from the
    /// running checksum when it was written in order from its start, else read back from `data`.
    func written(_ bytes: UnsafeRawBufferPointer, at offset: Int64, written: RangeSet<Int64>, data: FileDescriptor) {
        guard file != nil, !bytes.isEmpty else { return }
        var position = offset
        var rest = bytes
        while !rest.isEmpty {
            let index = position >> Int64(blockShift)
            let blockStart = index << Int64(blockShift)
            let blockEnd = blockStart + blockSize
            let take = Int(min(Int64(rest.count), blockEnd - position))
            let part = UnsafeRawBufferPointer(rebasing: rest[..<take])
            if var current = running[index], current.fed == position {
                current.checksum.update(part)
                current.fed += Int64(take)
                running[index] = current
            } else if position == blockStart {
                var checksum = BlockChecksum(seed: seed &+ UInt64(index))
                checksum.update(part)
                running[index] = (blockStart + Int64(take), checksum)
            } else {
                // Not in order from the block's start: read back once the block is whole.
                running[index] = nil
            }
            if let current = running[index], current.fed == blockEnd {
                running[index] = nil
                guard writeEntry(index, current.checksum.finalize()) else { return disable() }
            } else if written.isSuperset(of: RangeSet(blockStart..<blockEnd)) {
                running[index] = nil
                guard entryFromDisk(index, data: data) else { return disable() }
            }
            position += Int64(take)
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
        }
    }

    /// The entity changed or the file restarted from zero: a fresh journal under `record`'s binding.
    func restart(record: ResumeRecord) {
        binding = Self.binding(for: record)
        reset()
        running = [:]
    }

    /// The validators changed without a restart (the first response of a download): entries
    /// written so far were bound to the old ones, so they go (blocks in progress are read back
    /// once whole).
    func rebind(record: ResumeRecord) {
        let fresh = Self.binding(for: record)
        guard fresh != binding else { return }
        binding = fresh
        reset()
        running = [:]
    }

    /// Deletes the journal (the download completed or was discarded).
    func remove() {
        file?.close()
        file = nil
        try? directory.remove(name)
    }

    /// Closes the journal, keeping it for the next run.
    func close() {
        file?.close()
        file = nil
    }

    /// Reads block `index` back and writes its entry.
    private func entryFromDisk(_ index: Int64, data: FileDescriptor) -> Bool {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(blockSize), alignment: 16)
        defer { buffer.deallocate() }
        guard let count = try? data.readFully(into: buffer, at: index << Int64(blockShift)), count == Int(blockSize) else {
            return false
        }
        return writeEntry(index, Self.checksum(seed: seed, index: index, UnsafeRawBufferPointer(buffer)))
    }

    private func writeEntry(_ index: Int64, _ entry: UInt64) -> Bool {
        guard let file else { return false }
        let offset = Int64(Self.headerSize) + index * Int64(Self.entrySize)
        return withUnsafeBytes(of: entry.littleEndian) { file.writeAll($0, at: offset).error == nil }
    }

    /// Rewrites the journal as a header alone.
    private func reset() {
        guard let file else { return }
        let header = Self.header(binding: binding, blockShift: blockShift)
        do {
            try file.truncate(to: 0)
            if header.withUnsafeBytes({ file.writeAll($0, at: 0).error }) != nil { disable() }
        } catch {
            disable()
        }
    }

    /// Stops journaling after a failed write: the download falls back to its checkpoints. The
    /// file is cut to nothing first, so no entry written before the failure outlives it.
    private func disable() {
        guard let file else { return }
        try? file.truncate(to: 0)
        file.close()
        self.file = nil
        running = [:]
    }
}
