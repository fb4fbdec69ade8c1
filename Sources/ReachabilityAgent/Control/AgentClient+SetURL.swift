import FoundationEssentials

extension AgentClient {
    /// Fetches the download with this ID (or unique ID prefix) from `url` from now on, keeping
    /// the bytes it has: for a presigned link or CDN token that expired (the download failed
    /// with HTTP 401, 403 or 410) or is about to. The job continues at its stored offset when
    /// the new URL serves the same file (same length, and the recorded ETag or Last-Modified
    /// in `If-Range` still matches); otherwise it starts over from zero, and its `restarted`
    /// event says why. A running job moves to the new URL at once (checkpointed first), a
    /// failed one is queued again, a paused one stays paused. A completed or cancelled job,
    /// or a background session's task, is refused (`agentCode` `.invalidArgument`).
    public func setURL(_ id: String, to url: URL) async throws(AgentClientError) -> AgentDownload {
        guard let download = try await request(.setURL(id, url: url)).download else {
            throw AgentClientError(.noReply, "the agent's reply names no download (an agent older than this client?)")
        }
        return download
    }
}
