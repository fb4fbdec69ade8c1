import Foundation
import LinuxSystem
import ReachabilityBase
import Synchronization
import Testing
@testable import ReachabilityAgent
import TestSupport

/// The typed client against a real control server on a Unix socket (the handler answers from
/// a script, so no download agent runs): every request kind, the agent's refusals, and the
/// failures a program must be able to tell apart.
@Suite("agent client")
struct AgentClientTests {

    static let sample = AgentDownload(id: "0f0e0d0c-0000-4000-8000-000000000001", url: "http://192.0.2.9/a.iso",
                                      destination: "/srv/files/a.iso", state: .queued, bytesReceived: 0, totalBytes: nil,
                                      bytesPerSecond: 0)

    /// The commands a server handled.
    final class Seen: Sendable {
        let commands = Mutex<[ControlCommand]>([])
    }

    /// A server answering like an agent whose one download is `sample`.
    static func server(in directory: ScratchDirectory, seen: Seen = Seen()) throws -> ControlServer {
        try ControlServer(path: AgentStateDirectory.socketPath(in: directory.path), handler: { command, id, peer in
            seen.commands.withLock { $0.append(command) }
            switch command {
            case .add(let url, _, _, _, _, _):
                var download = sample
                download.url = url.absoluteString
                return .success(id: id, download: download)
            case .list:
                return .success(id: id, downloads: [sample])
            case .pause(let text) where sample.id.hasPrefix(text):
                var download = sample
                download.state = .paused
                return .success(id: id, download: download)
            case .pause(let text), .resume(let text), .cancel(let text):
                return .failure(.notFound(text), id: id)
            case .setURL(let text, let url) where sample.id.hasPrefix(text):
                var download = sample
                download.url = url.absoluteString
                return .success(id: id, download: download)
            case .setURL(let text, _):
                return .failure(.notFound(text), id: id)
            case .status:
                return .success(id: id, status: AgentStatus(
                    pid: 7, stateDirectory: "/s", startedAt: "2026-12-01T00:00:00.000Z", maximumConcurrentDownloads: 4,
                    allowsExpensive: true, pathStatus: "satisfied", connection: "wired", interface: "eth0", isExpensive: false,
                    counts: ["queued": 1], summary: "1 queued"))
            case .metrics(let format):
                return .success(id: id, metrics: "# \(format.rawValue)\n")
            case .addUpload(let url, let request):
                // The open file travels with the line (SCM_RIGHTS): answer with its size as seen here.
                guard let file = peer.takeDescriptor() else { return .failure(.invalidArgument("no file passed"), id: id) }
                defer { file.close() }
                var download = sample
                (download.url, download.destination, download.direction) = (url.absoluteString, request.file, "upload")
                download.totalBytes = try? file.status().size
                return .success(id: id, download: download)
            case .attach, .createTask, .updateTask, .taskAction, .acknowledge, .invalidate, .limit:
                return .failure(.unknownCommand(command.name.rawValue), id: id)
            }
        }, observer: { _ in })
    }

    /// A private directory with `server` listening in it, and what the server was asked.
    static func serving() throws -> (ScratchDirectory, Seen, ControlServer) {
        let directory = try ScratchDirectory("ac", permissions: 0o700)
        let seen = Seen()
        return (directory, seen, try server(in: directory, seen: seen))
    }

    @Test func everyRequestKindRoundTrips() async throws {
        let (directory, seen, server) = try Self.serving()
        defer { server.stop() }
        let client = AgentClient(stateDirectory: directory.path)
        #expect(client.socketPath == directory.path + "/agent.sock")

        let added = try await client.add(URL(string: "http://192.0.2.9/b.iso")!, sha256: String(repeating: "A", count: 64))
        #expect(added.url == "http://192.0.2.9/b.iso" && added.state == .queued)
        #expect(try await client.downloads() == [Self.sample])
        #expect(try await client.pause("0f0e").state == .paused)
        #expect(try await client.status().summary == "1 queued")
        #expect(try await client.metrics(format: .prometheus) == "# prometheus\n")
        #expect(seen.commands.withLock { $0 }.first == .add(url: URL(string: "http://192.0.2.9/b.iso")!, output: nil,
                                                     sha256: String(repeating: "a", count: 64)))
        // The client key travels with the add (issue 29).
        _ = try await client.add(URL(string: "http://192.0.2.9/b.iso")!, clientKey: "job-1")
        #expect(seen.commands.withLock { $0 }.last == .add(url: URL(string: "http://192.0.2.9/b.iso")!, output: nil,
                                                    sha256: nil, clientKey: "job-1"))
    }

    /// `queue set-url`'s request (issue 34): the ID and the new URL travel, the reply is the job.
    @Test func setURLSendsTheIDAndTheNewURL() async throws {
        let (directory, seen, server) = try Self.serving()
        defer { server.stop() }
        let client = AgentClient(stateDirectory: directory.path)
        let renewed = URL(string: "http://192.0.2.9/a.iso?token=new")!
        #expect(try await client.setURL("0f0e", to: renewed).url == renewed.absoluteString)
        #expect(seen.commands.withLock { $0 }.last == .setURL("0f0e", url: renewed))
        let error = await #expect(throws: AgentClientError.rejected) { try await client.setURL("ffff", to: renewed) }
        #expect(error?.agentCode == .notFound)
    }

    /// The control server's threads run at their own nice value (issue 29: a `status` under
    /// load waited for a CPU beside the downloads' threads): a request answered at once runs at
    /// it, on the connection's thread; work handed to the pool does not take it along.
    @Test func theControlThreadsRunAtTheirOwnNiceValue() async throws {
        let directory = try ScratchDirectory("ac", permissions: 0o700)
        // Below 0 needs root (CAP_SYS_NICE); above, any user may.
        let nice: Int32 = CurrentProcess.effectiveUserID == 0 ? -5 : 5
        let processNice = CurrentProcess.currentThreadNice
        let seen = Mutex<(immediate: Int32?, handler: Int32?, priority: [Int32])>((nil, nil, []))
        let server = try ControlServer(path: AgentStateDirectory.socketPath(in: directory.path), threadNice: nice, immediate: { command, id, _ in
            guard case .status = command else { return nil }
            seen.withLock { $0.immediate = CurrentProcess.currentThreadNice }
            return .success(id: id, status: AgentStatus(
                pid: 7, stateDirectory: "/s", startedAt: "2026-12-01T00:00:00.000Z", maximumConcurrentDownloads: 4,
                allowsExpensive: true, pathStatus: "satisfied", connection: "wired", interface: "eth0", isExpensive: false,
                counts: [:], summary: "idle"))
        }, handler: { _, id, _ in
            seen.withLock { $0.handler = CurrentProcess.currentThreadNice }
            return .success(id: id, downloads: [])
        }, observer: { event in
            if case .threadPriority(let value, nil) = event { seen.withLock { $0.priority.append(value) } }
        })
        defer { server.stop() }
        let client = AgentClient(stateDirectory: directory.path)
        _ = try await client.status()
        _ = try await client.downloads()
        let observed = seen.withLock { $0 }
        #expect(observed.priority == [nice], "the controlPriority event")
        #expect(observed.immediate == nice, "a status is answered on a thread at the control server's nice value")
        #expect(observed.handler == processNice, "the pool's threads keep the process's")
    }

    @Test func refusalsCarryTheAgentsReason() async throws {
        let directory = try ScratchDirectory("ac", permissions: 0o700)
        let server = try Self.server(in: directory)
        defer { server.stop() }
        let error = await #expect(throws: AgentClientError.rejected) {
            try await AgentClient(stateDirectory: directory.path).cancel("ffff")
        }
        #expect(error?.agentCode == .notFound)
        #expect(error?.message == "no download with ID 'ffff'")
        // Refused before it is sent: a digest that is not one.
        let invalid = await #expect(throws: AgentClientError.rejected) {
            try await AgentClient(stateDirectory: directory.path).add(URL(string: "http://192.0.2.9/x")!, sha256: "abc")
        }
        #expect(invalid?.agentCode == .invalidArgument)
    }

    @Test func noAgentIsNotRunning() async throws {
        let directory = try ScratchDirectory("ac", permissions: 0o700)
        let error = await #expect(throws: AgentClientError.notRunning) {
            try await AgentClient(stateDirectory: directory.path).downloads()
        }
        #expect(error?.description == "no agent is running on \(directory.path) (start one with 'reachability agent')")
    }

    /// An agent that accepts and never answers cannot hold a program for ever.
    @Test func aSilentAgentIsNoReplyWithinTheTimeout() async throws {
        let directory = try ScratchDirectory("ac", permissions: 0o700)
        let listener = try FileDescriptor.unixSocket()
        defer { listener.close() }
        try listener.bindAndListen(unixPath: AgentStateDirectory.socketPath(in: directory.path), mode: 0o600)
        var client = AgentClient(stateDirectory: directory.path)
        client.timeout = .milliseconds(200)
        let started = ContinuousClock.now
        let error = await #expect(throws: AgentClientError.noReply) { try await client.status() }
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(error?.description == "the agent on \(directory.path) did not answer within 0.2 s; if systemd starts it from a socket unit, see 'systemctl --user status reachability-agent' (or 'systemctl status' for the system one)")
    }

    /// A fake agent that accepts one connection and hands it to `behave` on a thread.
    static func fakeAgent(in directory: ScratchDirectory, _ behave: @escaping @Sendable (FileDescriptor) -> Void) throws -> FileDescriptor {
        let listener = try FileDescriptor.unixSocket()
        try listener.bindAndListen(unixPath: AgentStateDirectory.socketPath(in: directory.path), mode: 0o600)
        SystemThread.detach(name: "fake-agent") {
            guard let connection = try? listener.accept() else { return }
            behave(connection)
            connection.close()
        }
        return listener
    }

    /// A peer dripping a byte at a time cannot hold a program past the timeout (it is one
    /// deadline, not one per read), and one that never ends its line cannot make it hold more
    /// than the largest reply.
    @Test func aDrippingOrEndlessReplyIsNoReply() async throws {
        let directory = try ScratchDirectory("ad", permissions: 0o700)
        let dripping = try Self.fakeAgent(in: directory) { connection in
            // 20 s of dripping: a deadline restarted per read would wait for all of it.
            for _ in 0..<1000 {
                guard (try? connection.sendAll([UInt8(ascii: "{")])) != nil else { return }
                CurrentProcess.sleep(milliseconds: 20)
            }
        }
        var client = AgentClient(stateDirectory: directory.path)
        client.timeout = .milliseconds(300)
        let started = ContinuousClock.now
        await #expect(throws: AgentClientError.noReply) { try await client.status() }
        #expect(ContinuousClock.now - started < .seconds(10))
        dripping.close()

        let other = try ScratchDirectory("ae", permissions: 0o700)
        let endless = try Self.fakeAgent(in: other) { connection in
            let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
            for _ in 0..<40 { guard (try? connection.sendAll(chunk)) != nil else { return } }
        }
        defer { endless.close() }
        let error = await #expect(throws: AgentClientError.noReply) { try await AgentClient(stateDirectory: other.path).downloads() }
        #expect(error?.description.contains("longer than") == true, "\(String(describing: error))")
    }

    /// An agent that stopped accepting (its backlog full) cannot hold the connect past the timeout.
    @Test(.timeLimit(.minutes(1))) func aWedgedAgentCannotHoldTheConnect() async throws {
        let directory = try ScratchDirectory("aw", permissions: 0o700)
        let path = AgentStateDirectory.socketPath(in: directory.path)
        let listener = try FileDescriptor.unixSocket()
        defer { listener.close() }
        try listener.bindAndListen(unixPath: path, mode: 0o600, backlog: 0)
        var fillers: [FileDescriptor] = []
        defer { for filler in fillers { filler.close() } }
        for _ in 0..<8 {
            let filler = try FileDescriptor.unixSocket()
            try filler.setSendTimeout(milliseconds: 50)
            fillers.append(filler)
            if (try? filler.connect(to: SocketAddress(unixPath: path))) == nil { break }
        }
        var client = AgentClient(stateDirectory: directory.path)
        client.timeout = .milliseconds(200)
        let error = await #expect(throws: AgentClientError.noReply) { try await client.status() }
        #expect(error?.description == "the agent on \(directory.path) did not accept the connection within 0.2 s")
    }

    @Test func theDefaultStateDirectoryIsTheAgentsOne() throws {
        #expect(try AgentClient(environment: ["REACHABILITY_STATE_DIR": "/srv/agent"]).stateDirectory == "/srv/agent")
        #expect(throws: AgentClientError.noStateDirectory) {
            try AgentClient(environment: ["REACHABILITY_STATE_DIR": "relative/dir"])
        }
    }

    @Test func errorsCompareByKind() {
        #expect(AgentClientError.notRunning != .noReply)
        #expect(AgentClientError.rejected.agentCode == nil)
        #expect(Set([AgentClientError.notRunning, .notRunning]).count == 1)
    }
}
