/// What to do with rtnetlink traffic around receive-buffer overflows.
///
/// After ENOBUFS the kernel has dropped messages, so what is still queued describes a state we
/// can no longer reconstruct. Queued events are discarded until the kernel has been quiet for a
/// while, then links and addresses are dumped afresh; stale events are never applied on top.
struct ResyncStateMachine: Sendable, Equatable {
    enum State: Sendable, Equatable {
        case live
        case overflowed(sawTraffic: Bool)
    }

    enum Action: Sendable, Equatable {
        case apply
        case discard
        case armQuietTimer
        case redump
        case nothing
    }

    private(set) var state = State.live

    var isLive: Bool { state == .live }

    /// The socket reported ENOBUFS (or any receive failure).
    mutating func overflowed() -> Action {
        state = .overflowed(sawTraffic: false)
        return .armQuietTimer
    }

    /// Messages were read from the event socket.
    mutating func messagesArrived() -> Action {
        guard case .overflowed = state else { return .apply }
        state = .overflowed(sawTraffic: true)
        return .discard
    }

    /// The quiet timer fired; `drainedMore` is whether a last drain found anything.
    mutating func quietTimerFired(drainedMore: Bool) -> Action {
        guard case .overflowed(let sawTraffic) = state else { return .nothing }
        if sawTraffic || drainedMore {
            state = .overflowed(sawTraffic: false)
            return .armQuietTimer
        }
        state = .live
        return .redump
    }
}
