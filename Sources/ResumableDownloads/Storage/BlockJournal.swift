import FoundationEssentials
import Glibc
import LinuxSystem

/// A per-block checksum journal beside a download's resume record: what lets a restart after a
/// crash keep the bytes written since the last checkpoint, without trusting anything a power
/// loss could have lost.
///
/// The resume record's `verifiedOffset` stays the durable bound: its bytes were fsynced before
/// the record was written. Everything past it is in the page cache, on the disk, or lost, and
/// only the journal tells which: for every full block written, the journal gets a 64-bit
/// checksum of the block (XXH64, seeded with the binding and the block's index), not fsynced. On restart each block past the
/// verified offset is read back and kept only while its digest matches; the first block that
/// does not (torn, zero-filled, never written, or its entry missing or torn) ends what is kept.
/// After a plain crash (SIGKILL, OOM kill) the page cache kept everything, so a rerun re-fetches
/// at most the last partial block and the bytes that were still in memory; after a power loss it
/// falls back, block by block, to the checkpoint.
///
/// The binding is a digest of the download's id and the entity's validator (strong ETag or
/// Last-Modified), so entries of another download, or of an older version of the resource, never
/// match. Kept bytes stay past `verifiedOffset` until the next checkpoint fsyncs them; their
/// entries stay in the journal until then, so another crash checks them again.
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
/// 32-byte binding (SHA-256), zero padding), then entry `i`, a UInt64, at `64 + 8 i`.
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
    /// The block being checksummed and the data offset fed into it so far.
    private var block: (index: Int64, checksum: BlockChecksum)?
    private var fedEnd: Int64 = 0

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

    /// How far the partial file can be trusted: `verifiedOffset`, extended block by block while
    /// each block's digest matches its entry. Entries past the kept end are cut, and a journal
    /// for another download or entity is emptied. Reads at most the unverified part of the file.
    func recover(record: ResumeRecord, data: FileDescriptor, dataSize: Int64) -> Int64 {
        let verified = min(record.verifiedOffset, dataSize)
        binding = Self.binding(for: record)
        guard let file else { return verified }
        guard Self.headerMatches(file, binding: binding, blockShift: blockShift) else {
            reset()
            return verified
        }
        let kept = Self.keptEnd(journal: file, data: data, dataSize: dataSize, from: verified, seed: seed, blockShift: blockShift)
        truncateEntries(from: kept >> Int64(blockShift))
        fedEnd = kept
        block = nil
        return kept
    }

    /// What `recover` would keep for `record`, changing nothing (no file is created, cut or
    /// emptied): how far a restored download's partial file can be trusted, to report before
    /// its transfer opens it. Reads the blocks past the checkpoint that have entries.
    static func recoverableEnd(record: ResumeRecord, stateDirectory: CheckedDirectory,
                               blockShift: Int = BlockJournal.defaultBlockShift) -> Int64 {
        guard let folder = try? CheckedDirectory.open(record.destination.deletingLastPathComponent().path, policy: .shared),
              let partial = try? folder.openOwnedFile(record.partialName, creating: .existing, writable: false) else { return 0 }
        defer { partial.descriptor.close() }
        let dataSize = partial.status.size
        let verified = min(record.verifiedOffset, dataSize)
        guard let opened = try? stateDirectory.openOwnedFile(fileName(for: record.id), creating: .existing, writable: false) else {
            return verified
        }
        defer { opened.descriptor.close() }
        let binding = binding(for: record)
        guard headerMatches(opened.descriptor, binding: binding, blockShift: blockShift) else { return verified }
        return keptEnd(journal: opened.descriptor, data: partial.descriptor, dataSize: dataSize, from: verified,
                       seed: seed(binding), blockShift: blockShift)
    }

    /// `from`, extended block by block while each block of `data` matches its journal entry.
    private static func keptEnd(journal: FileDescriptor, data: FileDescriptor, dataSize: Int64, from verified: Int64,
                                seed: UInt64, blockShift: Int) -> Int64 {
        let blockSize = Int64(1) << Int64(blockShift)
        let journalSize = (try? journal.status().size) ?? 0
        let entries = max(0, (journalSize - Int64(headerSize)) / Int64(entrySize))
        var kept = verified
        var index = verified >> Int64(blockShift)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(blockSize), alignment: 16)
        defer { buffer.deallocate() }
        while index < entries, (index + 1) << Int64(blockShift) <= dataSize {
            let start = index << Int64(blockShift)
            guard let count = try? data.readFully(into: buffer, at: start), count == Int(blockSize),
                  let entry = readEntry(index, from: journal),
                  checksum(seed: seed, index: index, UnsafeRawBufferPointer(buffer)) == entry else { break }
            kept = max(kept, start + blockSize)
            index += 1
        }
        return kept
    }

    private static func headerMatches(_ file: FileDescriptor, binding: [UInt8], blockShift: Int) -> Bool {
        var header = [UInt8](repeating: 0, count: headerSize)
        let count = header.withUnsafeMutableBytes { (try? file.readFully(into: $0, at: 0)) ?? 0 }
        return count == headerSize && header == Self.header(binding: binding, blockShift: blockShift)
    }

    private static func readEntry(_ index: Int64, from file: FileDescriptor) -> UInt64? {
        let offset = Int64(Self.headerSize) + index * Int64(Self.entrySize)
        var entry: UInt64 = 0
        let count = withUnsafeMutableBytes(of: &entry) { (try? file.readFully(into: $0, at: offset)) ?? 0 }
        return count == Self.entrySize ? UInt64(littleEndian: entry) : nil
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

    /// Records bytes that reached the partial file at `offset`. Called in file order; a gap is
    /// read back from `data`, and a rewrite below what was fed restarts from its block.
    func written(_ bytes: UnsafeRawBufferPointer, at offset: Int64, data: FileDescriptor) {
        guard file != nil, !bytes.isEmpty else { return }
        if offset != fedEnd || block == nil {
            guard seek(to: offset, data: data) else { return disable() }
        }
        var rest = bytes
        while !rest.isEmpty, var (index, checksum) = block {
            let blockEnd = (index + 1) << Int64(blockShift)
            let take = Int(min(Int64(rest.count), blockEnd - fedEnd))
            checksum.update(UnsafeRawBufferPointer(rebasing: rest[..<take]))
            fedEnd += Int64(take)
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
            if fedEnd == blockEnd {
                guard writeEntry(index, checksum.finalize()) else { return disable() }
                index += 1
                checksum = BlockChecksum(seed: seed &+ UInt64(index))
            }
            block = (index, checksum)
        }
    }

    /// The entity changed or the file restarted from zero: a fresh journal under `record`'s
    /// binding, fed from `offset` (zero after a truncation).
    func restart(record: ResumeRecord, at offset: Int64 = 0) {
        binding = Self.binding(for: record)
        reset()
        fedEnd = offset
        block = nil
    }

    /// The validators changed without a restart (the first response of a download): entries
    /// written so far were bound to the old ones and are rewritten under the new binding.
    func rebind(record: ResumeRecord, data: FileDescriptor) {
        let fresh = Self.binding(for: record)
        guard fresh != binding else { return }
        let end = fedEnd
        binding = fresh
        reset()
        fedEnd = 0
        block = nil
        if end > 0, !seek(to: end, data: data) { disable() }
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

    /// Positions the running block digest at `offset`: entries from its block on are cut, and
    /// the block's bytes before `offset` are read back from the data file.
    private func seek(to offset: Int64, data: FileDescriptor) -> Bool {
        let index = offset >> Int64(blockShift)
        let start = index << Int64(blockShift)
        truncateEntries(from: index)
        var checksum = BlockChecksum(seed: seed &+ UInt64(index))
        if offset > start {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(offset - start), alignment: 16)
            defer { buffer.deallocate() }
            guard let count = try? data.readFully(into: buffer, at: start), count == buffer.count else { return false }
            checksum.update(UnsafeRawBufferPointer(buffer))
        }
        block = (index, checksum)
        fedEnd = offset
        return true
    }

    private func writeEntry(_ index: Int64, _ entry: UInt64) -> Bool {
        guard let file else { return false }
        let offset = Int64(Self.headerSize) + index * Int64(Self.entrySize)
        return withUnsafeBytes(of: entry.littleEndian) { file.writeAll($0, at: offset).error == nil }
    }

    /// Cuts entries from `index` on, writing the header when the journal is new or empty.
    private func truncateEntries(from index: Int64) {
        guard let file else { return }
        let size = (try? file.status().size) ?? 0
        let end = Int64(Self.headerSize) + index * Int64(Self.entrySize)
        if size < Int64(Self.headerSize) {
            reset()
        } else if size > end {
            if (try? file.truncate(to: end)) == nil { disable() }
        }
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
        block = nil
    }
}
