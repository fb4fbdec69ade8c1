import FoundationEssentials
import Glibc

/// Sends one request to the agent on a state directory and reads its reply.
struct ControlClient: Sendable {
    /// The state directory whose `agent.sock` is used.
    var stateDirectory: String
    /// How long to wait for the reply. A socket-activated agent starts when the request
    /// arrives; one that cannot start leaves the connection unanswered in systemd's queue.
    var replyTimeout: Duration = .seconds(30)

    var socketPath: String { AgentStateDirectory.socketPath(in: stateDirectory) }

    /// Sends `command` and returns the agent's reply; throws `CommandFailure` with a clear message
    /// when no agent runs there or the connection is refused.
    func send(_ command: ControlCommand) throws -> ControlResponse {
        let descriptor: Int32
        do {
            descriptor = try UnixSocketSyscalls.makeSocket(SOCK_STREAM)
        } catch {
            throw CommandFailure(message: "cannot create a socket: \(error)", exitCode: .failure)
        }
        defer { UnixSocketSyscalls.close(descriptor) }
        do {
            try UnixSocketSyscalls.connect(descriptor, path: socketPath)
        } catch {
            switch error.number {
            case ECONNREFUSED, ENOENT:
                throw CommandFailure(message: "no agent is running on \(stateDirectory) (start one with 'reachability agent')",
                                     exitCode: .failure)
            case EACCES, EPERM:
                throw CommandFailure(message: "permission denied connecting to the agent on \(stateDirectory): it belongs to another user (only its own user or root may control it)",
                                     exitCode: .noPermission)
            default:
                throw CommandFailure(message: "cannot connect to the agent on \(stateDirectory): \(error)", exitCode: .failure)
            }
        }
        let request = ControlRequest(id: .number(1), command: command)
        do {
            try UnixSocketSyscalls.writeAll(descriptor, ControlCodec.encode(request) + [UInt8(ascii: "\n")])
        } catch {
            // A refusing agent may already have answered and closed; read its reply below.
        }
        let deadline = ContinuousClock.now + replyTimeout
        var buffer: [UInt8] = []
        while !buffer.contains(UInt8(ascii: "\n")) {
            let remaining = deadline - ContinuousClock.now
            let milliseconds = remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000
            var bytes: [UInt8] = []
            var timedOut = milliseconds <= 0
            if !timedOut {
                do {
                    try UnixSocketSyscalls.setReceiveTimeout(descriptor, milliseconds: Int(milliseconds))
                    bytes = try UnixSocketSyscalls.read(descriptor)
                } catch {
                    timedOut = error.number == EAGAIN || error.number == EWOULDBLOCK
                }
            }
            if timedOut {
                throw CommandFailure(message: "the agent on \(stateDirectory) did not answer within \(replyTimeout); if systemd starts it from a socket unit, see 'systemctl --user status reachability-agent' (or 'systemctl status' for the system one)",
                                     exitCode: .failure)
            }
            if bytes.isEmpty { break }
            buffer += bytes
        }
        let line = buffer.prefix { $0 != UInt8(ascii: "\n") }
        guard !line.isEmpty, let response = try? ControlCodec.decodeResponse(line) else {
            throw CommandFailure(message: "the agent on \(stateDirectory) closed the connection without a reply", exitCode: .failure)
        }
        if let error = response.error, error.code == .permissionDenied {
            throw CommandFailure(message: "the agent refused the connection: \(error.message)", exitCode: .noPermission)
        }
        return response
    }
}
