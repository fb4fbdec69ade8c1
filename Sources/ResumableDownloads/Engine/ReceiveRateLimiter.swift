/// The receive limit of one transfer (curl's `--limit-rate`), as a schedule: every byte taken is
/// paid for at `bytesPerSecond`, and a chunk is taken only once the bytes before it are paid, so
/// from its first byte to any point the transfer averages at most the limit, plus one chunk.
/// Idle time earns no credit (a pause, a slow server or a reconnect is never followed by a burst),
/// and the schedule belongs to the transfer, not to a connection: a fresh connection (a race)
/// continues it instead of starting a new allowance. Pure.
///
/// The engine pauses the transfer itself (`CURL_WRITEFUNC_PAUSE`) until `admit` says, instead of
/// libcurl's `CURLOPT_MAX_RECV_SPEED_LARGE`: the engine then knows that a silence is its own
/// doing (the stall detector must not take it for a dead connection, or each race would open a
/// new connection with a new burst), and libcurl's limiter, which starts over every 3 seconds
/// and on every new handle, would let each of them burst.
struct ReceiveRateLimiter: Sendable, Hashable {
    typealias Instant = ContinuousClock.Instant

    let bytesPerSecond: Int64
    /// When the bytes taken so far are paid for; nil before the first chunk.
    private var paidUntil: Instant?

    init(bytesPerSecond: Int64) {
        self.bytesPerSecond = max(1, bytesPerSecond)
    }

    /// Takes `count` bytes at `now` and returns nil, or returns the instant they may be taken
    /// (taking nothing): until then the transfer is paused.
    mutating func admit(_ count: Int, at now: Instant) -> Instant? {
        if let paidUntil, paidUntil > now { return paidUntil }
        paidUntil = now + cost(of: count)
        return nil
    }

    /// Until when the transfer must wait before its next chunk, nil when it may take one now
    /// (asked before the agent's shared limit, so a chunk that limit refuses is not paid here).
    func blockedUntil(_ now: Instant) -> Instant? {
        if let paidUntil, paidUntil > now { return paidUntil }
        return nil
    }

    /// How long `count` bytes take at the limit.
    func cost(of count: Int) -> Duration {
        .nanoseconds(Int64(count) * 1_000_000_000 / bytesPerSecond)
    }

    /// The receive buffer to ask libcurl for: 1/16 s of the limit, so one chunk is never a long
    /// burst followed by a long pause, and the overshoot of the last chunk is small (libcurl's
    /// floor is 1 KiB), at most `maximum`.
    static func receiveBufferSize(bytesPerSecond: Int64, maximum: Int) -> Int {
        Int(min(Int64(maximum), max(1024, bytesPerSecond / 16)))
    }
}
