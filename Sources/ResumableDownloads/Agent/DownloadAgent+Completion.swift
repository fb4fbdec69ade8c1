import FoundationEssentials
import LinuxSystem

/// The steps of a job's `--on-complete` run in its resume record (issue 32): `pending` is
/// written with the finished file's identity before the rename (`PartialFile.complete`), then
/// the agent's service records `started` before it spawns the program and `done` after its last
/// run. A completed job's record stays until then, so a kill at any instant neither skips the
/// command nor runs it twice.
extension DownloadAgent {
    /// Records `step` for job `id`'s command: in the live record of a driver running it again,
    /// else in its record file. `done` for a completed job removes that record (nothing else is
    /// left to resume). A record already gone (a failure that kept no resume data, a cancel) is
    /// not written again.
    package func recordCompletionStep(_ step: CompletionCommand.Step, for id: UUID) async {
        guard var record = entries[id]?.record, record.onComplete != nil, let state = try? stateDirectory() else { return }
        record.onComplete?.step = step
        entries[id]?.record = record
        if entries[id]?.driver != nil, let file = entries[id]?.file {
            await file.setCompletionStep(step)
            return
        }
        let name = ResumeRecord.fileName(for: id)
        guard (try? state.status(of: name)) != nil else { return }
        if step == .done, entries[id]?.download.state == .completed {
            try? state.remove(name)
        } else {
            try? record.write(to: state)
        }
        try? state.sync()
    }
}
