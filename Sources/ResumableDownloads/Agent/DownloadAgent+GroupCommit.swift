import FoundationEssentials
import LinuxSystem

/// New downloads' records through the group commit (`RecordGroupCommit`, issue 29): an add
/// whose caller collects `DurableWrites` is answered once its record is durable, with the adds
/// arriving beside it sharing the fsyncs; its download starts only then, so the staged record
/// can never land over a newer one the transfer wrote.
extension DownloadAgent {
    /// Writes a new download's record: staged for the next group commit when the caller collects
    /// durable writes and the id is new (true: schedule it from `newRecordWritten`), else at
    /// once and durably (false).
    func writeNewRecord(_ record: ResumeRecord, to directory: CheckedDirectory, isNew: Bool) throws -> Bool {
        guard isNew, let writes = DurableWrites.collecting else {
            try record.write(to: directory)
            return false
        }
        // Piece hashes kept beside the record are written first (at once: a large job is rare).
        if let pieceFile = record.sources?.pieceFile, let pieces = record.sources?.pieceHashes {
            try pieceFile.store(pieces, for: record.id, in: directory)
        }
        let bytes = try Array(ResumeRecord.encoder().encode(record))
        let id = record.id
        writes.begin()
        RecordGroupCommit.shared.stage(id: id, bytes: bytes, as: ResumeRecord.fileName(for: id), in: directory) { [weak self] failure in
            writes.end(failure: failure.map { "cannot write the download's resume record: \($0)" })
            Task { await self?.newRecordWritten(id, failure: failure) }
        }
        return true
    }

    /// Whether download `id` waits for its record's group commit (it is scheduled after it).
    func isRecordStaged(_ id: UUID) -> Bool { RecordGroupCommit.shared.isPending(id) }

    /// Returns once download `id`'s staged record is written: a cancel must not remove the
    /// files before a late write puts the record back.
    func recordWritten(_ id: UUID) async { await RecordGroupCommit.shared.waitUntilWritten(id) }

    /// Schedules the download whose record is now durable, unless it was paused, cancelled or
    /// the agent shut down meanwhile; a record that could not be written fails the download
    /// (its add was answered with the reason).
    private func newRecordWritten(_ id: UUID, failure: FileTrustError?) {
        guard let entry = entries[id] else { return }
        if let failure {
            let error = DownloadError.file(failure)
            entry.download.update(state: .failed(error), event: .failed(error))
            return
        }
        guard !isShutDown, entry.intent == .run, entry.driver == nil, entry.download.state == .queued else { return }
        scheduler.enqueue(id, priority: entry.download.options.priority)
        schedule()
    }
}
