import Foundation
import Testing
import TestSupport

/// systemd's tool that binds a socket and execs a program on the first connection.
let socketActivator = "/usr/bin/systemd-socket-activate"

/// Socket activation as a `.socket` unit does it: `systemd-socket-activate` (systemd's own
/// tool, the same code path as PID 1) binds STATE/agent.sock and starts the agent on the first
/// connection with the listening socket as descriptor 3, `LISTEN_FDS=1` and `LISTEN_PID`. The
/// first `queue list` is what starts the agent, and is answered by it; the socket file outlives
/// the agent (systemd owns it). Runs without root.
@Suite("Agent socket activation", .serialized,
       .enabled(if: FileManager.default.isExecutableFile(atPath: socketActivator),
                "systemd-socket-activate is not installed (Debian package systemd; scripts/setup.sh installs it)"))
struct AgentSocketActivationTests {
    static let activator = socketActivator

    /// Runs the activator under a small Python parent that stays the test's child, starts it
    /// with no signals blocked (as systemd would), forwards SIGTERM and exits with the agent's
    /// status. Foundation's `Process` learns that a child ended when the child's copy of a socket
    /// it passes down is closed, and the activator closes every descriptor it does not pass on
    /// before it execs the agent: without a parent in between, `Process` waits for the running
    /// agent in a blocking waitpid and stops reaping every other child of the test. (A shell
    /// would not do: it inherits the dispatch thread's blocked signals, SIGCHLD among them, and
    /// its `wait` never returns.)
    static func activating(_ arguments: [String]) -> [String] {
        let script = """
            import signal, subprocess, sys
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            child = subprocess.Popen(sys.argv[1:])
            signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
            status = child.wait()
            sys.exit(status if status >= 0 else 128 - status)
            """
        return ["python3", "-c", script, activator] + arguments
    }

    @Test func theFirstConnectionStartsTheAgentOnThePassedSocket() throws {
        let directory = try DownloadFixtures.Directory("activation")
        let state = directory.file("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let socket = state.appendingPathComponent("agent.sock").path
        let agent = try AgentProcess(stateDirectory: state, waitUntilListening: false, prefix: Self.activating(["-l", socket]))
        #expect(DownloadFixtures.waitSync(timeout: .seconds(20)) { FileManager.default.fileExists(atPath: socket) },
                "the activator did not bind \(socket): \(agent.standardError)")
        #expect(agent.output.isEmpty, "the agent ran before anything connected: \(agent.output)")

        let list = try agent.control(["queue", "list"])
        #expect(list.status == 0, "\(list)")
        let listening = agent.waitForLine { $0.contains(#""event":"listening""#) }
        #expect(listening?.contains(#""socket":"\#(socket)","activated":true"#) == true, "\(agent.output)")
        let status = try agent.control(["agent", "status"])
        #expect(status.status == 0 && status.standardOutput.contains(" on \(state.path), up since"), "\(status)")

        #expect(agent.terminate()?.status == 0, "\(agent.standardError)")
        var info = stat()
        #expect(lstat(socket, &info) == 0 && (info.st_mode & S_IFMT) == S_IFSOCK, "the passed socket's file was removed")
    }

    @Test func aPassedSocketTheAgentCannotServeIsRefusedWithTheReason() throws {
        let directory = try DownloadFixtures.Directory("activation")
        let state = directory.file("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let socket = state.appendingPathComponent("agent.sock").path
        let agent = try AgentProcess(stateDirectory: state, waitUntilListening: false,
                                     prefix: Self.activating(["--datagram", "-l", socket]))
        #expect(DownloadFixtures.waitSync(timeout: .seconds(20)) { FileManager.default.fileExists(atPath: socket) })
        // A datagram to the activator's socket starts the agent, which must refuse it (exit 78).
        #expect(sendDatagram(to: socket), "could not send a datagram to \(socket)")
        let exited = DownloadFixtures.waitSync(timeout: .seconds(20)) { !agent.process.isRunning }
        #expect(exited && agent.process.terminationStatus == 78, "\(agent.standardError) \(agent.output)")
        #expect(agent.standardError.contains("not a listening Unix stream socket"), "\(agent.standardError)")
    }

    /// Sends one empty datagram to the Unix socket at `path`.
    func sendDatagram(to path: String) -> Bool {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() where index < raw.count - 1 { raw[index] = byte }
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(descriptor, "x", 1, 0, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 1
            }
        }
    }
}
