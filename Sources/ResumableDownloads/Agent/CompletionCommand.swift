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

    /// Creates a command.
    package init(arguments: [String], owner: UInt32) {
        self.arguments = arguments
        self.owner = owner
    }
}
