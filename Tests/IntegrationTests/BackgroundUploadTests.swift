import Foundation
import Glibc
import Testing
import TestSupport

/// Background sessions' upload tasks (issue 28), the seed's Stormy upload: `background-probe`
/// uploads a file in a background session, is SIGKILLed mid-upload, the agent finishes the
/// upload and launches the program again, which hears the server's response and
/// `didCompleteWithError(nil)` exactly once; the server's file is the file. Against
/// upload_server.py (IETF draft-05, read at a set pace) and aiohttp-tus on 127.0.0.1, the agent
/// following a namespace's path (`--netns`).
@Suite("Background upload tasks", .serialized, .needsRoot,
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct BackgroundUploadTests {
    /// An agent on a scratch state directory, a file of `count` random bytes, and the probe's
    /// arguments (launch command writing to `launched`).
    struct Fixture {
        let namespace: ConnectedNamespace
        let directory: ScratchDirectory
        let file: URL
        let content: Data
        let agent: AgentProcess
        let launched: LineFile

        init(count: Int, seed: UInt64) throws {
            namespace = try ConnectedNamespace()
            directory = try ScratchDirectory("bgta-upload", permissions: 0o755)
            content = DownloadFixtures.randomData(count: count, seed: seed)
            file = directory.url("storm-\(seed).jpg")
            try content.write(to: file)
            agent = try AgentProcess(stateDirectory: directory.url("state"), arguments: ["--netns", namespace.name])
            launched = LineFile(url: directory.url("launched.ndjson"))
        }

        var state: URL { directory.url("state") }

        /// `background-probe` on the fixture's agent (running already: the probe only attaches).
        func probe(_ session: String, launches: Bool = true, arguments extra: [String] = []) throws -> ProbeProcess {
            var arguments = ["--state-dir", state.path, "--session", session, "--lifetime", "90"] + extra
            if launches {
                let probe = try BuiltProducts.url("background-probe").path
                arguments += [probe, "--state-dir", state.path, "--output", launched.url.path, "--exit-after-events", "--lifetime", "60"]
                    .flatMap { ["--launch", $0] }
            }
            return try ProbeProcess(arguments, namespace: nil, product: "background-probe")
        }

        /// A probe (launching nothing) uploading the fixture's file to `url`, once `sent` bytes
        /// went out: the probe and the task.
        func uploading(_ session: String, to url: URL, sent: Int) async throws -> (ProbeProcess, Int) {
            let probe = try probe(session, launches: false)
            #expect(await probe.waitForCall("attached") != nil, "\(probe.transcript)")
            probe.send("upload \(file.path) \(url.absoluteString)")
            let task = try #require(await probe.waitForCall("created")?.object["task"]?.int, "\(probe.transcript)")
            #expect(await probe.waitForLine { $0["call"]?.string == "sent" && ($0["total"]?.int ?? 0) >= sent } != nil, "\(probe.transcript)")
            return (probe, task)
        }

        func stop() { agent.stop() }
    }

    /// Uploads in a background session, SIGKILLs the program once `killAfter` bytes went, and
    /// checks the launched program's lines: the response and the end once, nothing twice.
    static func uploadSurvivesAKilledProgram(_ fixture: Fixture, to url: URL, session: String, killAfter: Int) async throws -> [[String: ProbeProcess.SendableJSON]] {
        let first = try fixture.probe(session)
        #expect(await first.waitForCall("attached") != nil, "\(first.transcript)")
        first.send("upload \(fixture.file.path) \(url.absoluteString)")
        let created = try #require(await first.waitForCall("created"), "\(first.transcript)")
        let task = try #require(created.object["task"]?.int)
        let progress = await first.waitForLine(timeout: .seconds(30)) {
            $0["call"]?.string == "sent" && ($0["total"]?.int ?? 0) >= killAfter
        }
        #expect(progress != nil, "didSendBodyData while it runs: \(first.transcript)")
        #expect(first.calls("uploadCompleted").isEmpty, "killed mid-upload, not after: \(first.transcript)")
        first.kill()
        // The agent finishes the upload and launches the program, which handles the events and exits.
        let handled = await DownloadFixtures.wait(timeout: .seconds(60)) {
            fixture.launched.calls("didFinishEvents").count >= 1
        }
        #expect(handled, "the agent launched the program when the upload was done: \(fixture.launched.objects)\n\(fixture.agent.output.suffix(30))")
        let completions = fixture.launched.calls("uploadCompleted").filter { $0["task"]?.int == task }
        #expect(completions.count == 1, "didCompleteWithError exactly once: \(fixture.launched.objects)")
        #expect(completions.first?["code"] == .null, "didCompleteWithError(nil): \(completions)")
        #expect(completions.first?["sent"]?.int == fixture.content.count, "countOfBytesSent: \(completions)")
        let responses = fixture.launched.calls("response").filter { $0["task"]?.int == task }
        #expect(responses.count == 1, "the server's response once: \(fixture.launched.objects)")
        // Acknowledged: a program attaching again (once the launched one is gone) hears nothing of it.
        #expect(await DownloadFixtures.wait(timeout: .seconds(20)) {
            fixture.agent.events.contains { $0["type"] as? String == "background" && $0["event"] as? String == "launchEnded" }
        }, "\(fixture.agent.output.suffix(20))")
        let again = try fixture.probe(session, launches: false)
        #expect(await again.waitForCall("attached") != nil, "\(again.transcript)")
        again.send("upload-tasks")
        let listed = await again.waitForCall("uploadTasks")
        #expect(listed?.object["tasks"] != nil, "\(again.transcript)")
        #expect(again.calls("uploadCompleted").isEmpty && again.calls("response").isEmpty, "replayed twice: \(again.transcript)")
        again.send("quit")
        _ = await again.waitForExit()
        return fixture.launched.objects
    }

    @Test func anIETFUploadOutlivesItsKilledProgram() async throws {
        // 3 s of upload: a loaded machine still kills the program in the middle.
        let server = try UploadTestServer(bytesPerSecond: 4 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 12 << 20, seed: 2881)
        defer { fixture.stop() }
        let lines = try await Self.uploadSurvivesAKilledProgram(fixture, to: server.url("ietf/"), session: "bgta-ietf", killAfter: 2 << 20)
        let responses = lines.filter { $0["call"]?.string == "response" }
        #expect(responses.first?["status"]?.int == 201, "\(responses)")
        let names = try FileManager.default.contentsOfDirectory(atPath: server.directory.url.path).filter { !$0.hasPrefix("_") }
        #expect(names.count == 1, "one upload on the server: \(names)")
        #expect(names.first.flatMap { server.stored($0) } == fixture.content, "the server's file is the file")
        let read = try server.bodyBytesRead()
        #expect(read - fixture.content.count <= 1 << 20, "the server read \(read - fixture.content.count) bytes twice")
    }

    @Test(.enabled(if: URLSessionResumableUploadTests.hasTus, "aiohttp-tus is not installed (scripts/setup.sh)"))
    func aTusUploadOutlivesItsKilledProgram() async throws {
        let tus = try URLSessionResumableUploadTests.TusServer()
        defer { tus.stop() }
        // aiohttp-tus reads fast: a large file keeps the upload going past the kill.
        let fixture = try Fixture(count: 64 << 20, seed: 2882)
        defer { fixture.stop() }
        let lines = try await Self.uploadSurvivesAKilledProgram(fixture, to: tus.url, session: "bgta-tus", killAfter: 1 << 20)
        let responses = lines.filter { $0["call"]?.string == "response" }
        #expect((200..<300).contains(responses.first?["status"]?.int ?? 0), "\(responses)")
        #expect((try? Data(contentsOf: tus.directory.url(fixture.file.lastPathComponent))) == fixture.content,
                "the server's file is the file")
    }

    @Test func anUploadContinuesFromTheServersOffsetAfterTheAgentIsKilledToo() async throws {
        let server = try UploadTestServer(bytesPerSecond: 4 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 12 << 20, seed: 2886)
        defer { fixture.stop() }
        let first = try fixture.probe("bgta-restart")
        #expect(await first.waitForCall("attached") != nil, "\(first.transcript)")
        first.send("upload \(fixture.file.path) \(server.url("ietf/").absoluteString)")
        let task = try #require(await first.waitForCall("created")?.object["task"]?.int, "\(first.transcript)")
        #expect(await first.waitForLine { $0["call"]?.string == "sent" && ($0["total"]?.int ?? 0) >= 2 << 20 } != nil, "\(first.transcript)")
        first.kill()
        _ = fixture.agent.terminate(SIGKILL)
        // A new agent reopens the file (checked to be the same one) and asks the server its offset.
        let agent = try AgentProcess(stateDirectory: fixture.state, arguments: ["--netns", fixture.namespace.name])
        defer { agent.stop() }
        let handled = await DownloadFixtures.wait(timeout: .seconds(60)) { fixture.launched.calls("didFinishEvents").count >= 1 }
        #expect(handled, "\(fixture.launched.objects)\n\(agent.output.suffix(30))")
        let completions = fixture.launched.calls("uploadCompleted").filter { $0["task"]?.int == task }
        #expect(completions.count == 1 && completions.first?["code"] == .null, "\(fixture.launched.objects)")
        let names = try FileManager.default.contentsOfDirectory(atPath: server.directory.url.path).filter { !$0.hasPrefix("_") }
        #expect(names.count == 1 && names.first.flatMap { server.stored($0) } == fixture.content, "the server's file is the file: \(names)")
        let resumed = agent.events.filter { $0["type"] as? String == "background" && $0["event"] as? String == "uploadResumed" }
        let offset = resumed.first?["offset"] as? Int ?? 0
        // The server's offset trails the bytes handed to the socket (its buffers): not zero is the point.
        #expect(offset > 0, "continued from the server's offset: \(resumed)\n\(agent.output.suffix(20))")
        let read = try server.bodyBytesRead()
        print("background upload through a program and agent SIGKILL: continued from byte \(offset) of \(fixture.content.count); the server read \(read - fixture.content.count) bytes twice")
        #expect(read - fixture.content.count <= 1 << 20, "the server read \(read - fixture.content.count) bytes twice")
    }

    /// Resume data from a background upload task (`cancel(byProducingResumeData:)`) makes a new
    /// background task whose agent job asks the server its offset and sends only the rest: the
    /// server reads each byte once, and the delegate hears the response and its body and
    /// `didCompleteWithError(nil)` once.
    @Test func resumeDataFromACancelledUploadContinuesFromTheServersOffset() async throws {
        let server = try UploadTestServer(bytesPerSecond: 2 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 8 << 20, seed: 2887)
        defer { fixture.stop() }
        let (probe, first) = try await fixture.uploading("bgta-resumedata", to: server.url("ietf/"), sent: 2 << 20)
        defer { probe.kill() }
        probe.send("upload-cancel-with-data \(first)")
        let resumeData = await probe.waitForCall("uploadResumeData")
        #expect((resumeData?.object["bytes"]?.int ?? 0) > 0, "resume data from the cancel: \(probe.transcript)")
        let cancelled = await probe.waitForCall("uploadCompleted", task: first)
        #expect(cancelled?.object["code"]?.int == URLError.Code.cancelled.rawValue, "\(probe.transcript)")
        _ = try await Self.continueFromResumeData(probe, fixture, server, after: "a cancel")
        let cancelledResponses = probe.calls("response").filter { $0.object["task"]?.int == first }.count
        #expect(cancelledResponses == 0, "\(probe.transcript)")
    }

    /// A task from the probe's last upload resume data, checked to end the upload from the
    /// server's offset: the response (201), its body and `didCompleteWithError(nil)` once, one
    /// upload on the server, the file, each byte read once. The offset it continued from.
    static func continueFromResumeData(_ probe: ProbeProcess, _ fixture: Fixture, _ server: UploadTestServer,
                                       after what: String) async throws -> Int {
        probe.send("upload-resume-data")
        let second = try #require(await probe.waitForLine { $0["call"]?.string == "created" && $0["fromResumeData"] != nil }?.object["task"]?.int,
                                  "\(probe.transcript)")
        let done = await probe.waitForCall("uploadCompleted", task: second, timeout: .seconds(60))
        #expect(done != nil && done?.object["code"] == .null, "didCompleteWithError(nil): \(probe.transcript)\n\(fixture.agent.output.suffix(20))")
        // Ends are delivered before this line: what came for each task is all there is.
        probe.send("upload-tasks")
        _ = await probe.waitForCall("uploadTasks")
        let responses = probe.calls("response").filter { $0.object["task"]?.int == second }
        #expect(responses.count == 1 && responses.first?.object["status"]?.int == 201, "the server's response once: \(probe.transcript)")
        let bodies = probe.calls("data").filter { $0.object["task"]?.int == second }.compactMap { $0.object["text"]?.string }
        #expect(bodies == ["stored\n"], "the server's response body once: \(bodies)")
        #expect(probe.calls("uploadCompleted").filter { $0.object["task"]?.int == second }.count == 1, "\(probe.transcript)")
        let names = try FileManager.default.contentsOfDirectory(atPath: server.directory.url.path).filter { !$0.hasPrefix("_") }
        #expect(names.count == 1 && names.first.flatMap { server.stored($0) } == fixture.content, "one upload, the file: \(names)")
        let resumed = fixture.agent.events.filter { $0["type"] as? String == "background" && $0["event"] as? String == "uploadResumed" }
        let offset = resumed.last?["offset"] as? Int ?? 0
        let read = try server.bodyBytesRead()
        print("background upload from resume data after \(what): continued from byte \(offset) of \(fixture.content.count); the server read \(read) bytes")
        #expect(resumed.count == 1 && offset > 0, "the new task continued from the server's offset: \(resumed)")
        #expect(read == fixture.content.count, "the server read each byte once: \(read) bytes for \(fixture.content.count)")
        return offset
    }

    /// A server that fails mid-upload but keeps what it took (503 to the creation request once
    /// it read 3 MiB) ends the background task with an error carrying `uploadTaskResumeData`
    /// (Apple's, where the server supports resumption); a task from it asks the server its
    /// offset and sends only the rest.
    @Test func aServerFailingMidUploadHandsResumeDataThatContinuesFromItsOffset() async throws {
        let server = try UploadTestServer(bytesPerSecond: 8 << 20, failAfter: 3 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 8 << 20, seed: 2889)
        defer { fixture.stop() }
        let probe = try fixture.probe("bgta-failed", launches: false)
        defer { probe.kill() }
        #expect(await probe.waitForCall("attached") != nil, "\(probe.transcript)")
        probe.send("upload \(fixture.file.path) \(server.url("ietf/").absoluteString)")
        let first = try #require(await probe.waitForCall("created")?.object["task"]?.int, "\(probe.transcript)")
        let failed = try #require(await probe.waitForCall("uploadCompleted", task: first, timeout: .seconds(60)),
                                  "\(probe.transcript)\n\(fixture.agent.output.suffix(20))")
        #expect(failed.object["code"]?.int == URLError.Code.badServerResponse.rawValue, "\(failed.object)")
        #expect((failed.object["resumeData"]?.int ?? 0) > 0, "the failure carries uploadTaskResumeData: \(failed.object)")
        let held = try server.bodyBytesRead()
        let offset = try await Self.continueFromResumeData(probe, fixture, server, after: "a 503 at \(held) bytes")
        #expect(offset == held, "continued where the server stood (\(held) bytes)")
    }

    /// `timeoutIntervalForResource` (3 s, the server reading 2 MiB a second) ends each task with
    /// -1001 and `uploadTaskResumeData`; each task from the last one's resume data continues from
    /// the server's offset, until one completes: the server reads each byte of the file once.
    @Test func theResourceTimeoutHandsResumeDataThatContinuesFromTheServersOffset() async throws {
        let server = try UploadTestServer(bytesPerSecond: 2 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 8 << 20, seed: 2890)
        defer { fixture.stop() }
        let probe = try fixture.probe("bgta-timeout", launches: false, arguments: ["--resource-timeout", "3"])
        defer { probe.kill() }
        #expect(await probe.waitForCall("attached") != nil, "\(probe.transcript)")
        probe.send("upload \(fixture.file.path) \(server.url("ietf/").absoluteString)")
        var task = try #require(await probe.waitForCall("created")?.object["task"]?.int, "\(probe.transcript)")
        var timeouts = 0
        for _ in 0..<8 {
            let ended = try #require(await probe.waitForCall("uploadCompleted", task: task, timeout: .seconds(30)),
                                     "\(probe.transcript)\n\(fixture.agent.output.suffix(20))")
            if ended.object["code"] == .null { break }
            #expect(ended.object["code"]?.int == URLError.Code.timedOut.rawValue, "\(ended.object)")
            try #require((ended.object["resumeData"]?.int ?? 0) > 0, "-1001 carries uploadTaskResumeData: \(ended.object)")
            timeouts += 1
            probe.send("upload-resume-data")
            let previous = task
            task = try #require(await probe.waitForLine { $0["call"]?.string == "created" && $0["fromResumeData"] != nil && $0["task"]?.int != previous }?
                .object["task"]?.int, "\(probe.transcript)")
        }
        let done = probe.calls("uploadCompleted").filter { $0.object["task"]?.int == task }
        #expect(done.count == 1 && done.first?.object["code"] == .null, "a task from resume data completed: \(probe.transcript)")
        let resumed = fixture.agent.events.filter { $0["type"] as? String == "background" && $0["event"] as? String == "uploadResumed" }
            .compactMap { $0["offset"] as? Int }
        let names = try FileManager.default.contentsOfDirectory(atPath: server.directory.url.path).filter { !$0.hasPrefix("_") }
        #expect(names.count == 1 && names.first.flatMap { server.stored($0) } == fixture.content, "one upload, the file: \(names)")
        let read = try server.bodyBytesRead()
        print("background upload through resource timeouts: \(timeouts) timeouts, continued from \(resumed); the server read \(read) bytes")
        // Each task from resume data asked the server its offset and continued from it (never
        // from less than the task before), and the server read each byte once (below).
        #expect(timeouts >= 1 && resumed.count == timeouts && resumed.first.map { $0 > 0 } == true
                && zip(resumed, resumed.dropFirst()).allSatisfy { $0 <= $1 }, "\(timeouts) timeouts, continued from \(resumed)")
        #expect(read == fixture.content.count, "the server read each byte once: \(read) bytes for \(fixture.content.count)")
    }

    /// A task made and never resumed is not started, and not reported after a relaunch (as on
    /// Apple platforms): the agent never hears of it, the server gets nothing, nothing is kept.
    @Test func anUploadTaskNeverResumedIsNotReplayedAndLeaksNothing() async throws {
        let server = try UploadTestServer(bytesPerSecond: 8 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 64 << 10, seed: 2888)
        defer { fixture.stop() }
        let first = try fixture.probe("bgta-unresumed", launches: false)
        defer { first.kill() }
        #expect(await first.waitForCall("attached") != nil, "\(first.transcript)")
        first.send("upload-unresumed \(fixture.file.path) \(server.url("ietf/").absoluteString)")
        #expect(await first.waitForCall("created") != nil, "\(first.transcript)")
        first.send("quit")
        _ = await first.waitForExit()
        let again = try fixture.probe("bgta-unresumed", launches: false)
        defer { again.kill() }
        #expect(await again.waitForCall("attached") != nil, "\(again.transcript)")
        again.send("upload-tasks")
        #expect(await again.waitForCall("uploadTasks") != nil, "\(again.transcript)")
        #expect(again.transcript.contains("\"tasks\":[]"), "not replayed: \(again.transcript)")
        #expect(again.calls("uploadCompleted").isEmpty && again.calls("response").isEmpty, "\(again.transcript)")
        let status = try fixture.agent.control(["agent", "status", "--json"])
        #expect(status.standardOutput.contains("\"tasks\":0"), "no agent job: \(status.standardOutput)")
        #expect(try server.requestCount() == 0, "the server heard nothing")
        // Nothing of it kept: no file of the state directory names it.
        let kept = FileManager.default.enumerator(atPath: fixture.state.path)?.compactMap { $0 as? String } ?? []
        let mentions = kept.filter { name in
            let url = fixture.state.appendingPathComponent(name)
            return (try? Data(contentsOf: url)).map { String(decoding: $0, as: UTF8.self).contains(fixture.file.lastPathComponent) } ?? false
        }
        #expect(mentions.isEmpty, "no file of the state directory names it: \(mentions)")
    }

    @Test func whatTheProgramCannotSendIsRefusedBeforeTheAgentGetsIt() async throws {
        let target = "http://127.0.0.1:9/ietf/"
        let shared = try ScratchDirectory("bgta-upload-shared", permissions: 0o755)
        let secret = shared.url("secret.jpg")
        try Data("root's".utf8).write(to: secret)
        #expect(chmod(secret.path, 0o600) == 0)
        let fifo = shared.url("pipe").path
        #expect(mkfifo(fifo, 0o644) == 0)
        // The program runs as nobody, on an agent of its own: root's 0600 file cannot be opened,
        // so the agent never hears of it.
        let mine = try ScratchDirectory("bgta-upload-nobody", permissions: 0o755)
        #expect(chown(mine.path, 65534, 65534) == 0)
        let state = mine.url("state")
        let probe = try ProbeProcess(["--state-dir", state.path, "--session", "bgta-refused",
                                      "--agent", try BuiltProducts.url("reachability").path, "--lifetime", "60"],
                                     namespace: nil, product: "background-probe",
                                     prefix: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        defer {
            probe.kill()
            // The agent the probe started outlives it by design.
            if let text = try? String(contentsOf: state.appendingPathComponent("agent.lock"), encoding: .utf8),
               let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) { kill(pid, SIGKILL) }
        }
        #expect(await probe.waitForCall("attached") != nil, "\(probe.transcript)")
        for (path, code) in [(secret.path, -1102), (fifo, -1102), (shared.path, -1101), (shared.url("missing.jpg").path, -1100)] {
            probe.send("upload \(path) \(target)")
            let created = try #require(await probe.waitForLine { $0["call"]?.string == "created" && $0["upload"]?.string == path })
            let done = await probe.waitForCall("uploadCompleted", task: created.object["task"]?.int)
            #expect(done?.object["code"]?.int == code, "\(path): \(probe.transcript)")
        }
        // A body from Data: refused, as Apple's background sessions refuse it.
        probe.send("upload-data \(target)")
        let created = try #require(await probe.waitForLine { $0["call"]?.string == "created" && $0["uploadData"] != nil })
        let done = await probe.waitForCall("uploadCompleted", task: created.object["task"]?.int)
        #expect(done?.object["code"]?.int == URLError.Code.unsupportedURL.rawValue, "\(probe.transcript)")
        #expect(done?.object["message"]?.string?.contains("fromFile") == true, "\(probe.transcript)")
        let status = try BuiltProducts.run("reachability", ["agent", "status", "--json", "--state-dir", state.path],
                                           prefix: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        #expect(!status.standardOutput.contains("\"tasks\":1"), "no task reached the agent: \(status.standardOutput)")
    }

    @Test func aRunningUploadIsListedAndCancelCancelsTheAgentsJob() async throws {
        let server = try UploadTestServer(bytesPerSecond: 1 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 8 << 20, seed: 2885)
        defer { fixture.stop() }
        let (probe, task) = try await fixture.uploading("bgta-cancel", to: server.url("ietf/"), sent: 1 << 20)
        defer { probe.kill() }
        probe.send("upload-tasks")
        let listed = await probe.waitForCall("uploadTasks")
        #expect(listed?.object["tasks"] != nil && probe.transcript.contains("\"expected\":\(8 << 20)"), "listed with its length: \(probe.transcript)")
        probe.send("upload-cancel \(task)")
        let done = await probe.waitForCall("uploadCompleted", task: task)
        #expect(done?.object["code"]?.int == URLError.Code.cancelled.rawValue, "\(probe.transcript)")
        // The agent's job stops: the server's copy grows no more, and the session has no task left.
        #expect(await DownloadFixtures.wait(timeout: .seconds(10)) {
            fixture.agent.events.contains { $0["type"] as? String == "background" && $0["event"] as? String == "attached" }
                && (try? fixture.agent.control(["agent", "status", "--json"]))?.standardOutput.contains("\"tasks\":0") == true
        }, "\(fixture.agent.output.suffix(20))")
        let names = try FileManager.default.contentsOfDirectory(atPath: server.directory.url.path).filter { !$0.hasPrefix("_") }
        let stored = names.first.flatMap { server.stored($0)?.count } ?? 0
        #expect(stored < 8 << 20, "the upload stopped at \(stored) bytes, short of the file")
    }

    @Test func aFileChangedWhileTheProgramIsDeadEndsTheTaskWithAClearError() async throws {
        let server = try UploadTestServer(bytesPerSecond: 1 << 20)
        defer { server.stop() }
        let fixture = try Fixture(count: 8 << 20, seed: 2884)
        defer { fixture.stop() }
        let first = try fixture.probe("bgta-changed")
        #expect(await first.waitForCall("attached") != nil, "\(first.transcript)")
        first.send("upload \(fixture.file.path) \(server.url("ietf/").absoluteString)")
        let created = try #require(await first.waitForCall("created"), "\(first.transcript)")
        let task = try #require(created.object["task"]?.int)
        #expect(await first.waitForLine { $0["call"]?.string == "sent" && ($0["total"]?.int ?? 0) >= 1 << 20 } != nil, "\(first.transcript)")
        first.kill()
        // Rewritten in place while the program is dead: same inode, another size and time.
        let handle = try FileHandle(forWritingTo: fixture.file)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("tampered".utf8))
        try handle.close()
        let handled = await DownloadFixtures.wait(timeout: .seconds(60)) { fixture.launched.calls("didFinishEvents").count >= 1 }
        #expect(handled, "\(fixture.launched.objects)\n\(fixture.agent.output.suffix(30))")
        let completions = fixture.launched.calls("uploadCompleted").filter { $0["task"]?.int == task }
        #expect(completions.count == 1, "\(fixture.launched.objects)")
        let message = completions.first?["message"]?.string ?? ""
        #expect(completions.first?["code"]?.int != nil && message.contains("changed") || message.contains("size"), "a clear error: \(completions)")
        #expect(fixture.launched.calls("response").isEmpty, "the server completed no mixed upload")
    }
}
