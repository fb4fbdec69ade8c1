import FoundationEssentials

/// A command the agent runs when a job ends (`queue add --on-complete`, issue 32 item 6), and
/// whose it is. The engine only carries it, in `DownloadOptions` and the resume record, so that a
/// job restored after the agent restarts still runs it; ReachabilityAgent checks and runs it.
package struct CompletionCommand: Sendable, Hashable, Codable {
    /// The program and its arguments (no shell).
    package var arguments: [String]
    /// The uid that added the job (the agent's own user: only that user may give one); a
    /// restored command of another uid is not run.
    package var owner: UInt32

    /// How far its one run has got, kept in the job's resume record so that it runs exactly
    /// once across kills: absent until the job ends, then `pending` (written with the completed
    /// file's identity, before the rename), `started` (written before the program is spawned)
    /// and `done`. A restarted agent runs a pending one; a started one is not run again (it may
    /// have run); a done one never runs again, also when its failed job is resumed.
    package var step: Step?

    /// The steps of a command's run.
    package enum Step: String, Sendable, Hashable, Codable {
        /// The job ended; the command has not started.
        case pending
        /// The command was spawned (or is being retried); it may have run.
        case started
        /// It ran (successfully or out of retries), or was not run for a reason already reported.
        case done
    }

    /// Creates a command.
    package init(arguments: [String], owner: UInt32, step: Step? = nil) {
        self.arguments = arguments
        self.owner = owner
        self.step = step
    }

    /// Whether the job's end still has to run it.
    package var isDue: Bool { step == nil || step == .pending }
}
