import FoundationEssentials
import LinuxSystem
import ReachabilityEvents
import ResumableDownloads

/// `--on-complete` (issue 32 item 6): who may give one, and running it when the job ends.
extension AgentService {
    /// An `--on-complete` command runs as the agent's user, so only that user may give one (root
    /// adding to another user's agent would otherwise run a command of root's as that user).
    func refuseOnComplete(_ job: QueueJobOptions, uid: UInt32, id: ControlRequestID?) -> ControlResponse? {
        guard job.onComplete != nil, uid != CurrentProcess.effectiveUserID else { return nil }
        return .failure(ControlError(code: .permissionDenied, message: "--on-complete runs as the agent's user (uid \(CurrentProcess.effectiveUserID)); only that user may give one"), id: id)
    }

    /// Registers the `--on-complete` command a restored job's resume record kept, if it is still
    /// one this agent may run: given by its own user, and a command by `OnCompleteCommand`'s
    /// rules (the record is input). Otherwise it is dropped with an `onComplete` event saying why.
    /// A command whose record says it started or ran is registered as run: exactly once across
    /// kills (a started one may have run, so it is not run again).
    func registerOnComplete(ofRestored download: Download) {
        guard let command = download.options.completionCommand else { return }
        switch command.step {
        case .started:
            return environment.onComplete.registerAsRun(download.id, reason: "the agent stopped while it ran (it may have run)")
        case .done:
            return environment.onComplete.registerAsRun(download.id, reason: "it ran when the job ended before")
        case .pending, nil: break
        }
        let problem = command.owner != CurrentProcess.effectiveUserID
            ? "given by uid \(command.owner), and the agent runs as uid \(CurrentProcess.effectiveUserID)"
            : OnCompleteCommand.problem(with: command.arguments)
        guard let problem else { return environment.onComplete.register(command.arguments, for: download.id) }
        emitOnComplete(download.id, status: "not run: \(problem)")
    }

    /// Runs the job's `--on-complete` command, if it has one and it is due, with the file and the
    /// outcome. Its steps go to the job's record first (`started` before the program is spawned,
    /// `done` after its last run), so a kill at any instant neither skips nor repeats it.
    func runOnComplete(_ download: Download, _ event: DownloadEvent) async {
        guard download.options.completionCommand != nil || environment.onComplete.command(for: download.id) != nil else { return }
        let agent = agent
        switch environment.onComplete.claim(download.id) {
        case .due(let argv):
            await agent.recordCompletionStep(.started, for: download.id)
            let (outcome, error): (String, String?) = switch event {
            case .failed(let failure): (failure == .cancelled ? "cancelled" : "failed", failure.description)
            default: ("completed", nil)
            }
            let id = download.id
            environment.onComplete.run(argv, for: id, url: download.url.absoluteString, file: download.destination.path,
                                       outcome: outcome, error: error, environment: environment.launchEnvironment,
                                       now: environment.now, emit: environment.emit,
                                       finished: { Task { await agent.recordCompletionStep(.done, for: id) } })
        case .ran(let reason):
            emitOnComplete(download.id, status: "not run again: \(reason)")
            await agent.recordCompletionStep(.done, for: download.id)
        case nil:
            // Refused at its restore (reported then): its record goes with its job.
            await agent.recordCompletionStep(.done, for: download.id)
        }
    }

    private func emitOnComplete(_ id: UUID, status: String) {
        environment.emit(EventSchema.line(.download, "onComplete", at: environment.now(), [
            .init(key: "id", value: .string(id.uuidString.lowercased())), .init(key: "run", value: .integer(0)),
            .init(key: "status", value: .string(status)), .init(key: "retry", value: .bool(false))]))
    }
}
