import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// The agent against hostile requests and hostile peers: names from URLs that climb out of the
/// files directory or carry control characters, -o outside the allowed directories, -o on an
/// existing file, a request dripped a byte at a time, and a flood of connections from the
/// agent's own user. Needs root (namespaces, setpriv).
@Suite("Agent under attack", .serialized, .needsRoot,
       .needsNginx)
struct AgentAttackerTests: DownloadScenarios {

    static let content = F.randomData(count: 256 << 10, seed: 3)

    func completed(_ agent: AgentProcess, count: Int = 1) -> Bool {
        agent.waitForLines(count, timeout: .seconds(30)) { $0.contains(#""type":"download","event":"completed""#) }
    }

    @Test func namesFromURLsStayInTheFilesDirectory() throws {
        let namespace = try ConnectedNamespace()
        // Answers every path (nginx itself refuses paths that climb above its root).
        let server = try DownloadTestHTTPServer { request, _ in .honest(request, content: Self.content, etag: "\"n\"") }
        let directory = try F.Directory("agent")
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        let base = "http://127.0.0.1:\(server.port)/"
        let climbing = try agent.control(["queue", "add", base + "..%2F..%2F..%2Fx"])
        #expect(climbing.status == 0, "\(climbing)")
        let controls = try agent.control(["queue", "add", base + "a%0Ab%1Bc"])
        #expect(controls.status == 0, "\(controls)")
        #expect(completed(agent, count: 2), "\(agent.output)")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.file("state/files").path).sorted()
        #expect(files == ["a_b_c", "x"], "\(files)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted() == ["state"])
        _ = agent.terminate()
    }

    @Test func outputOutsideTheAllowedDirectoriesAndExistingFilesAreRefused() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx()
        try nginx.serve(Self.content, at: "f.bin")
        let directory = try F.Directory("agent")
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        let url = nginx.url("f.bin").absoluteString
        let outside = try agent.control(["queue", "add", url, "-o", directory.file("elsewhere.bin").path])
        #expect(outside.status == 1)
        #expect(outside.standardError.contains("outside the agent's download directories"), "\(outside)")
        let climbing = try agent.control(["queue", "add", url, "-o", directory.file("state/files/../../escape.bin").path])
        #expect(climbing.status == 1, "\(climbing)")

        let existing = directory.file("state/files/keep.bin")
        try Data("mine".utf8).write(to: existing)
        let refused = try agent.control(["queue", "add", url, "-o", existing.path])
        #expect(refused.status == 1)
        #expect(refused.standardError.contains("already exists; give --replace"), "\(refused)")
        #expect(FileManager.default.contents(atPath: existing.path) == Data("mine".utf8))
        let replaced = try agent.control(["queue", "add", url, "-o", existing.path, "--replace"])
        #expect(replaced.status == 0, "\(replaced)")
        #expect(completed(agent), "\(agent.output)")
        #expect(F.sha256(fileAt: existing) == F.sha256(Self.content))
        #expect(!FileManager.default.fileExists(atPath: directory.file("elsewhere.bin").path))
        #expect(!FileManager.default.fileExists(atPath: directory.file("escape.bin").path))
        _ = agent.terminate()
    }

    /// The system unit's layout: with DynamicUser= systemd keeps the state in
    /// /var/lib/private/reachability and makes /var/lib/reachability a relative link to it. The
    /// agent is given the link; `queue add -o` through either spelling lands in the real directory.
    @Test func theStateDirectoryIsReachedThroughEitherSpelling() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx()
        try nginx.serve(Self.content, at: "f.bin")
        let directory = try F.Directory("agent")
        let real = directory.file("private/state")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let link = directory.file("state")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "private/state")
        let agent = try AgentProcess(stateDirectory: link, arguments: ["--netns", namespace.name])
        let url = nginx.url("f.bin").absoluteString
        let throughLink = try agent.control(["queue", "add", url, "-o", link.path + "/files/one.bin"])
        #expect(throughLink.status == 0, "\(throughLink)")
        #expect(throughLink.standardOutput.contains(real.path + "/files/one.bin"), "\(throughLink)")
        let direct = try agent.control(["queue", "add", url, "-o", real.path + "/files/two.bin"])
        #expect(direct.status == 0, "\(direct)")
        #expect(completed(agent, count: 2), "\(agent.output)")
        for name in ["one.bin", "two.bin"] {
            #expect(F.sha256(fileAt: real.appendingPathComponent("files/" + name)) == F.sha256(Self.content))
        }
        let outside = try agent.control(["queue", "add", url, "-o", directory.file("one.bin").path])
        #expect(outside.status == 1, "\(outside)")
        _ = agent.terminate()
    }

    /// One byte every 300 ms never completes a request: the connection is answered and closed
    /// at the request deadline (1 s here) from the first byte, not kept alive by each byte.
    @Test func aRequestDrippedByteByByteIsCutAtItsDeadline() throws {
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("agent")
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name],
                                     environment: ["REACHABILITY_CONTROL_REQUEST_DEADLINE": "1"])
        let descriptor = try Self.connect(directory.file("state/agent.sock").path)
        defer { close(descriptor) }
        let started = ContinuousClock.now
        var reply = Data()
        var chunk = [UInt8](repeating: 0, count: 4096)
        var closed = false
        for byte in Array(#"{"version":1,"command":"status"}"#.utf8) where !closed {
            if send(descriptor, [byte], 1, Int32(MSG_NOSIGNAL)) < 0 { break }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 300) > 0 {
                let count = recv(descriptor, &chunk, chunk.count, 0)
                if count <= 0 { closed = true } else { reply.append(contentsOf: chunk[0..<count]) }
            }
        }
        let elapsed = ContinuousClock.now - started
        #expect(String(decoding: reply, as: UTF8.self).contains("not completed within"), "\(String(decoding: reply, as: UTF8.self))")
        #expect(elapsed < .seconds(5), "cut after \(elapsed)")
        #expect(try agent.control(["agent", "status"]).status == 0, "others are served meanwhile")
        _ = agent.terminate()
    }

    /// The agent runs as nobody; nobody opens 40 connections and holds them. Root (a reserved
    /// slot) is still served; the flooding program's share is capped, so nobody's other programs
    /// are served too.
    @Test func aConnectionFloodFromTheOwnerLeavesRootASlot() throws {
        let directory = try F.Directory("agent")
        chmod(directory.url.path, 0o755)
        let state = directory.file("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        chown(state.path, 65534, 65534)
        let nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        let agent = try AgentProcess(stateDirectory: state, prefix: nobody)
        let script = """
        import socket, sys, time
        held = []
        for _ in range(40):
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            held.append(s)
        print(len(held), flush=True)
        time.sleep(60)
        """
        let output = Pipe()
        let flood = try ChildProcess.start("python3", ["-c", script, state.appendingPathComponent("agent.sock").path], prefix: nobody,
                                           environment: ["PATH": "/usr/bin:/bin"], input: FileHandle.standardInput, output: output,
                                           error: FileHandle.standardError)
        defer { kill(flood.processIdentifier, SIGKILL); flood.waitUntilExit() }
        let ready = output.fileHandleForReading.availableData
        #expect(String(decoding: ready, as: UTF8.self).hasPrefix("40"))
        // Root keeps its reserved slots.
        let root = try agent.control(["agent", "status"])
        #expect(root.status == 0, "\(root)")
        // One program cannot use up its user's share (issue 29): the flood holds 8 slots, the
        // owner's other programs are still served.
        let owner = try agent.control(["agent", "status"], prefix: nobody)
        #expect(owner.status == 0, "one program holds at most 8 of its user's slots (issue 29): \(owner)")
        _ = agent.terminate()
    }

    static func connect(_ path: String) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { close(descriptor); throw POSIXError(.ECONNREFUSED) }
        return descriptor
    }

    /// Records are input (issue 21): a record edited to put its file outside `STATE/files` and
    /// every `download-dir=` is not restored, is moved aside, and nothing is written there.
    @Test func aRecordPointingOutsideTheAllowedDirectoriesIsNotRestored() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx(slowRate: "1m")
        let big = F.randomData(count: 8 << 20, seed: 2151)
        try nginx.serve(big, at: "slow/big.bin")
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        var first: AgentProcess? = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(try first!.control(["queue", "add", nginx.url("slow/big.bin").absoluteString]).status == 0)
        #expect(F.waitSync { ((try? first!.list())?.first?["bytesReceived"] as? Int ?? 0) > 0 })
        #expect(first!.terminate(SIGTERM)?.status == 0)
        first = nil
        let records = state.appendingPathComponent("records")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: records.path).first { $0.hasSuffix(".json") })
        let recordURL = records.appendingPathComponent(name)
        let outside = directory.file("elsewhere/big.bin")
        try FileManager.default.createDirectory(at: outside.deletingLastPathComponent(), withIntermediateDirectories: true)
        // JSONEncoder may write "/" as "\/".
        let inside = state.appendingPathComponent("files/big.bin").path
        let text = try String(contentsOf: recordURL, encoding: .utf8)
            .replacingOccurrences(of: inside, with: outside.path)
            .replacingOccurrences(of: inside.replacingOccurrences(of: "/", with: "\\/"),
                                  with: outside.path.replacingOccurrences(of: "/", with: "\\/"))
        #expect(text.contains(outside.path) || text.contains(outside.path.replacingOccurrences(of: "/", with: "\\/")), "\(text)")
        try text.write(to: recordURL, atomically: true, encoding: .utf8)

        let second = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        defer { _ = second.terminate() }
        #expect(!second.output.contains { $0.contains(#""event":"restored""#) }, "\(second.output)")
        #expect(try second.list().isEmpty)
        #expect(FileManager.default.fileExists(atPath: recordURL.path + ".bad"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside.deletingLastPathComponent().path).isEmpty,
                "nothing written outside")
    }
}
