import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// `reachability agent` and its control commands, as separate processes against nginx on
/// 127.0.0.1. The agent watches a namespace of its own (`--netns`) with a satisfied path, so
/// the tests do not depend on the host's routing. Needs root (namespaces, setpriv).
@Suite("Agent", .serialized, .needsRoot,
       .needsNginx)
struct AgentTests: DownloadScenarios {

    /// nginx serving `count` random files under /slow/ (rate limited so transfers are in flight).
    static func serveFiles(_ nginx: DownloadTestNginx, count: Int, size: Int) throws -> [(path: String, sha: String)] {
        try (0..<count).map { index in
            let data = F.randomData(count: size, seed: UInt64(index + 11))
            try nginx.serve(data, at: "slow/file\(index).bin")
            return ("slow/file\(index).bin", F.sha256(data))
        }
    }

    /// `queue add -o` must name a directory the agent's owner allowed (issue 7): a
    /// `download-dir=` line for the test directory in `STATE/agent.conf`.
    static func allowDownloads(into directory: F.Directory) throws {
        try FileManager.default.createDirectory(at: directory.file("state"), withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        try "download-dir=\(directory.url.path)\n".write(to: directory.file("state/agent.conf"), atomically: true, encoding: .utf8)
    }

    static func completedCount(_ agent: AgentProcess) -> Int {
        agent.output.filter { $0.contains(#""type":"download","event":"completed""#) }.count
    }

    @Test func restartWithThreePendingDownloadsCompletesThemAll() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx(slowRate: "2m")
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        let files = try Self.serveFiles(nginx, count: 3, size: 16 << 20)
        try Self.allowDownloads(into: directory)

        var first: AgentProcess? = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        for (index, file) in files.enumerated() {
            let result = try first!.control(["queue", "add", nginx.url(file.path).absoluteString,
                                             "-o", directory.file("out\(index).bin").path, "--sha256", file.sha])
            #expect(result.status == 0, "\(result)")
        }
        // All three transferring (bytes on disk) before the agent is stopped.
        #expect(first!.waitForLines(3) { $0.contains(#""type":"download","event":"started""#) })
        #expect(F.waitSync { (try? first!.list())?.allSatisfy { ($0["bytesReceived"] as? Int ?? 0) > 0 } == true })
        let stopped = try #require(first!.terminate(SIGTERM))
        #expect(stopped.status == 0)
        #expect(stopped.elapsed < .seconds(2), "SIGTERM must checkpoint and exit within 2 s")
        #expect(first!.output.contains { $0.contains(#""event":"stopped","checkpointed":true"#) })
        let stoppedOutput = first!.output
        first = nil
        let records = try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("records").path)
        #expect(records.filter { $0.hasSuffix(".json") }.count == 3, "\(records) \(stoppedOutput)")

        let second = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(second.output.filter { $0.contains(#""type":"download","event":"restored""#) }.count == 3)
        #expect(second.waitForLines(3, timeout: .seconds(60)) { $0.contains(#""type":"download","event":"completed""#) }, "\(second.output)")
        for (index, file) in files.enumerated() {
            #expect(F.sha256(fileAt: directory.file("out\(index).bin")) == file.sha)
        }
        #expect(second.output.filter { $0.contains(#""type":"download","event":"resumed""#) }.count == 3, "each restored download resumed from its record: \(second.output)")
        _ = second.terminate()
    }

    @Test func queueCommandsFromASecondProcess() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx(slowRate: "1m")
        let directory = try F.Directory("agent")
        let files = try Self.serveFiles(nginx, count: 2, size: 8 << 20)
        try Self.allowDownloads(into: directory)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])

        let added = try agent.control(["queue", "add", nginx.url(files[0].path).absoluteString, "-o", directory.file("a.bin").path,
                                       "--sha256", files[0].sha])
        #expect(added.status == 0, "\(added)")
        let id = String(added.standardOutput.prefix(8))
        let other = try agent.control(["queue", "add", nginx.url(files[1].path).absoluteString])
        #expect(other.status == 0, "\(other)")
        #expect(other.standardOutput.contains(directory.file("state").path + "/files/file1.bin"))
        let otherID = String(other.standardOutput.prefix(8))

        let list = try agent.control(["queue", "list"])
        #expect(list.status == 0)
        #expect(list.standardOutput.split(separator: "\n").count == 2)
        let json = try agent.list()
        #expect(json.count == 2)
        #expect(json.first?["destination"] as? String == directory.file("a.bin").path)

        let paused = try agent.control(["queue", "pause", id])
        #expect(paused.status == 0, "\(paused)")
        #expect(paused.standardOutput.contains(" paused "))
        #expect(agent.waitForLine { $0.contains(#""type":"download","event":"paused""#) } != nil)
        let status = try agent.control(["agent", "status"])
        #expect(status.status == 0)
        #expect(status.standardOutput.contains("path: reachable via wired (uplink)"), "\(status)")
        #expect(status.standardOutput.contains("1 paused"), "\(status)")

        let cancelled = try agent.control(["queue", "cancel", otherID])
        #expect(cancelled.status == 0 && cancelled.standardOutput.contains(" failed "), "\(cancelled)")
        let resumed = try agent.control(["queue", "resume", id])
        #expect(resumed.status == 0, "\(resumed)")
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""type":"download","event":"completed""#) } != nil)
        #expect(F.sha256(fileAt: directory.file("a.bin")) == files[0].sha)

        let unknown = try agent.control(["queue", "pause", "ffffffff"])
        #expect(unknown.status == 1)
        #expect(unknown.standardError == "Error: no download with ID 'ffffffff'\n")
        let usage = try agent.control(["queue", "add", "ftp://example.org/x"])
        #expect(usage.status == 64)
        #expect(agent.output.contains { $0.contains(#""type":"control","event":"request","command":"pause""#) })
        #expect(agent.output.contains { $0.contains(#""type":"control","event":"request","command":"status""#) && $0.contains(#""answeredInMicroseconds":"#) })
        _ = agent.terminate()
        // One schema for the agent's NDJSON and `download --json` (docs/events.md).
        let problems = agent.output.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
        let types: Set<String> = Set(agent.output.compactMap { line -> String? in
            let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
            return object?["type"] as? String
        })
        #expect(types.isSuperset(of: ["download", "path", "agent", "control"]), "\(types)")
    }

    @Test func sigkillMidTransferThenRestartCompletes() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx(slowRate: "4m")
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        let file = try Self.serveFiles(nginx, count: 1, size: 12 << 20)[0]
        try Self.allowDownloads(into: directory)
        var first: AgentProcess? = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(try first!.control(["queue", "add", nginx.url(file.path).absoluteString, "-o", directory.file("k.bin").path,
                                    "--sha256", file.sha]).status == 0)
        #expect(F.waitSync { ((try? first!.list())?.first?["bytesReceived"] as? Int ?? 0) > 2 << 20 })
        #expect(first!.terminate(SIGKILL) != nil)
        first = nil
        // The socket file is left behind and the lock released by the kernel: a new agent starts.
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("agent.sock").path))
        let second = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(second.waitForLine(timeout: .seconds(60)) { $0.contains(#""type":"download","event":"completed""#) } != nil, "\(second.output)")
        #expect(F.sha256(fileAt: directory.file("k.bin")) == file.sha)
        // The restored event reports what the block journal recovered (the transfer resumes
        // there), not the fsynced checkpoint before it (issue 21).
        let events = second.events.filter { $0["type"] as? String == "download" }
        let restored = events.first { $0["event"] as? String == "restored" }?["offset"] as? Int
        let resumed = events.first { $0["event"] as? String == "resumed" }?["offset"] as? Int
        #expect(restored != nil && restored == resumed && (restored ?? 0) > 0, "restored \(String(describing: restored)), resumed \(String(describing: resumed))")
        _ = second.terminate()
    }

    @Test func cancellingACompletedDownloadIsAnError() throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx()
        let directory = try F.Directory("agent")
        let file = try Self.serveFiles(nginx, count: 1, size: 64 << 10)[0]
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        #expect(try agent.control(["queue", "add", nginx.url(file.path).absoluteString]).status == 0)
        #expect(agent.waitForLine { $0.contains(#""type":"download","event":"completed""#) } != nil, "\(agent.output)")
        let id = try #require(try agent.list().first?["id"] as? String)
        let cancelled = try agent.control(["queue", "cancel", String(id.prefix(8))])
        #expect(cancelled.status == 1, "\(cancelled)")
        #expect(cancelled.standardError.contains("has already completed"), "\(cancelled)")
        #expect(F.sha256(fileAt: directory.file("state/files/file0.bin")) == file.sha, "the file is untouched")
        _ = agent.terminate()
    }

    /// A password in a queued URL is masked in every event, `queue list` (text and JSON), the
    /// add reply and the agent's log; the request still carries it.
    @Test func aPasswordInAQueuedURLIsNeverShown() throws {
        let namespace = try ConnectedNamespace()
        let content = F.randomData(count: 64 << 10, seed: 2141)
        let server = try DownloadTestHTTPServer { request, _ in .honest(request, content: content, etag: "\"p\"") }
        defer { server.stop() }
        let directory = try F.Directory("agent")
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        let added = try agent.control(["queue", "add", "http://bob:S3CRETPW@127.0.0.1:\(server.port)/p.bin"])
        #expect(added.status == 0 && !added.standardOutput.contains("S3CRETPW"), "\(added)")
        #expect(agent.waitForLine { $0.contains(#""type":"download","event":"completed""#) } != nil, "\(agent.output)")
        let text = try agent.control(["queue", "list"])
        let json = try agent.control(["queue", "list", "--json"])
        let metrics = try agent.control(["agent", "metrics"])
        for shown in [text.standardOutput, json.standardOutput, metrics.standardOutput, agent.output.joined(separator: "\n"),
                      agent.standardError] {
            #expect(!shown.contains("S3CRETPW"), "\(shown)")
        }
        #expect(text.standardOutput.contains("http://bob:***@127.0.0.1"), "\(text)")
        #expect(server.requests.first?.headers["authorization"] == "Basic " + Data("bob:S3CRETPW".utf8).base64EncodedString())
        _ = agent.terminate()
    }

    @Test func socketIsPrivateAndOtherUsersAreRefused() throws {
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        let agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        var info = stat()
        #expect(stat(state.appendingPathComponent("agent.sock").path, &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFSOCK)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(stat(state.path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o700)

        // The test directory is root's 0700 temporary directory; let nobody reach the state dir.
        chmod(directory.url.path, 0o755)
        let nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        let blocked = try agent.control(["agent", "status"], prefix: nobody)
        #expect(blocked.status == 77, "\(blocked)")
        #expect(blocked.standardError.contains("permission denied connecting to the agent"), "\(blocked)")

        // Loosen the file permissions: SO_PEERCRED still keeps other users out.
        chmod(state.path, 0o755)
        chmod(state.appendingPathComponent("agent.sock").path, 0o666)
        let refused = try agent.control(["agent", "status"], prefix: nobody)
        #expect(refused.status == 77, "\(refused)")
        #expect(refused.standardError == "Error: the agent refused the connection: uid 65534 may not control this agent (only its own user or root)\n")
        #expect(agent.waitForLine { $0.contains(#""event":"refused","uid":65534"#) } != nil)
        #expect(try agent.control(["agent", "status"]).status == 0, "root is still served")
        _ = agent.terminate()
    }

    @Test func secondAgentOnTheSameDirectoryIsRefused() throws {
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        let agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        let second = try BuiltProducts.run("reachability", ["agent", "--state-dir", state.path, "--netns", namespace.name])
        #expect(second.status == 1)
        #expect(second.standardError == "Error: another agent is already running on \(state.path) (pid \(agent.pid))\n")
        #expect(try agent.control(["agent", "status"]).status == 0, "the first agent is unaffected")
        _ = agent.terminate()
    }

    @Test func noAgentRunningIsAClearError() throws {
        let directory = try F.Directory("agent")
        let result = try BuiltProducts.run("reachability", ["queue", "list", "--state-dir", directory.url.path])
        #expect(result.status == 1)
        #expect(result.standardError == "Error: no agent is running on \(directory.url.path) (start one with 'reachability agent')\n")
    }

    @Test func malformedAndOversizedRequestsGetErrorReplies() throws {
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("agent")
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        let socketPath = directory.file("state").appendingPathComponent("agent.sock").path
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in socketPath.utf8.enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(connected == 0)
        var oversized = Data(#"{"version":1,"command":"list","pad":""#.utf8)
        // Past ControlProtocol.maximumRequestSize (12 MiB: room for an add's piece hashes).
        oversized.append(Data(repeating: UInt8(ascii: "x"), count: (12 << 20) + (100 << 10)))
        oversized.append(Data("\"}\n".utf8))
        let requests = [Data("this is not json\n".utf8), Data(#"{"version":9,"id":"v","command":"list"}"#.utf8 + [10]),
                        Data(#"{"version":1,"id":3,"command":"reboot"}"#.utf8 + [10]), oversized,
                        Data(#"{"version":1,"id":4,"command":"status"}"#.utf8 + [10])]
        for request in requests {
            _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        var received = Data()
        var chunk = [UInt8](repeating: 0, count: 65536)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        while received.split(separator: 10).count < 5 {
            let count = recv(descriptor, &chunk, chunk.count, 0)
            guard count > 0 else { break }
            received.append(contentsOf: chunk[0..<count])
        }
        let replies = received.split(separator: 10).compactMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
        try #require(replies.count == 5, "\(String(decoding: received, as: UTF8.self))")
        let codes = replies.prefix(4).map { ($0["error"] as? [String: Any])?["code"] as? String }
        #expect(codes == ["malformed", "unsupportedVersion", "unknownCommand", "tooLarge"])
        #expect(replies[1]["id"] as? String == "v")
        #expect(replies[2]["id"] as? Int == 3)
        #expect(replies.allSatisfy { $0["version"] as? Int == 1 })
        #expect(replies[4]["ok"] as? Bool == true && replies[4]["id"] as? Int == 4)
        #expect(agent.process.isRunning)
        #expect(try agent.control(["agent", "status"]).status == 0)
        _ = agent.terminate()
    }

    @Test func sighupReloadsAgentConfAndSystemdNotificationsArrive() throws {
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        // Play systemd: an abstract datagram socket named like NOTIFY_SOCKET=@name.
        let name = "reachability-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let listener = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw[0] = 0
            for (index, byte) in name.utf8.enumerated() { raw[index + 1] = byte }
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + 1 + name.utf8.count)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        try #require(bound == 0)
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var messages: [String] = []
        func receive(until predicate: ([String]) -> Bool) -> Bool {
            var buffer = [UInt8](repeating: 0, count: 4096)
            // No pause between checks: recv itself waits up to the 100 ms receive timeout.
            return waitUntilBlocking(deadline: .now + .seconds(20), every: .zero) {
                if predicate(messages) { return true }
                let count = recv(listener, &buffer, buffer.count, 0)
                if count > 0 { messages.append(String(decoding: buffer[0..<count], as: UTF8.self)) }
                return predicate(messages)
            }
        }

        let agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name, "--log-size", "2048"],
                                     environment: ["NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "400000"])
        #expect(receive { $0.contains("READY=1") && $0.contains("STATUS=idle") && $0.filter { $0 == "WATCHDOG=1" }.count >= 2 },
                "\(messages)")

        try "max-concurrent=1\nno-expensive=true\n".write(to: state.appendingPathComponent("agent.conf"), atomically: true, encoding: .utf8)
        kill(agent.pid, SIGHUP)
        #expect(agent.waitForLine { $0.contains(#""event":"reloaded","maxConcurrent":1,"maxConnectionsPerHost":6,"allowsExpensive":false,"allowsRoaming":true,"changed":true"#) } != nil)
        let status = try agent.control(["agent", "status", "--json"])
        #expect(status.standardOutput.contains(#""maximumConcurrentDownloads":1"#), "\(status)")

        // A bad line is reported and the running settings stay.
        try "max-concurrent=many\n".write(to: state.appendingPathComponent("agent.conf"), atomically: true, encoding: .utf8)
        kill(agent.pid, SIGHUP)
        #expect(agent.waitForLine { $0.contains(#""event":"reloadFailed""#) && $0.contains("agent.conf:1") } != nil)

        // The log rotates at --log-size; requests add lines until it does.
        for _ in 0..<20 where !FileManager.default.fileExists(atPath: state.appendingPathComponent("agent.log.1").path) {
            _ = try agent.control(["queue", "list"])
        }
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("agent.log.1").path))
        let stopped = agent.terminate()
        #expect(stopped?.status == 0, "agent output: \(agent.output.suffix(8)) stderr: \(agent.standardError)")
        #expect(receive { $0.contains("STOPPING=1") }, "\(messages)")
    }
}

