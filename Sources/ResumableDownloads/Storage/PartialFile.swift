import Dispatch
import FoundationEssentials
import Glibc
import LinuxSystem
import Synchronization
import ReachabilityBase

/// The `NAME.part` data file and its resume record, with a bounded write-behind buffer.
///
/// libcurl's write callback (engine thread) copies each chunk in and returns at once; a serial
/// queue writes chunks with `pwrite` in order. When more than `highWater` bytes wait, the
/// callback pauses the transfer (`CURL_WRITEFUNC_PAUSE`); the queue asks for an unpause once the
/// backlog falls to `lowWater`. Memory per download is therefore bounded by `highWater` plus one
/// receive buffer, whatever the file size or disk speed, and a slow disk stalls only its own
/// transfer, not the engine thread shared by all downloads.
///
/// Every file operation runs on `queue`, so writes, truncation, checkpoints and completion are
/// ordered without holding the lock during I/O.
///
/// Nothing is reached by path: the partial file is opened relative to its destination's
/// directory (walked with `O_NOFOLLOW`), created with `O_EXCL`, kept only when it is a regular
/// file of ours with one link, and locked (`flock`) for as long as it is open, so one process
/// writes a destination at a time. The record lives in the checked state directory, and the
/// finished file is renamed into place without replacing anything that appeared meanwhile.
//
// Longer than 400 lines on purpose: one file's life (open and trust checks, the write queue and
// its backpressure, checkpoints, completion) under one lock whose state stays private here; the
// journal, checksums and write-back window are their own types.
final class PartialFile: Sendable {
    struct Limits: Sendable {
        var highWater: Int
        var lowWater: Int
        /// Checkpoint (fsync + record) after this many new bytes ...
        var checkpointInterval: Int64
        /// ... and no sooner than this after the last one: a fast download is not stopped for an
        /// fsync every `checkpointInterval` (16 MiB was 16 fdatasyncs and record writes for a
        /// 256 MiB file fetched in a second, each holding up the write queue and so the
        /// transfer). The block journal keeps what a kill leaves meanwhile; a power loss
        /// fetches at most this span's bytes again. Zero: by bytes only.
        var checkpointSpacing: Duration = .zero
        /// Start write-back every this many bytes (see `WriteBackWindow`); zero leaves
        /// write-back to the kernel.
        var writeBackWindow: Int64 = 4 << 20
        /// Windows in flight before the oldest is waited for: dirty pages stay below about
        /// `(writeBackDepth + 1) * writeBackWindow`.
        var writeBackDepth = 3
        /// Test hook simulating a slow disk: the writer waits this long before each chunk.
        var simulatedWriteDelay: Duration? = nil
        /// Test hook: runs right after the verified file is renamed into place, before its
        /// record is removed (a crash test kills the process there).
        var afterRename: (@Sendable () -> Void)? = nil
    }

    /// Observed buffer behaviour, for tests and diagnostics.
    struct Statistics: Sendable, Hashable {
        /// Largest number of copied-but-unwritten bytes at any time.
        var peakPendingBytes = 0
        /// How often the write callback paused the transfer.
        var backpressurePauses = 0
        /// Periodic checkpoints taken on the write queue (`checkpointInterval`, `checkpointSpacing`).
        var periodicCheckpoints = 0
    }

    private struct State {
        var record: ResumeRecord
        /// Bytes copied in but not yet written.
        var pendingBytes = 0
        var isPausedForBackpressure = false
        /// Bytes written to the file (not necessarily synced): one prefix for a download fetched
        /// over one connection, ranges for one fetched in segments.
        var written: RangeSet<Int64>
        var bytesSinceCheckpoint: Int64 = 0
        /// When the last checkpoint (or the file's opening) was.
        var lastCheckpoint = ContinuousClock.now
        var writeError: DownloadError?
        var onDrained: (@Sendable () -> Void)?
        /// Told when a 200 answer to a ranged request throws the stored bytes away.
        var onRestartFromZero: (@Sendable (String) -> Void)?
        var isClosed = false
        var statistics = Statistics()
        /// Write-back pacing (applied on the write queue); nil once the file system refused it.
        var writeBack: WriteBackWindow?
        /// How many times `highWater` may wait (`setWriters`).
        var writers = 1
    }

    /// The partial file's path, for messages.
    let path: String
    /// The record's path, for messages.
    let recordPath: String
    private let file: FileDescriptor
    /// The partial file as opened (to recognise it before removing or after renaming).
    private let fileStatus: FileStatus
    private let destinationDirectory: CheckedDirectory
    private let stateDirectory: CheckedDirectory
    private let partialName: String
    private let recordName: String
    private let limits: Limits
    private let queue: DispatchQueue
    private let state: Mutex<State>
    /// The running SHA-256 (when one is expected), touched only on `queue`: hashing happens while
    /// the data is hot instead of reading the whole file back at the end. A separate lock from
    /// `state`, so hashing never blocks the engine thread.
    private let hashing: Mutex<SHA256?>
    /// The per-block checksum journal (see `BlockJournal`), used only on `queue`; nil when it
    /// could not be opened safely (then only checkpoints survive a crash).
    private let journal: Mutex<BlockJournal?>

    /// Opens (creating if needed) the partial file and keeps what can be trusted: the record's
    /// durable bytes and the blocks the journal vouches for; everything else may be garbage after
    /// a crash and counts as not written (the file is cut after the last byte kept). The record is
    /// written to `stateDirectory`.
    init(record: ResumeRecord, stateDirectory: CheckedDirectory, limits: Limits) throws {
        path = record.partialPath
        partialName = record.partialName
        recordName = ResumeRecord.fileName(for: record.id)
        recordPath = stateDirectory.child(recordName)
        self.stateDirectory = stateDirectory
        self.limits = limits
        let folder = record.destination.deletingLastPathComponent().path
        let opened: CheckedDirectory.OpenedFile
        do {
            destinationDirectory = try CheckedDirectory.open(folder, policy: .shared)
            opened = try destinationDirectory.openOwnedFile(partialName, creating: .openOrCreate, mode: 0o666)
        } catch {
            throw DownloadError.file(error)
        }
        file = opened.descriptor
        fileStatus = opened.status
        var record = record
        var blockJournal: BlockJournal?
        var kept = RangeSet<Int64>()
        var durable = RangeSet<Int64>()
        do {
            // One writer per destination, whatever state directory the other one uses.
            guard try file.tryLockExclusive() else {
                throw DownloadError.destinationInUse.with(description: "another process is writing \(path)")
            }
            let size = try file.status().size
            // Lost data (the file is shorter than the record says): trust the file.
            durable = record.durable
            durable.formIntersection(RangeSet(0..<size))
            record.state.setDurable(durable)
            // Past the checkpoint, keep what the journal vouches for, block by block: after a
            // crash that is nearly everything written, after a power loss what survived.
            blockJournal = BlockJournal(record: record, directory: stateDirectory)
            kept = blockJournal?.recover(record: record, durable: durable, data: file, dataSize: size) ?? durable
            try file.truncate(to: kept.ranges.last?.upperBound ?? 0)
        } catch let error as Errno {
            file.close()
            throw DownloadError.fileSystem("open", path: path, errno: error.rawValue)
        } catch {
            file.close()
            throw error
        }
        if record.expectedSHA256 != nil {
            do { try SHA256.checkAvailable() } catch { file.close(); throw error }
        }
        queue = DispatchQueue(label: "ResumableDownloads.PartialFile")
        hashing = Mutex(record.expectedSHA256 == nil ? nil : SHA256())
        journal = Mutex(blockJournal)
        // The kept bytes are not durable yet: the record stays, and the next checkpoint fsyncs
        // them (their journal entries vouch for them until then).
        var initial = State(record: record, written: kept)
        initial.bytesSinceCheckpoint = Self.count(kept) - Self.count(durable)
        if limits.writeBackWindow > 0 {
            initial.writeBack = WriteBackWindow(window: limits.writeBackWindow, depth: limits.writeBackDepth,
                                                from: Self.prefixEnd(kept))
        }
        state = Mutex(initial)
    }

    /// Removes a download's partial file (only when it is a regular file of ours that no other
    /// process holds locked) and record, for a download that has no open `PartialFile`.
    static func removeFiles(of record: ResumeRecord, stateDirectory: CheckedDirectory) {
        if let folder = try? CheckedDirectory.open(record.destination.deletingLastPathComponent().path, policy: .shared),
           let opened = try? folder.openOwnedFile(record.partialName, creating: .existing) {
            if (try? opened.descriptor.tryLockExclusive()) == true {
                try? folder.remove(record.partialName, ifSameAs: opened.status)
            }
            opened.descriptor.close()
        }
        try? stateDirectory.remove(ResumeRecord.fileName(for: record.id))
        try? stateDirectory.remove(BlockJournal.fileName(for: record.id))
        removePieceFile(of: record, in: stateDirectory)
        try? stateDirectory.sync()
    }

    /// The current record (its `verifiedOffset` is the last checkpoint).
    var record: ResumeRecord { state.withLock { $0.record } }

    /// Contiguous bytes written from the start so far.
    var writtenEnd: Int64 { state.withLock { Self.prefixEnd($0.written) } }

    /// Every byte written so far (not necessarily durable).
    var written: RangeSet<Int64> { state.withLock { $0.written } }

    /// How many bytes are written.
    var writtenBytes: Int64 { state.withLock { Self.count($0.written) } }

    /// Whether every byte of `range` reached the file (so it can be read back and compared).
    func isWritten(_ range: Range<Int64>) -> Bool {
        range.isEmpty || state.withLock { $0.written.isSuperset(of: RangeSet(range)) }
    }

    /// The end of the written prefix that starts at zero.
    static func prefixEnd(_ set: RangeSet<Int64>) -> Int64 {
        guard let first = set.ranges.first, first.lowerBound == 0 else { return 0 }
        return first.upperBound
    }

    static func count(_ set: RangeSet<Int64>) -> Int64 {
        set.ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) }
    }

    /// Sets the unverified seams (`SegmentPlanner`). When the set grew, the record is rewritten
    /// (durably) before any byte queued after this call is written, so a crash never leaves
    /// bytes from two responses side by side without the seam between them on record.
    func setSeams(_ seams: Set<Int64>) {
        queue.async { [self] in
            let grew = state.withLock { state -> Bool in
                let old = state.record.seamSet
                state.record.seams = seams.isEmpty ? nil : seams.sorted()
                return !seams.isSubset(of: old)
            }
            guard grew else { return }
            do { try writeRecord() } catch let error as DownloadError { fail(error) } catch {}
        }
    }

    /// Buffer statistics so far.
    var statistics: Statistics { state.withLock { $0.statistics } }

    /// Bytes written since the last checkpoint (not yet made durable by one).
    var unsyncedBytes: Int64 { state.withLock { $0.bytesSinceCheckpoint } }

    /// The first write error, which ends the transfer.
    var writeError: DownloadError? { state.withLock { $0.writeError } }

    /// Edits the record in memory (persisted by the next checkpoint).
    func updateRecord(_ edit: (inout ResumeRecord) -> Void) { state.withLock { edit(&$0.record) } }

    /// How many connections write at once (a segmented download): each hands over gathered
    /// chunks of its own, so the queue may hold more before the transfers are paused: twice the
    /// limit for two or three writers, up to four times for eight or more. Without it, a few
    /// connections at a modest rate filled one connection's queue and paused each other although
    /// the disk kept up.
    func setWriters(_ count: Int) {
        state.withLock { $0.writers = min(4, max(1, count / 2)) }
    }

    /// Sets the closure called (on the write queue) when a paused transfer may continue.
    func setDrainHandler(_ handler: (@Sendable () -> Void)?) {
        state.withLock { $0.onDrained = handler; $0.isPausedForBackpressure = false }
    }

    // MARK: engine thread

    /// Called by the write callback before taking `count` bytes: true means "return PAUSE now";
    /// the drain handler fires once the backlog is small again.
    func shouldPause(adding count: Int) -> Bool {
        state.withLock { state in
            guard state.writeError == nil, state.pendingBytes > 0,
                  state.pendingBytes + count > limits.highWater * state.writers else { return false }
            state.isPausedForBackpressure = true
            state.statistics.backpressurePauses += 1
            return true
        }
    }

    /// Called (on the engine thread) when a response restarts the file from zero.
    func onRestartFromZero(_ observer: @escaping @Sendable (String) -> Void) {
        state.withLock { $0.onRestartFromZero = observer }
    }

    /// Stores the entity's validators; when `restartsFromZero`, truncates the file and rewrites the
    /// record at offset zero before any byte of the new entity is written, so two versions are
    /// never spliced.
    func begin(_ acceptance: ResponseStateMachine.Acceptance) {
        let (restart, observer) = state.withLock { state -> (Bool, (@Sendable (String) -> Void)?) in
            if acceptance.restartsFromZero {
                state.record.resetEntity(entityTag: acceptance.entityTag, lastModified: acceptance.lastModified,
                                         totalLength: acceptance.totalLength)
                state.record.observedEntityTag = acceptance.observedEntityTag
                state.written = RangeSet()
                state.bytesSinceCheckpoint = 0
                state.writeBack?.reset(to: 0)
                return (true, state.onRestartFromZero)
            }
            if acceptance.entityTag != nil { state.record.entityTag = acceptance.entityTag }
            if acceptance.lastModified != nil { state.record.lastModified = acceptance.lastModified }
            if acceptance.totalLength != nil { state.record.totalLength = acceptance.totalLength }
            if acceptance.observedEntityTag != nil { state.record.observedEntityTag = acceptance.observedEntityTag }
            return (false, nil)
        }
        guard restart else {
            // New validators (a download's first response) are persisted at once, so a crash
            // before the first checkpoint can still resume with If-Range, and the journal is
            // re-bound to them before any body byte of this response is written (append queues
            // behind this).
            queue.async { [self] in
                let record = state.withLock { $0.record }
                guard BlockJournal.binding(for: record) != journal.withLock({ $0?.currentBinding }) else { return }
                // An entity of one journal block or less is not worth two fsyncs before its first
                // byte (at 10,000 small files they were a fifth of the agent's): a crash before
                // its completion fetches it again, at most 256 KiB, since the journal bound to
                // validators the record does not have keeps nothing.
                let isSmall = record.totalLength.map { $0 <= Int64(1) << BlockJournal.defaultBlockShift } ?? false
                if !isSmall {
                    do { try writeRecord() } catch let error as DownloadError { fail(error) } catch {}
                }
                journal.withLock { $0?.rebind(record: record) }
            }
            return
        }
        observer?("the server sent the whole resource instead of the range: it changed, or it ignores ranges")
        queue.async { [self] in
            resetHasher()
            do {
                try truncate(to: 0)
                let record = state.withLock { $0.record }
                journal.withLock { $0?.restart(record: record) }
                try writeRecord()
            } catch let error as DownloadError {
                fail(error)
            } catch {}
        }
    }

    /// Whether `bytes` equal what the file holds at `offset` (an overlap across a resume point or
    /// a seam; the caller checks `isWritten` first).
    func matchesDisk(_ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Bool {
        guard !bytes.isEmpty else { return true }
        let stored = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        defer { stored.deallocate() }
        guard let count = try? file.readFully(into: stored, at: offset), count == bytes.count else { return false }
        return memcmp(stored.baseAddress!, bytes.baseAddress!, count) == 0
    }

    /// Copies `bytes` and queues them for writing at `offset`.
    func append(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        append(Data(bytes), at: offset)
    }

    /// Queues `data` for writing at `offset`.
    func append(_ data: Data, at offset: Int64) {
        state.withLock {
            $0.pendingBytes += data.count
            $0.statistics.peakPendingBytes = max($0.statistics.peakPendingBytes, $0.pendingBytes)
        }
        queue.async { [self] in write(data, at: offset) }
    }

    // MARK: write queue

    private func write(_ data: Data, at offset: Int64) {
        if let delay = limits.simulatedWriteDelay { CurrentProcess.sleep(milliseconds: Int(clamping: delay.milliseconds)) }
        let skip = state.withLock { $0.writeError != nil || $0.isClosed }
        var failure: Int32 = 0
        var written = 0
        if !skip {
            let result = data.withUnsafeBytes { file.writeAll($0, at: offset) }
            written = result.written
            failure = result.error?.rawValue ?? 0
        }
        let (drained, needsCheckpoint, writeBack, allWritten) = state.withLock {
            state -> ((@Sendable () -> Void)?, Bool, [WriteBackWindow.Action], RangeSet<Int64>) in
            state.pendingBytes -= data.count
            var writeBack: [WriteBackWindow.Action] = []
            if !skip, written > 0 {
                state.written.insert(contentsOf: offset..<offset + Int64(written))
                state.bytesSinceCheckpoint += Int64(written)
                // Write-back follows the prefix; ranges elsewhere are bounded by the checkpoints.
                writeBack = state.writeBack?.written(upTo: Self.prefixEnd(state.written)) ?? []
            }
            if failure != 0, state.writeError == nil {
                state.writeError = DownloadError.fileSystem("write", path: path, errno: failure)
            }
            var drained: (@Sendable () -> Void)?
            if state.isPausedForBackpressure, state.pendingBytes <= limits.lowWater * state.writers || state.writeError != nil {
                state.isPausedForBackpressure = false
                drained = state.onDrained
            }
            let due = state.writeError == nil && state.bytesSinceCheckpoint >= limits.checkpointInterval
                && ContinuousClock.now - state.lastCheckpoint >= limits.checkpointSpacing
            return (drained, due, writeBack, state.written)
        }
        if !skip, written > 0 {
            // Hashed from the very buffer that reached the file, and only once it did.
            if failure == 0 { hash(data, at: offset, prefixEnd: Self.prefixEnd(allWritten)) }
            journal.withLock { journal in
                guard let journal else { return }
                data.withUnsafeBytes {
                    journal.written(UnsafeRawBufferPointer(rebasing: $0[..<written]), at: offset, written: allWritten, data: file)
                }
            }
        }
        apply(writeBack)
        if needsCheckpoint {
            state.withLock { $0.statistics.periodicCheckpoints += 1 }
            try? checkpointOnQueue()
        }
        drained?()
    }

    /// Starts or waits for write-back. Waiting here holds up the write queue, so a disk slower
    /// than the network pauses the transfer (backpressure) instead of piling up dirty pages.
    /// Errors only switch pacing off: fsync, at checkpoints and completion, reports real ones.
    private func apply(_ actions: [WriteBackWindow.Action]) {
        for action in actions {
            do {
                switch action {
                case .start(let range): try file.startWriteBack(offset: range.lowerBound, count: range.upperBound - range.lowerBound)
                case .wait(let range): try file.waitForWriteBack(offset: range.lowerBound, count: range.upperBound - range.lowerBound)
                }
            } catch {
                state.withLock { $0.writeBack = nil }
                return
            }
        }
    }

    /// Feeds written bytes to the running hash when they continue it. The hash follows the
    /// written prefix: what other ranges wrote before it is read back from the file as the prefix
    /// reaches it (a resumed prefix too), what lies past it waits.
    private func hash(_ data: Data, at offset: Int64, prefixEnd: Int64) {
        hashing.withLock { hasher in
            guard let current = hasher else { return }
            do {
                if current.hashedLength < offset, offset <= prefixEnd {
                    try current.catchUp(file: file, to: offset, path: path)
                }
                if current.hashedLength == offset {
                    data.withUnsafeBytes { current.update($0) }
                } else if offset < current.hashedLength {
                    hasher = nil   // bytes hashed already were written again: completion reads back
                    return
                }
                if current.hashedLength < prefixEnd {
                    // Other ranges' bytes the prefix now reaches, a slice per write so the queue
                    // keeps moving (completion hashes what is left).
                    try current.catchUp(file: file, to: min(prefixEnd, current.hashedLength + Self.hashSlice), path: path)
                }
            } catch {
                hasher = nil
            }
        }
    }

    /// Bytes read back for the hash per write at most.
    static let hashSlice: Int64 = 4 << 20

    private func resetHasher() {
        hashing.withLock { hasher in
            if hasher != nil { hasher = SHA256() }
        }
    }

    private func fail(_ error: DownloadError) {
        let drained = state.withLock { state -> (@Sendable () -> Void)? in
            if state.writeError == nil { state.writeError = error }
            guard state.isPausedForBackpressure else { return nil }
            state.isPausedForBackpressure = false
            return state.onDrained
        }
        drained?()
    }

    /// fsync the data, then atomically replace the record with everything written as durable.
    private func checkpointOnQueue() throws {
        let written = state.withLock { $0.written }
        do {
            try sync()
            state.withLock {
                $0.record.state.setDurable(written)
                $0.record.updatedAt = Date()
                $0.bytesSinceCheckpoint = 0
                $0.lastCheckpoint = .now
            }
            try writeRecord()
        } catch let error as DownloadError {
            fail(error)
            throw error
        }
    }

    private func writeRecord() throws {
        let record = state.withLock { $0.record }
        try record.write(to: stateDirectory)
    }

    /// fdatasync: the data and the size (timestamps need no barrier).
    private func sync() throws {
        do { try file.syncData() } catch { throw DownloadError.fileSystem("fsync", path: path, errno: error.rawValue) }
    }

    private func truncate(to length: Int64) throws {
        do { try file.truncate(to: length) } catch { throw DownloadError.fileSystem("truncate", path: path, errno: error.rawValue) }
    }

    private func size() throws -> Int64 {
        do { return try file.status().size } catch { throw DownloadError.fileSystem("stat", path: path, errno: error.rawValue) }
    }

    private func onQueue<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    // MARK: agent

    /// Waits for queued writes, fsyncs and persists the record. Returns the durable offset.
    @discardableResult
    func checkpoint() async throws -> Int64 {
        try await onQueue { [self] in
            if let error = state.withLock({ $0.writeError }) {
                // Keep what did reach the disk: checkpoint up to the written end, then report.
                try? checkpointOnQueue()
                throw error
            }
            try checkpointOnQueue()
            return state.withLock { $0.record.verifiedOffset }
        }
    }

    /// Waits until every queued write has been applied (no checkpoint).
    func settled() async {
        _ = try? await onQueue { 0 }
    }

    /// Truncates to zero and forgets the entity (the server broke the range rules).
    func restartFromZero() async throws {
        try await onQueue { [self] in
            resetHasher()
            try truncate(to: 0)
            let record = state.withLock {
                $0.record.resetEntity(entityTag: nil, lastModified: nil, totalLength: nil)
                return $0.record
            }
            journal.withLock { $0?.restart(record: record) }
            state.withLock {
                $0.writeBack?.reset(to: 0)
                $0.written = RangeSet()
                $0.bytesSinceCheckpoint = 0
                $0.writeError = nil
            }
            try writeRecord()
        }
    }

    /// Forgets `ranges` (bytes from a mirror that proved wrong, issue 34) after the queued
    /// writes: they count as not written, the record's durable ranges shrink (fsynced first),
    /// and a running hash that covered them is dropped (completion reads the file back).
    func forget(_ ranges: RangeSet<Int64>) async throws {
        guard !ranges.isEmpty else { return }
        try await onQueue { [self] in
            let first = ranges.ranges.first!.lowerBound
            hashing.withLock { hasher in
                if let current = hasher, current.hashedLength > first { hasher = nil }
            }
            state.withLock { $0.written.subtract(ranges) }
            try checkpointOnQueue()
        }
    }

    /// The SHA-256 (hex) of the written bytes in `range`, read back; nil when they cannot be read.
    func sha256(of range: Range<Int64>) -> String? {
        let hash = SHA256()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }
        var offset = range.lowerBound
        while offset < range.upperBound {
            let want = Int(min(Int64(buffer.count), range.upperBound - offset))
            guard let count = try? file.readFully(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset),
                  count == want else { return nil }
            hash.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += Int64(count)
        }
        return hash.finalize()
    }

    /// Clears a write error so a resumed download can try again (space may have been freed).
    func clearWriteError() { state.withLock { $0.writeError = nil } }

    /// Verifies length and SHA-256, then puts the file in place with the next completion group
    /// (`CompletionGroupCommit`: fsync, the record naming the finished file, rename, directory
    /// fsync, record removal). On a verification failure nothing is moved; the caller discards
    /// the data.
    func complete(totalLength: Int64, expectedLength: Int64?) async throws -> URL {
        try await verifyCompletion(totalLength: totalLength, expectedLength: expectedLength)
        return try await commitCompletion()
    }

    /// The first half of `complete`: after the queued writes, every byte of `totalLength` is
    /// written, the file has that length, and its SHA-256 is the expected one. Nothing is synced
    /// or moved; the transfer's slot can go to the next download meanwhile.
    func verifyCompletion(totalLength: Int64, expectedLength: Int64?) async throws {
        try await onQueue { [self] in
            if let error = state.withLock({ $0.writeError }) { throw error }
            let (record, written) = state.withLock { ($0.record, $0.written) }
            let size = try size()
            // Every byte must have been written in this run or kept from a verified one: a hole
            // (never written, or garbage a crash left) is not part of the file, whatever its length.
            if let hole = RangeSet(0..<totalLength).subtracting(written).ranges.first {
                throw DownloadError.lengthMismatch.with(description:
                    "bytes \(hole.lowerBound)-\(hole.upperBound - 1) of the file were never written")
            }
            if size != totalLength || (expectedLength.map { $0 != size } ?? false) {
                throw DownloadError.lengthMismatch.with(description:
                    "file has \(size) bytes, expected \(expectedLength ?? totalLength)")
            }
            if let expected = record.expectedSHA256.flatMap(SHA256.normalizedHexDigest) {
                let actual = try hashing.withLock { hasher -> String in
                    if let hasher, hasher.hashedLength <= size {
                        try hasher.catchUp(file: file, to: size, path: path)
                        if hasher.hashedLength == size { return hasher.finalize() }
                    }
                    return try SHA256.hex(file: file, length: size, path: path)
                }
                if actual != expected {
                    throw DownloadError.checksumMismatch.with(description: "SHA-256 is \(actual), expected \(expected)")
                }
            }
        }
    }

    /// The second half of `complete`, after `verifyCompletion`: waits for the completion group
    /// that makes the file durable and puts it in place; returns where it is.
    func commitCompletion() async throws -> URL {
        try await CompletionGroupCommit.shared.commit(self)
        return record.destination
    }

    // MARK: completion group steps (CompletionGroupCommit, on its thread; the transfer has ended
    // and the queue is idle, so nothing else touches the file meanwhile)

    /// Step 1: starts write-back of the data (not a barrier; the fsyncs of a group then find it
    /// written).
    func startFinishingWriteBack() { try? file.startWriteBack(offset: 0, count: 0) }

    /// Step 2a for a group: the files' fdatasyncs side by side (`SideBySideSync`), not one after
    /// another; per file in order, nil once its data is durable, else why not.
    static func syncFinishedData(of files: [PartialFile]) -> [(any Error)?] {
        SideBySideSync.sync(files.map(\.file)).enumerated().map { index, failure in
            failure.map { DownloadError.fileSystem("fsync", path: files[index].path, errno: $0.rawValue) }
        }
    }

    /// Step 2b, once its data is durable (`syncFinishedData`): the record says which file it is
    /// about to become (`pending` for its --on-complete run in the same write, issue 32); returns
    /// the record's name and bytes.
    func finishedRecord() throws -> (name: String, bytes: [UInt8]) {
        // The rename and the record's removal cannot be one step: the record first says which
        // file it is about to become, so a crash between the two is recognised on restart as
        // finished (`finishedBefore`), not fetched again and failed against its own file.
        let finished: ResumeRecord.FinishedFile
        do throws(Errno) { finished = ResumeRecord.FinishedFile(try file.status()) } catch {
            throw DownloadError.fileSystem("stat", path: path, errno: error.rawValue)
        }
        let record = state.withLock { state in
            state.record.finishedFile = finished
            if state.record.onComplete?.step == nil { state.record.onComplete?.step = .pending }
            return state.record
        }
        do { return (recordName, try Array(ResumeRecord.encoder().encode(record))) } catch {
            throw DownloadError.fileSystem.with(description: "cannot encode the resume record \(recordPath): \(error)")
        }
    }

    /// The state directory the record is written to (the group writes each directory's at once).
    var recordDirectory: CheckedDirectory { stateDirectory }

    /// The destination's directory (its fsync makes the group's renames in it durable).
    var placementDirectory: CheckedDirectory { destinationDirectory }

    /// Step 3, once the record is durable: renames the file into place, without replacing what
    /// appeared meanwhile unless asked to, and checks the name now holds our file.
    func placeFinishedFile() throws {
        let record = record
        let name = record.destination.lastPathComponent
        do throws(FileTrustError) {
            try destinationDirectory.rename(partialName, to: name, replacing: record.replacesExistingFile == true)
        } catch where error.isAlreadyExisting {
            throw DownloadError.destinationExists.with(description:
                "\(record.destination.path) appeared during the download and was not replaced; the verified download is kept in \(path)")
        } catch {
            throw DownloadError.file(error)
        }
        do throws(FileTrustError) {
            // Renamed by name: make sure the name now holds our file, not one swapped in.
            guard let placed = try destinationDirectory.status(of: name), placed.isSameFile(as: fileStatus) else {
                throw FileTrustError.unsafe(record.destination.path, "is not the file that was downloaded (\(partialName) was replaced during the download)")
            }
        } catch {
            throw DownloadError.file(error)
        }
    }

    /// Step 4, once the renames are durable: closes the file and removes the journal and the
    /// record (a record whose --on-complete command is still due stays until that run is done,
    /// `DownloadAgent.recordCompletionStep`). The removals are not fsynced: a record left by a
    /// crash names a file already in place, which `finishedBefore` recognises as done.
    func finishPlacement() {
        limits.afterRename?()
        closeOnQueue()
        journal.withLock { $0?.remove() }
        if state.withLock({ $0.record.onComplete.map { $0.step == .done } ?? true }) {
            try? stateDirectory.remove(recordName)
            Self.removePieceFile(of: record, in: stateDirectory)
        }
    }

    /// Sets the step of the job's `--on-complete` run in the record and writes it, while the file
    /// is open (a failed job resumed while its command ran); a closed one is left alone.
    func setCompletionStep(_ step: CompletionCommand.Step) async {
        _ = try? await onQueue { [self] in
            guard !state.withLock({ $0.isClosed }) else { return }
            state.withLock { $0.record.onComplete?.step = step }
            try writeRecord()
        }
    }

    /// Removes the side file of piece hashes the record names (`PieceFile`), with the record.
    static func removePieceFile(of record: ResumeRecord, in stateDirectory: CheckedDirectory) {
        if let pieceFile = record.sources?.pieceFile { try? stateDirectory.remove(pieceFile.fileName(for: record.id)) }
    }

    /// Whether `record` belongs to a download that finished before a crash: its partial file is
    /// gone and the destination is the very file the record names as renamed into place (same
    /// device, inode, length and modification time; and the expected SHA-256 when there is
    /// one). Then its journal and record are removed and true returned; the download is done.
    static func finishedBefore(_ record: ResumeRecord, stateDirectory: CheckedDirectory) -> Bool {
        guard let finished = record.finishedFile,
              let folder = try? CheckedDirectory.open(record.destination.deletingLastPathComponent().path, policy: .shared),
              (try? folder.status(of: record.partialName)) == .some(nil),
              let placed = try? folder.status(of: record.destination.lastPathComponent), finished.matches(placed)
        else { return false }
        if let expected = record.expectedSHA256.flatMap(SHA256.normalizedHexDigest) {
            guard let opened = try? folder.openOwnedFile(record.destination.lastPathComponent, creating: .existing, writable: false) else { return false }
            defer { opened.descriptor.close() }
            guard opened.status.isSameFile(as: placed),
                  (try? SHA256.hex(file: opened.descriptor, length: placed.size, path: record.destination.path)) == expected
            else { return false }
        }
        try? stateDirectory.remove(BlockJournal.fileName(for: record.id))
        // A record whose --on-complete run is not done stays for that run (issue 32).
        if record.onComplete.map({ $0.step == .done }) ?? true {
            try? stateDirectory.remove(ResumeRecord.fileName(for: record.id))
            removePieceFile(of: record, in: stateDirectory)
        }
        try? stateDirectory.sync()
        return true
    }

    /// Deletes the partial file and the record (cancel, or data that failed verification).
    func discard() async {
        _ = try? await onQueue { [self] in
            closeOnQueue()
            journal.withLock { $0?.remove() }
            // By descriptor-relative name, and only while the name still is our file.
            try? destinationDirectory.remove(partialName, ifSameAs: fileStatus)
            try? stateDirectory.remove(recordName)
            Self.removePieceFile(of: record, in: stateDirectory)
            try? stateDirectory.sync()
        }
    }

    /// Closes the descriptor after queued writes (pause keeps the files).
    func close() async {
        _ = try? await onQueue { [self] in
            closeOnQueue()
            journal.withLock { $0?.close() }
        }
    }

    deinit {
        // Normally closed by complete/discard/close; this only catches an abandoned file.
        if !state.withLock({ $0.isClosed }) { file.close() }
    }

    private func closeOnQueue() {
        let wasClosed = state.withLock { state -> Bool in
            defer { state.isClosed = true }
            return state.isClosed
        }
        if !wasClosed { file.close() }
    }
}
