import Foundation
import Glibc
import Testing
import TestSupport

/// Upload jobs of the agent (`queue add --upload FILE URL`) against upload_server.py (IETF draft,
/// reading at a set pace) and aiohttp-tus on 127.0.0.1, the agent following a namespace's path:
/// the job outlives the command, survives a SIGKILLed agent (continued from the server's offset,
/// the file sent once), shows in `queue list`, events and metrics, and refuses what the caller
/// could not read.
@Suite("Agent upload jobs", .serialized, .needsRoot,
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct AgentUploadJobTests {
    /// A scratch state directory and a file of `count` random bytes in it.
    static func setUp(count: Int, seed: UInt64) throws -> (ScratchDirectory, URL, Data) {
        let directory = try ScratchDirectory("agent-upload", permissions: 0o700)
        let content = DownloadFixtures.randomData(count: count, seed: seed)
        let file = directory.url("storm-\(seed).jpg")
        try content.write(to: file)
        return (directory, file, content)
    }

    /// Waits until the server has stored `count` bytes of the job's upload (it writes as it
    /// reads; its counters only change once a request ends); the upload's resource URL.
    static func waitUntilStored(_ count: Int, by server: UploadTestServer, of agent: AgentProcess) -> URL? {
        guard agent.waitForLine(timeout: .seconds(20), { $0.contains(#""type":"upload","event":"created""#) }) != nil,
              let text = uploadLines(agent, "created").first?["uploadURL"] as? String, let url = URL(string: text) else { return nil }
        let path = server.directory.url(url.lastPathComponent).path
        let stored = waitUntilBlocking(deadline: .now + .seconds(30)) {
            ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0) >= count
        }
        return stored ? url : nil
    }

    static func uploadLines(_ agent: AgentProcess, _ event: String) -> [[String: Any]] {
        agent.events.filter { $0["type"] as? String == "upload" && $0["event"] as? String == event }
    }

    @Test func aJobOutlivesAKilledAgentAndTheServerGetsTheFileOnce() throws {
        let namespace = try ConnectedNamespace()
        // 3 s of upload: a test starved by a loaded machine still kills the agent in the middle.
        let server = try UploadTestServer(bytesPerSecond: 4 << 20)
        defer { server.stop() }
        let (directory, file, content) = try Self.setUp(count: 12 << 20, seed: 2801)
        let state = directory.url("state")
        var agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let added = try agent.control(["queue", "add", "--upload", file.path, server.url("ietf/").absoluteString])
        #expect(added.status == 0, "\(added)")
        #expect(added.standardOutput.contains(file.path), "\(added)")
        // The command is gone; the agent sends. Killed a third of the way through:
        let created = try #require(Self.waitUntilStored(4 << 20, by: server, of: agent), "\(agent.output)")
        _ = agent.terminate(SIGKILL)
        let record = try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("uploads").path)
        #expect(record.filter { $0.hasSuffix(".json") }.count == 1, "the job's record is on disk: \(record)")

        agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""type":"upload","event":"completed""#) } != nil,
                "\(agent.output)\n\(agent.standardError)")
        let restored = try #require(Self.uploadLines(agent, "restored").first)
        #expect(restored["file"] as? String == file.path)
        let resumed = try #require(Self.uploadLines(agent, "resumed").first?["offset"] as? Int, "\(agent.output)")
        #expect(resumed >= 4 << 20, "continued from the server's offset, not from zero")
        let stored = server.stored(created.lastPathComponent)
        #expect(stored == content, "the server's file is the file")
        let read = try server.bodyBytesRead()
        print("upload job through an agent SIGKILL: continued from byte \(resumed) of \(content.count); the server read \(read - content.count) bytes twice")
        #expect(read - content.count <= 1 << 20, "the server read \(read - content.count) bytes twice")

        let rows = try agent.list().filter { $0["direction"] as? String == "upload" }
        #expect(rows.count == 1)
        #expect(rows.first?["state"] as? String == "completed")
        #expect(rows.first?["bytesSent"] as? Int == content.count)
        for line in agent.output where line.contains(#""type":"upload""#) {
            #expect(EventSchemaValidator.problems(line).isEmpty, "\(EventSchemaValidator.problems(line))")
        }
        let metrics = try agent.control(["agent", "metrics"]).standardOutput
        #expect(metrics.contains(#"reachability_uploads{state="completed"} 1"#), "\(metrics)")
        #expect(!FileManager.default.fileExists(atPath: state.appendingPathComponent("uploads/\(restored["id"] as? String ?? "").json").path),
                "the record is removed once the server has the file")
    }

    @Test(.enabled(if: URLSessionResumableUploadTests.hasTus, "aiohttp-tus is not installed (scripts/setup.sh)"))
    func aTusJobCompletesWithoutItsCommand() throws {
        let namespace = try ConnectedNamespace()
        let tus = try URLSessionResumableUploadTests.TusServer()
        defer { tus.stop() }
        let (directory, file, content) = try Self.setUp(count: 3 << 20, seed: 2802)
        let agent = try AgentProcess(stateDirectory: directory.url("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let added = try agent.control(["queue", "add", "--upload", file.path, tus.url.absoluteString, "--protocol", "tus"])
        #expect(added.status == 0, "\(added)")
        let completed = agent.waitForLine(timeout: .seconds(30)) { $0.contains(#""type":"upload","event":"completed""#) }
        #expect(completed?.contains(#""protocol":"tus""#) == true, "\(agent.output)")
        #expect((try? Data(contentsOf: tus.directory.url(file.lastPathComponent))) == content, "the server's file is the file")
    }

    @Test func whatTheCallerCannotReadIsRefused() throws {
        let namespace = try ConnectedNamespace()
        let (directory, file, _) = try Self.setUp(count: 1 << 10, seed: 2803)
        let agent = try AgentProcess(stateDirectory: directory.url("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let target = "http://127.0.0.1:9/ietf/"
        let missing = try agent.control(["queue", "add", "--upload", directory.url("missing.jpg").path, target])
        #expect(missing.status == 66 && missing.standardError.contains("cannot open"), "\(missing)")
        let folder = try agent.control(["queue", "add", "--upload", directory.path, target])
        #expect(folder.status == 66 && folder.standardError.contains("is a directory"), "\(folder)")
        let fifo = directory.url("pipe").path
        #expect(mkfifo(fifo, 0o644) == 0)
        let pipe = try agent.control(["queue", "add", "--upload", fifo, target])
        #expect(pipe.status == 66 && pipe.standardError.contains("only regular files"), "\(pipe)")
        // Root's file, 0600, in a directory others may enter: nobody cannot open it, so nothing
        // reaches the agent (which would read it as its own user).
        let shared = try ScratchDirectory("agent-upload-shared", permissions: 0o755)
        let secret = shared.url("secret.jpg")
        try Data("root's".utf8).write(to: secret)
        #expect(chmod(secret.path, 0o600) == 0)
        let refused = try BuiltProducts.run("reachability", ["queue", "add", "--upload", secret.path, target,
                                                             "--state-dir", directory.url("state").path],
                                            prefix: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        #expect(refused.status == 66, "\(refused)")
        #expect(refused.standardError.lowercased().contains("permission denied") && refused.standardError.contains("only files you can read"),
                "\(refused)")
        // Download-only options are a usage error with --upload.
        let mixed = try agent.control(["queue", "add", "--upload", file.path, target, "--sha256", String(repeating: "0", count: 64)])
        #expect(mixed.status == 64, "\(mixed)")
        #expect(try agent.list().isEmpty, "nothing was queued")
    }

    @Test func aFileChangedWhileItsJobIsPausedEndsTheJob() throws {
        let namespace = try ConnectedNamespace()
        let server = try UploadTestServer(bytesPerSecond: 4 << 20)
        defer { server.stop() }
        let (directory, file, _) = try Self.setUp(count: 8 << 20, seed: 2804)
        let agent = try AgentProcess(stateDirectory: directory.url("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let added = try agent.control(["queue", "add", "--upload", file.path, server.url("ietf/").absoluteString])
        let id = try #require(added.standardOutput.split(separator: " ").first.map(String.init), "\(added)")
        #expect(Self.waitUntilStored(1 << 20, by: server, of: agent) != nil, "\(agent.output)")
        let paused = try agent.control(["queue", "pause", id])
        #expect(paused.status == 0 && paused.standardOutput.contains("paused"), "\(paused)")
        let handle = try FileHandle(forWritingTo: file)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("more".utf8))
        try handle.close()
        let resumed = try agent.control(["queue", "resume", id])
        #expect(resumed.status == 0, "\(resumed)")
        let failed = agent.waitForLine(timeout: .seconds(20)) { $0.contains(#""type":"upload","event":"failed""#) }
        #expect(failed?.contains("changed") == true, "\(agent.output)")
        #expect(try agent.list().first?["state"] as? String == "failed")
    }
}
