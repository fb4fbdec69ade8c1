import Foundation
import Glibc
@testable import ReachabilityCLI
import Testing

/// sd_listen_fds(3)'s rules, and what the agent accepts as its listening socket.
@Suite("socket activation")
struct SocketActivationTests {
    @Test(arguments: [
        (["LISTEN_PID": "42", "LISTEN_FDS": "1"], 1 as Int?),
        (["LISTEN_PID": "42", "LISTEN_FDS": "2"], 2),
        (["LISTEN_PID": "43", "LISTEN_FDS": "1"], nil),   // another process's (a parent's)
        (["LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "42"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "0"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "-1"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "1x"], nil),
        (["LISTEN_PID": " 42", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "99999999999999999999"], nil),
        ([:], nil),
    ])
    func passedDescriptors(environment: [String: String], count: Int?) {
        #expect(SocketActivation.passedDescriptorCount(environment: environment, pid: 42) == count)
    }

    @Test func onlyAListeningUnixStreamSocketWithAPathIsServed() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rchsa-\(getpid())-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("agent.sock").path

        let listener = try UnixSocketSyscalls.makeSocket(SOCK_STREAM)
        defer { UnixSocketSyscalls.close(listener) }
        try UnixSocketSyscalls.bindAndListen(listener, path: path, mode: 0o600)
        #expect(try UnixSocketSyscalls.listeningStreamSocketPath(listener).get() == path)

        let unlistened = try UnixSocketSyscalls.makeSocket(SOCK_STREAM)
        defer { UnixSocketSyscalls.close(unlistened) }
        #expect(try UnixSocketSyscalls.listeningStreamSocketPath(unlistened).get() == nil)

        let datagram = try UnixSocketSyscalls.makeSocket(SOCK_DGRAM)
        defer { UnixSocketSyscalls.close(datagram) }
        #expect(try UnixSocketSyscalls.listeningStreamSocketPath(datagram).get() == nil)

        let abstract = try UnixSocketSyscalls.makeSocket(SOCK_STREAM)
        defer { UnixSocketSyscalls.close(abstract) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let name = Array("rchsa-\(getpid())".utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in name.enumerated() { raw[index + 1] = byte }   // sun_path[0] == 0: abstract
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + 1 + name.count)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(abstract, $0, length) } }
        #expect(bound == 0 && listen(abstract, 1) == 0)
        #expect(try UnixSocketSyscalls.listeningStreamSocketPath(abstract).get() == nil)

        let inet = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(inet) }
        #expect(try UnixSocketSyscalls.listeningStreamSocketPath(inet).get() == nil)

        var pipeEnds: [Int32] = [0, 0]
        #expect(pipe(&pipeEnds) == 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }
        #expect(throws: UnixSocketSyscalls.SystemCallError.self) { try UnixSocketSyscalls.listeningStreamSocketPath(pipeEnds[0]).get() }
    }

    /// A socket-activated agent that cannot start leaves the request queued in systemd's socket:
    /// the client gives up with a message instead of waiting for ever.
    @Test func aRequestNobodyAnswersEndsAtTheReplyTimeout() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rchsa-\(getpid())-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let listener = try UnixSocketSyscalls.makeSocket(SOCK_STREAM)
        defer { UnixSocketSyscalls.close(listener) }
        try UnixSocketSyscalls.bindAndListen(listener, path: AgentStateDirectory.socketPath(in: directory.path), mode: 0o600)
        let client = ControlClient(stateDirectory: directory.path, replyTimeout: .milliseconds(300))
        let started = ContinuousClock.now
        do {
            _ = try client.send(.list)
            Issue.record("a reply came from a socket nobody accepts on")
        } catch let failure as CommandFailure {
            #expect(failure.message.contains("did not answer within 0.3 seconds"), "\(failure.message)")
            #expect(failure.exitCode == .failure)
        }
        #expect(ContinuousClock.now - started < .seconds(10))
    }
}
