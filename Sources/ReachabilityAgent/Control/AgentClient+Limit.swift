extension AgentClient {
    /// Sets the agent's one bandwidth limit over every download (bytes per second; nil: none),
    /// as `reachability agent limit` does: it holds until the next one or until the agent re-reads
    /// `agent.conf` (SIGHUP), and reaches running transfers within a second, without restarting
    /// them. Returns the status with the limit in force.
    public func setLimit(bytesPerSecond: Int64?) async throws(AgentClientError) -> AgentStatus {
        guard let status = try await request(.limit(bytesPerSecond)).status else {
            throw AgentClientError(.noReply, "the agent sent no status (an agent older than this client?)")
        }
        return status
    }
}
