import ReachabilityEvents
import ResumableDownloads

/// The agent's one bandwidth limit (issue 32 item 2): `agent limit`, the schedule's clock, and
/// what `agent status` shows. The limit itself is `AgentRateLimitControl`'s.
extension AgentService {
    /// `agent limit RATE|none`: the new limit reaches running transfers at their next chunk
    /// (the reply is then the status, with the limit in force); a refusal when there is none to set.
    func setLimit(_ bytesPerSecond: Int64?, id: ControlRequestID?) -> ControlResponse? {
        guard let control = environment.rateLimit else {
            return .failure(.failed("this agent has no bandwidth limit to set"), id: id)
        }
        if let state = control.set(.rate(bytesPerSecond)) { reportLimit(state) }
        return nil
    }

    /// Applies the limit that holds now (a window may have begun or ended); the daemon calls it
    /// every second, and the service at start.
    package func evaluateRateLimit() {
        if let state = environment.rateLimit?.evaluate() { reportLimit(state) }
    }

    /// A `limit` event: the limit in force changed (a window, `agent limit`, a reload).
    func reportLimit(_ state: AgentRateLimitControl.State) {
        emitAgent("limit", [.init(key: "bytesPerSecond", value: state.bytesPerSecond.map { .integer(Int($0)) } ?? .null),
                            .init(key: "window", value: state.window.map { .string($0.description) } ?? .null),
                            .init(key: "source", value: .string(state.isOverride ? "agent limit" : "agent.conf")),
                            .init(key: "text", value: .string(state.text))])
    }

    /// Puts the limit in force into a status reply.
    nonisolated func describeLimit(in status: inout AgentStatus) {
        guard let state = environment.rateLimit?.state else { return }
        status.limitBytesPerSecond = state.bytesPerSecond
        status.limit = state.text
    }
}
