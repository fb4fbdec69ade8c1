import ReachabilityAgent
import ReachabilityBase

/// `reachability agent limit RATE|none`: the agent's one bandwidth limit, changed while it runs.
struct AgentLimitCommand: Command, OptionTable {
    static let name = "agent limit"
    static let abstract = "Set the running agent's one bandwidth limit over all its downloads (or none)."
    static let table: [OptionRow<Self>] = ControlOptions.rows(at: \.control) + [
        .then { arguments, command in command.bytesPerSecond = try rate(arguments.positional(positionals[0])[0]) },
    ]
    static let positionals = [Positional(name: "rate", help: "Bytes per second over every download together, with k, m, g suffixes (1k = 1024), or none.")]
    static let discussion: String? = """
        The limit is shared by every connection of every download (segments included), higher \
        priority classes first and fair between jobs of one class. It reaches running transfers \
        within a second, without restarting them, and holds until the next 'agent limit' or until \
        SIGHUP re-reads agent.conf, whose limit-rate= lines (with time windows) apply again. \
        Prints the limit in force.
        """ + "\n\n" + ControlOptions.discussion

    /// Bytes per second; nil is `none`.
    var bytesPerSecond: Int64?
    var control = ControlOptions()

    /// The positional rate: bytes per second, or nil for `none`.
    private static func rate(_ text: String) throws -> Int64? {
        guard text.lowercased() != "none" else { return nil }
        do {
            return try AgentRateLimitPolicy.rate.parse(text)
        } catch {
            throw UsageError("The value '\(text)' is invalid for '\(positionals[0].synopsis)': expected \(AgentRateLimitPolicy.rate.expectation), or none")
        }
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(.limit(bytesPerSecond), in: context)
        guard let limit = response.status?.limit else {
            throw CommandFailure(message: "the agent sent no limit (an agent older than this command?)", exitCode: .failure)
        }
        context.output.line(limit)
        return .success
    }
}

extension AgentLimitCommand {
    /// The agent's limit line for `queue list` when one is in force; nil when none is, or the
    /// agent is older than the limit (the list is printed anyway).
    static func limitInForce(_ control: ControlOptions, in context: CommandContext) async -> String? {
        guard let status = try? await control.send(.status, in: context).status, status.limitBytesPerSecond != nil else { return nil }
        return status.limit
    }
}
