import ReachabilityAgent
import ReachabilityBase

/// `queue add --deadline` and `--no-progress-timeout` (issue 32 item 5), `--on-complete` (item 6).
extension QueueAddCommand {
    static let timeLimitRows: [OptionRow<Self>] = [
        .value("deadline", valueName: "seconds", help: "Fail the job if it is not done this many seconds after it was added (BITS' MaxDownloadTime), whatever it is doing; its bytes and resume record are kept.",
               as: JobTimeLimits.seconds, into: \.job.deadline),
        .value("no-progress-timeout", valueName: "seconds", help: "Fail the job after this many seconds without a byte, counted from its first transient error or lost path and reset by each byte (BITS' NoProgressTimeout); its bytes and resume record are kept.",
               as: JobTimeLimits.seconds, into: \.job.noProgressTimeout),
        .custom(.value("on-complete", valueName: "command", help: "Run this program when the job ends (split into words as a shell would, but no shell runs it: no variables, globs or redirections), as the agent's user, from /, with REACHABILITY_FILE, REACHABILITY_OUTCOME (completed, failed or cancelled), REACHABILITY_JOB_ID, REACHABILITY_URL and REACHABILITY_ERROR in its environment; a non-zero exit is retried after 1, 2, 4, 8 and 16 s. Only the agent's own user may give one."),
                into: \.job.onComplete, read: onCompleteCommand),
    ]

    /// `--on-complete` split once into an argv (a usage error when it cannot be).
    static func onCompleteCommand(_ arguments: ParsedArguments, _ onComplete: Option) throws -> [String]? {
        guard let text = arguments.value(onComplete) else { return nil }
        do {
            return try OnCompleteCommand.parse(text)
        } catch {
            throw UsageError.invalidValue(text, for: onComplete, error.description).escaped
        }
    }
}
