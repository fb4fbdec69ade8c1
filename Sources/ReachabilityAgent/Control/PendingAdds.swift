import ResumableDownloads

/// Replies to adds carried out but not yet sent: each waits for its record's group commit
/// (`DurableWrites`), so a reply always means the job survives a crash.
struct PendingAdds {
    private var waiting: [(response: ControlResponse?, writes: DurableWrites)] = []

    /// Holds `response` (nil when the handler sent it itself) until `writes` are durable.
    mutating func append(_ response: ControlResponse?, _ writes: DurableWrites) {
        waiting.append((response, writes))
    }

    /// Sends the held replies in order once their records are durable (a record that could not
    /// be written turns its success into that failure); false when one could not be sent.
    mutating func answer(_ deliver: (ControlResponse) -> Bool) -> Bool {
        defer { waiting = [] }
        var isSent = true
        for (response, writes) in waiting {
            let failure = writes.waitUntilDurable()
            guard isSent, var response else { continue }
            if let failure, response.ok {
                response = .failure(.failed(failure), id: response.id)
            }
            isSent = deliver(response)
        }
        return isSent
    }
}
