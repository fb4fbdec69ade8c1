/// Why the agent cannot start or go on, with what to do about it: another agent holds the state
/// directory, a bad `agent.conf` line, an unsafe or unwritable directory. The command line turns
/// `kind` into its exit status.
package struct AgentFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of problem it is.
    package enum Kind: Sendable, Equatable {
        /// The agent cannot run now (another holds the directory, a socket failed): EX 1.
        case unavailable
        /// A setting is wrong (`agent.conf`, `REACHABILITY_STATE_DIR`, an unsafe directory): EX_CONFIG.
        case configuration
        /// A file or directory cannot be created: EX_CANTCREAT.
        case cannotCreate
    }

    /// For people, with the fix where there is one.
    package var message: String
    package var kind: Kind

    package init(_ message: String, kind: Kind) {
        self.message = message
        self.kind = kind
    }

    package var description: String { message }
}
