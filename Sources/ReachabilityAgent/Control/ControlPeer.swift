import Dispatch
import LinuxSystem
import ReachabilityBase
import Synchronization

/// One control connection as the agent's handlers see it: who is on the other end (peer
/// credentials, read by the server from the socket, never from a request) and the way back.
///
/// A plain connection is request and reply: the serving thread writes each reply itself. An
/// attached background session (`startStreaming`) also receives events the agent pushes at any
/// time; then every line, replies included, goes through one queue drained by a writer thread
/// of the connection, so the agent's actor never blocks on a slow reader and lines never
/// interleave. Progress lines of one task replace each other while unsent (a slow reader gets
/// the latest, not a backlog); a reader that falls `maximumQueuedLines` behind, or does not take
/// a line within `sendTimeout`, loses the connection (its session is detached and can attach
/// again).
package final class ControlPeer: Sendable {
    /// Unique among the agent's connections.
    package let id: UInt64
    /// The peer's pid, uid and gid from SO_PEERCRED.
    package let credentials: PeerCredentials

    package static let maximumQueuedLines = 4096
    package static let sendTimeout = 30_000
    /// A plain (request and reply) connection whose reply is not taken within this many
    /// milliseconds is dropped.
    package static let plainSendTimeout = 10_000

    struct Line {
        var bytes: [UInt8]
        var coalescingKey: String?
    }

    struct State {
        var isStreaming = false
        var isClosed = false
        var queue: [Line] = []
        /// Open files the peer passed (SCM_RIGHTS) for a request still to claim (ControlPeer+Descriptors.swift).
        var descriptors: [FileDescriptor] = []
    }

    private let socket: FileDescriptor
    let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    /// Moves the connection from the per-uid request slots to the attached-session slots.
    private let promote: @Sendable () -> Bool

    package init(id: UInt64, credentials: PeerCredentials, socket: FileDescriptor, promote: @escaping @Sendable () -> Bool) {
        self.id = id
        self.credentials = credentials
        self.socket = socket
        self.promote = promote
    }

    /// Whether this connection carries an attached session.
    package var isStreaming: Bool { state.withLock { $0.isStreaming } }

    /// Whether the process at the other end is gone: it closed the connection (exited, killed) or
    /// the connection was dropped here, even when the serving thread has not told the agent yet.
    package var hasHungUp: Bool {
        // Under the lock: `finish` marks the connection closed before it closes the descriptor,
        // so a descriptor number is never peeked after it was closed (and perhaps reused).
        state.withLock { $0.isClosed || socket.peerHasClosed() }
    }

    /// Sends one line (a reply, or an event). On a streaming connection it is queued; one whose
    /// `coalescingKey` matches an unsent line replaces it. Returns false once the connection is gone.
    @discardableResult
    package func send(_ response: ControlResponse, coalescingKey: String? = nil) -> Bool {
        // A list's reports are encoded once and reused while unchanged (ReportEncodingCache).
        let bytes = (response.downloads == nil ? ControlCodec.encode(response) : ReportEncodingCache.shared.encode(response))
            + [UInt8(ascii: "\n")]
        enum Outcome { case gone, direct, queued, overflow }
        let outcome = state.withLock { state -> Outcome in
            guard !state.isClosed else { return .gone }
            guard state.isStreaming else { return .direct }
            if let coalescingKey, let index = state.queue.lastIndex(where: { $0.coalescingKey == coalescingKey }) {
                state.queue[index].bytes = bytes
                return .queued
            }
            guard state.queue.count < Self.maximumQueuedLines else {
                state.isClosed = true
                state.queue = []
                return .overflow
            }
            state.queue.append(Line(bytes: bytes, coalescingKey: coalescingKey))
            return .queued
        }
        switch outcome {
        case .gone: return false
        case .direct: return (try? socket.sendAll(bytes)) != nil
        case .queued:
            wake.signal()
            return true
        case .overflow:
            // The reader fell too far behind: the serving thread sees the end and detaches it.
            socket.shutdown()
            wake.signal()
            return false
        }
    }

    /// Makes this an attached connection: a writer thread of its own, no idle timeout. False
    /// when the uid holds too many attached connections.
    package func startStreaming() -> Bool {
        guard !isStreaming else { return true }
        guard promote() else { return false }
        try? socket.setSendTimeout(milliseconds: Self.sendTimeout)
        state.withLock { $0.isStreaming = true }
        SystemThread.detach(name: "control-push") { [self] in drain() }
        return true
    }

    /// The serving thread no longer reads: a streaming connection's writer is stopped first, then
    /// the descriptor is closed (never while another thread may still use its number).
    func finish() {
        let streaming = state.withLock { state -> Bool in
            state.isClosed = true
            state.queue = []
            for descriptor in state.descriptors { descriptor.close() }
            state.descriptors = []
            return state.isStreaming
        }
        if streaming {
            wake.signal()
            writerDone.wait()
        }
        socket.close()
    }

    private let writerDone = DispatchSemaphore(value: 0)

    private func drain() {
        defer { writerDone.signal() }
        while true {
            wake.wait()
            let (lines, closed) = state.withLock { state -> ([Line], Bool) in
                defer { state.queue = [] }
                return (state.queue, state.isClosed)
            }
            if closed { return }
            for line in lines {
                guard (try? socket.sendAll(line.bytes)) == nil else { continue }
                // Gone, or not reading within sendTimeout: drop it; the serving thread sees the
                // end of input and the session is detached.
                state.withLock { $0.isClosed = true; $0.queue = [] }
                socket.shutdown()
                return
            }
        }
    }
}
