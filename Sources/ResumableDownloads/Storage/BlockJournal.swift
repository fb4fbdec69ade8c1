import FoundationEssentials
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
/// buffers when the block was written in order from its start, else read back from the file.
/// A block being written in order from its start also gets an entry after every write that
/// leaves it partial: the checksum of its prefix so far and that prefix's length (a connection
/// hands its bytes over by bytes and by time, `SegmentJournalRule`, so each connection's progress
/// is journaled within 32-128 KiB and 50 ms). On restart each entry whose bytes are not already
/// durable is read back (the block, or the prefix it names) and kept only when its digest
/// matches; one that does not (torn, zero-filled, never written, or its entry missing or torn)
/// is not kept. An entry is written after the data it covers; a power loss that kept the entry
/// and not the data fails the digest, so no entry ever makes us keep a byte that is not on disk.
/// A block written out of order from elsewhere than its start gets no entry until it is whole.
/// After a plain crash (SIGKILL, OOM kill) the page cache kept everything, so a rerun re-fetches
/// only the bytes that were still in memory (gathered, or queued for the writer); after a power
/// loss it falls back, block by block, to the checkpoint.
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
/// Layout (little-endian): a 64-byte header (`RCHJRNL1`, version 2, log2 of the block size, the
/// 32-byte binding (SHA-256), zero padding), then entry `i` at `64 + 16 i`: the checksum
/// (UInt64) of the block's first `length` bytes, `length` (UInt32, 1 to the block size) and
/// four zero bytes; a zero checksum is no entry (a checksum that is zero is not written: those
/// bytes are re-fetched after a crash). Version 1 (an older build's: a UInt64 per whole block at
/// `64 + 8 i`) is read on restart and rewritten as version 2.
///
/// Not thread-safe: `PartialFile` uses it only on its write queue.
final class BlockJournal {
    static let headerSize = 64
    static let entrySize = 16
    static let magic = Array("RCHJRNL1".utf8)
    static let version: UInt32 = 2
    /// An older build's layout: one UInt64 per whole block.
    static let versionWholeBlocks: UInt32 = 1
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

    /// One entry: the checksum of a block's first `length` bytes.
    struct Entry: Sendable, Hashable {
        var checksum: UInt64
        var length: Int64
    }

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
        if Self.headerMatches(file, binding: binding, blockShift: blockShift, version: Self.version) {
            return Self.kept(journal: file, version: Self.version, data: data, dataSize: dataSize, durable: kept, seed: seed,
                             blockShift: blockShift, matched: { _, _ in }, mismatch: { index in _ = writeEntry(index, Entry(checksum: 0, length: 0)) })
        }
        guard Self.headerMatches(file, binding: binding, blockShift: blockShift, version: Self.versionWholeBlocks) else {
            reset()
            return kept
        }
        // An older build's journal: keep what it vouches for, then rewrite it in this layout.
        var entries: [(Int64, Entry)] = []
        let result = Self.kept(journal: file, version: Self.versionWholeBlocks, data: data, dataSize: dataSize, durable: kept,
                               seed: seed, blockShift: blockShift, matched: { entries.append(($0, $1)) }, mismatch: { _ in })
        reset()
        for (index, entry) in entries where self.file != nil { _ = writeEntry(index, entry) }
        return result
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
        guard let version = [Self.version, Self.versionWholeBlocks].first(where: {
            headerMatches(opened.descriptor, binding: binding, blockShift: blockShift, version: $0)
        }) else { return count(durable) }
        return count(kept(journal: opened.descriptor, version: version, data: partial.descriptor, dataSize: dataSize,
                          durable: durable, seed: seed(binding), blockShift: blockShift, matched: { _, _ in }, mismatch: { _ in }))
    }

    private static func count(_ set: RangeSet<Int64>) -> Int64 {
        set.ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) }
    }

    /// `durable` plus the bytes of every entry (a whole block, or a block's prefix) that match it
    /// in `data`; `matched` is told each entry kept, `mismatch` each block whose entry does not
    /// match.
    private static func kept(journal: FileDescriptor, version: UInt32, data: FileDescriptor, dataSize: Int64,
                             durable: RangeSet<Int64>, seed: UInt64, blockShift: Int,
                             matched: (Int64, Entry) -> Void, mismatch: (Int64) -> Void) -> RangeSet<Int64> {
        var kept = durable
        let blockSize = Int64(1) << Int64(blockShift)
        let size = version == Self.version ? entrySize : 8
        let journalSize = (try? journal.status().size) ?? 0
        // Whole blocks in an older journal; a last partial block too in this layout.
        let blocks = version == Self.version ? (max(0, dataSize) + blockSize - 1) >> Int64(blockShift) : max(0, dataSize) >> Int64(blockShift)
        let entries = Int(min(max(0, (journalSize - Int64(headerSize)) / Int64(size)), blocks))
        guard entries > 0 else { return kept }
        var table = [UInt8](repeating: 0, count: entries * size)
        let count = table.withUnsafeMutableBytes { (try? journal.readFully(into: $0, at: Int64(headerSize))) ?? 0 }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(blockSize), alignment: 16)
        defer { buffer.deallocate() }
        for index in 0..<min(entries, count / size) {
            let entry = table.withUnsafeBytes { raw -> Entry in
                let checksum = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: index * size, as: UInt64.self))
                guard size == entrySize else { return Entry(checksum: checksum, length: blockSize) }
                let length = UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: index * size + 8, as: UInt32.self))
                return Entry(checksum: checksum, length: Int64(length))
            }
            guard entry.checksum != 0 else { continue }
            let start = Int64(index) << Int64(blockShift)
            guard entry.length > 0, entry.length <= blockSize, start + entry.length <= dataSize else {
                mismatch(Int64(index))
                continue
            }
            let covered = start..<start + entry.length
            guard !kept.isSuperset(of: RangeSet(covered)) else { continue }
            let bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[..<Int(entry.length)])
            if let read = try? data.readFully(into: bytes, at: start), read == Int(entry.length),
               checksum(seed: seed, index: Int64(index), UnsafeRawBufferPointer(bytes)) == entry.checksum {
                kept.insert(contentsOf: covered)
                matched(Int64(index), entry)
            } else {
                mismatch(Int64(index))
            }
        }
        return kept
    }

    private static func headerMatches(_ file: FileDescriptor, binding: [UInt8], blockShift: Int, version: UInt32) -> Bool {
        var header = [UInt8](repeating: 0, count: headerSize)
        let count = header.withUnsafeMutableBytes { (try? file.readFully(into: $0, at: 0)) ?? 0 }
        return count == headerSize && header == Self.header(binding: binding, blockShift: blockShift, version: version)
    }

    static func header(binding: [UInt8], blockShift: Int, version: UInt32 = BlockJournal.version) -> [UInt8] {
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
    /// running checksum when it was written in order from its start, else read back from `data`;
    /// a block written in order from its start (a resumed range's first block: its stored prefix
    /// read back once) gets an entry for its prefix after each write that leaves it partial.
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
            } else if running[index] == nil, written.isSuperset(of: RangeSet(blockStart..<position)),
                      var checksum = prefixChecksum(index, upTo: position, data: data) {
                // A range continuing a stored prefix (a resume): that prefix is read back once.
                checksum.update(part)
                running[index] = (position + Int64(take), checksum)
            } else {
                // Not in order from the block's start: read back once the block is whole.
                running[index] = nil
            }
            if let current = running[index], current.fed == blockEnd {
                running[index] = nil
                guard writeEntry(index, Entry(checksum: current.checksum.finalize(), length: blockSize)) else { return disable() }
            } else if written.isSuperset(of: RangeSet(blockStart..<blockEnd)) {
                running[index] = nil
                guard entryFromDisk(index, data: data) else { return disable() }
            } else if let current = running[index] {
                guard writeEntry(index, Entry(checksum: current.checksum.finalize(), length: current.fed - blockStart)) else {
                    return disable()
                }
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
        return writeEntry(index, Entry(checksum: Self.checksum(seed: seed, index: index, UnsafeRawBufferPointer(buffer)),
                                       length: blockSize))
    }

    /// The running checksum of block `index`'s bytes before `end`, read back; nil when they
    /// cannot be read (the block then waits until it is whole).
    private func prefixChecksum(_ index: Int64, upTo end: Int64, data: FileDescriptor) -> BlockChecksum? {
        let start = index << Int64(blockShift)
        let length = Int(end - start)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: length, alignment: 16)
        defer { buffer.deallocate() }
        guard let count = try? data.readFully(into: buffer, at: start), count == length else { return nil }
        var checksum = BlockChecksum(seed: seed &+ UInt64(index))
        checksum.update(UnsafeRawBufferPointer(buffer))
        return checksum
    }

    /// Writes entry `index` in one 16-byte write (a zero checksum clears it).
    private func writeEntry(_ index: Int64, _ entry: Entry) -> Bool {
        guard let file else { return false }
        let offset = Int64(Self.headerSize) + index * Int64(Self.entrySize)
        // The length is a UInt32 followed by four zero bytes: as a UInt64, little-endian.
        let bytes = (entry.checksum.littleEndian, UInt64(UInt32(truncatingIfNeeded: entry.length)).littleEndian)
        return withUnsafeBytes(of: bytes) { file.writeAll($0, at: offset).error == nil }
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
