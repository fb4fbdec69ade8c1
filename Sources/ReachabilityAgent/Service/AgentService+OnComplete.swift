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
    func registerOnComplete(ofRestored download: Download) {
        guard let command = download.options.completionCommand else { return }
        let problem = command.owner != CurrentProcess.effectiveUserID
            ? "given by uid \(command.owner), and the agent runs as uid \(CurrentProcess.effectiveUserID)"
            : OnCompleteCommand.problem(with: command.arguments)
        guard let problem else { return environment.onComplete.register(command.arguments, for: download.id) }
        environment.emit(EventSchema.line(.download, "onComplete", at: environment.now(), [
            .init(key: "id", value: .string(download.id.uuidString.lowercased())), .init(key: "run", value: .integer(0)),
            .init(key: "status", value: .string("not run: \(problem)")), .init(key: "retry", value: .bool(false))]))
    }

    /// Runs the job's `--on-complete` command, if it has one, with the file and the outcome.
    func runOnComplete(_ download: Download, _ event: DownloadEvent) {
        let (outcome, error): (String, String?) = switch event {
        case .failed(let failure): (failure == .cancelled ? "cancelled" : "failed", failure.description)
        default: ("completed", nil)
        }
        environment.onComplete.jobEnded(download.id, url: download.url.absoluteString, file: download.destination.path,
                                        outcome: outcome, error: error, environment: environment.launchEnvironment,
                                        now: environment.now, emit: environment.emit)
    }
}
