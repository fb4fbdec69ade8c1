import Foundation
import Glibc
import LinuxSystem
@testable import ReachabilityAgent
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
        (["LISTEN_PID": "42", "LISTEN_FDS": "65"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "+1"], nil),
        (["LISTEN_PID": "+42", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "1e16"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "9e18"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "1e300"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "inf"], nil),
        (["LISTEN_PID": "42", "LISTEN_FDS": "nan"], nil),
        (["LISTEN_PID": "1e16", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "9e18", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "9223372036854775807", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "nan", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "inf", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "0", "LISTEN_FDS": "1"], nil),
        (["LISTEN_PID": "-1", "LISTEN_FDS": "1"], nil),
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

        let listener = try FileDescriptor.unixSocket()
        defer { listener.close() }
        try listener.bindAndListen(unixPath: path, mode: 0o600)
        #expect(try listener.listeningUnixStreamPath() == path)

        let unlistened = try FileDescriptor.unixSocket()
        defer { unlistened.close() }
        #expect(try unlistened.listeningUnixStreamPath() == nil)

        let datagram = try FileDescriptor.unixSocket(datagrams: true)
        defer { datagram.close() }
        #expect(try datagram.listeningUnixStreamPath() == nil)

        let abstract = try FileDescriptor.unixSocket()
        defer { abstract.close() }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let name = Array("rchsa-\(getpid())".utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in name.enumerated() { raw[index + 1] = byte }   // sun_path[0] == 0: abstract
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + 1 + name.count)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(abstract.rawValue, $0, length) } }
        #expect(bound == 0 && listen(abstract.rawValue, 1) == 0)
        #expect(try abstract.listeningUnixStreamPath() == nil)

        let inet = try FileDescriptor.tcpSocket(.ipv4, nonBlocking: false)
        defer { inet.close() }
        #expect(try inet.listeningUnixStreamPath() == nil)

        var pipeEnds: [Int32] = [0, 0]
        #expect(pipe(&pipeEnds) == 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }
        #expect(throws: Errno.self) { try FileDescriptor(rawValue: pipeEnds[0]).listeningUnixStreamPath() }
    }
}
