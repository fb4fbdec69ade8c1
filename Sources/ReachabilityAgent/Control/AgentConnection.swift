import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import Synchronization

/// A long-lived connection to the agent, for a background session: requests go out in order
/// (each with its own id), and a reader thread of the connection hands replies to their callers
/// and the agent's pushed events to `onEvent`, in the order they arrived. Everything it calls
/// back runs on that reader thread, so a session sees a reply and the events after it in order.
///
/// `AgentClient` is the one-request-per-connection client; this one stays open while the
/// session is attached. When the connection ends (the agent stopped or was killed, or `close`)
/// every request still waiting fails, and `onClose` is called once.
package final class AgentConnection: Sendable {
    package typealias Reply = @Sendable (Result<ControlResponse, AgentClientError>) -> Void

    package let stateDirectory: String
    private let socket: FileDescriptor
    private struct State {
        var nextID = 1
        var waiting: [Int: Reply] = [:]
        var isClosed = false
    }
    private let state = Mutex(State())
    /// Writes of whole lines, one at a time.
    private let writer = Mutex(())
    private let onEvent: @Sendable (BackgroundEvent) -> Void
    private let onClose: @Sendable (AgentClientError) -> Void

    /// The longest line read from the agent (a pushed event with a long URL is far below).
    package static let maximumLineLength = 16 << 20

    private init(stateDirectory: String, socket: FileDescriptor, onEvent: @escaping @Sendable (BackgroundEvent) -> Void,
                 onClose: @escaping @Sendable (AgentClientError) -> Void) {
        self.stateDirectory = stateDirectory
        self.socket = socket
        self.onEvent = onEvent
        self.onClose = onClose
    }

    /// Connects to the agent on `stateDirectory` (without starting one: `AgentStarter` does).
    package static func connect(stateDirectory: String, onEvent: @escaping @Sendable (BackgroundEvent) -> Void,
                                onClose: @escaping @Sendable (AgentClientError) -> Void) throws(AgentClientError) -> AgentConnection {
        let client = AgentClient(stateDirectory: stateDirectory)
        let socket = try client.connectedSocket()
        try? socket.setSendTimeout(milliseconds: 30_000)
        let connection = AgentConnection(stateDirectory: stateDirectory, socket: socket, onEvent: onEvent, onClose: onClose)
        SystemThread.detach(name: "agent-session") { [connection] in connection.readLoop() }
        return connection
    }

    /// Sends `command`; `reply` is called on the reader thread with the agent's answer (an error
    /// reply is `.rejected` with the agent's code), or with the failure when the connection ends
    /// first. `descriptor` (a background upload's open file) travels with the line (SCM_RIGHTS);
    /// the caller still owns and closes it.
    package func send(_ command: ControlCommand, passing descriptor: FileDescriptor? = nil, reply: @escaping Reply = { _ in }) {
        let id = state.withLock { state -> Int? in
            guard !state.isClosed else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.waiting[id] = reply
            return id
        }
        guard let id else {
            reply(.failure(AgentClientError(.noReply, "the connection to the agent on \(stateDirectory) is closed")))
            return
        }
        let line = ControlCodec.encode(ControlRequest(id: .number(id), command: command)) + [UInt8(ascii: "\n")]
        let sent = writer.withLock { _ in
            (try? descriptor.map { try socket.sendAll(line, passing: $0) } ?? socket.sendAll(line)) != nil
        }
        if !sent { socket.shutdown() }   // the reader sees the end and fails what waits
    }

    /// `send` for async callers.
    package func request(_ command: ControlCommand) async throws(AgentClientError) -> ControlResponse {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<ControlResponse, AgentClientError>, Never>) in
            send(command) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Ends the connection (the agent detaches the session); `onClose` follows.
    package func close() { socket.shutdown() }

    private func readLoop() {
        var buffer: [UInt8] = []
        var scanned = 0   // bytes of `buffer` known to hold no newline: never rescanned
        var reason = AgentClientError(.noReply, "the agent on \(stateDirectory) closed the connection")
        reading: while true {
            let bytes: [UInt8]
            do { bytes = try socket.receive(maximum: 64 << 10) } catch { break }
            if bytes.isEmpty { break }
            buffer += bytes
            while let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[..<newline]
                defer { buffer.removeSubrange(...newline); scanned = 0 }
                guard let response = try? ControlCodec.decodeResponse(line) else { continue }
                if !handle(response) {
                    reason = AgentClientError(.permissionDenied, "the agent refused the connection: \(response.error?.message ?? "no reason given")",
                                              agentCode: response.error?.code)
                    break reading
                }
            }
            scanned = buffer.count
            if buffer.count > Self.maximumLineLength {
                reason = AgentClientError(.noReply, "the agent sent a line longer than \(Self.maximumLineLength) bytes")
                break
            }
        }
        let waiting = state.withLock { state -> [Reply] in
            state.isClosed = true
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for reply in waiting { reply(.failure(reason)) }
        socket.close()
        onClose(reason)
    }

    /// Hands a line to its request or to `onEvent`; false for an error with no request to
    /// answer (the agent refusing the connection).
    private func handle(_ response: ControlResponse) -> Bool {
        if let event = response.event, response.id == nil {
            onEvent(event)
            return true
        }
        guard case .number(let id)? = response.id else { return response.error == nil }
        guard let reply = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return true }
        if let error = response.error, !response.ok {
            reply(.failure(AgentClientError(.rejected, error.message, agentCode: error.code)))
        } else {
            reply(.success(response))
        }
        return true
    }
}
