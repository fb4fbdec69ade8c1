import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 32 item 6 across a restart: a job's `--on-complete` command is kept in its resume
/// record, so the job the restarted agent restores still runs it when it ends, once. Needs root
/// (the agent's namespace).
@Suite("--on-complete across an agent restart", .serialized, .needsRoot,
       .needsNginx)
struct OnCompleteRestartTests: DownloadScenarios {

    @Test(arguments: [SIGTERM, SIGKILL])
    func aRestoredJobStillRunsItsCommandOnce(signal: Int32) throws {
        let namespace = try ConnectedNamespace()
        let nginx = try DownloadTestNginx(slowRate: "256k")   // 1 MiB: about 4 s, the agent is stopped well before
        let content = F.randomData(count: 1 << 20, seed: 3261)
        try nginx.serve(content, at: "slow/notified.bin")
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        try AgentTests.allowDownloads(into: directory)
        let runs = directory.file("runs")
        let script = directory.file("notify.sh")
        try """
            #!/bin/sh
            echo "$REACHABILITY_OUTCOME $REACHABILITY_FILE $1" >> "\(runs.path)"
            """.write(to: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script.path)
        let destination = directory.file("notified.bin")

        var first: AgentProcess? = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        let added = try first!.control(["queue", "add", nginx.url("slow/notified.bin").absoluteString, "-o", destination.path,
                                        "--sha256", F.sha256(content), "--on-complete", "\(script.path) 'after restart'"])
        #expect(added.status == 0, "\(added)")
        #expect(first!.waitForLine { $0.contains(#""event":"started""#) } != nil, "\(first!.output)")
        #expect(first!.terminate(signal) != nil, "the agent did not stop")
        #expect(!first!.output.contains { $0.contains(#""event":"onComplete""#) }, "run by the stopped agent: \(first!.output)")
        first = nil

        let second = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(second.waitForLine { $0.contains(#""event":"restored""#) } != nil, "\(second.output)")
        #expect(second.waitForLine { $0.contains(#""type":"download","event":"completed""#) } != nil, "\(second.output)")
        #expect(second.waitForLine { $0.contains(#""event":"onComplete""#) && $0.contains("exited with status 0") } != nil,
                "\(second.output)")
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        let lines = try String(contentsOf: runs, encoding: .utf8).split(separator: "\n")
        #expect(lines == ["completed \(destination.path) after restart"], "\(lines)")
        #expect(second.output.filter { $0.contains(#""event":"onComplete""#) }.count == 1, "\(second.output)")
        _ = second.terminate()
    }

    /// Writes `notify.sh`: appends its outcome to `runs`, then (when `holdUntil` is given) waits
    /// for that file to appear, at most 30 s: a command still running when the agent is killed.
    static func notifyScript(in directory: F.Directory, holdUntil release: URL? = nil) throws -> (script: URL, runs: URL) {
        let runs = directory.file("runs")
        let script = directory.file("notify.sh")
        let hold = release.map { "i=0; while [ ! -e \"\($0.path)\" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done" } ?? ""
        try """
            #!/bin/sh
            echo "$REACHABILITY_OUTCOME $REACHABILITY_FILE" >> "\(runs.path)"
            \(hold)
            """.write(to: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script.path)
        return (script, runs)
    }

    static func runLines(_ runs: URL) -> [Substring] {
        ((try? String(contentsOf: runs, encoding: .utf8)) ?? "").split(separator: "\n")
    }

    /// What each scenario below starts from: a namespace, nginx serving `name`, a scratch
    /// directory whose agent may write there, and the notify script.
    struct Scene {
        let namespace: ConnectedNamespace
        let nginx: DownloadTestNginx
        let directory: F.Directory
        let state: URL
        let script: URL
        let runs: URL
        let destination: URL
        let url: String

        init(_ name: String, seed: UInt64, size: Int, slowRate: String = "2m", holdUntil release: ((F.Directory) -> URL)? = nil) throws {
            namespace = try ConnectedNamespace()
            nginx = try DownloadTestNginx(slowRate: slowRate)
            try nginx.serve(F.randomData(count: size, seed: seed), at: name)
            directory = try F.Directory("agent")
            state = directory.file("state")
            try AgentTests.allowDownloads(into: directory)
            (script, runs) = try OnCompleteRestartTests.notifyScript(in: directory, holdUntil: release?(directory))
            destination = directory.file(URL(fileURLWithPath: name).lastPathComponent)
            url = nginx.url(name).absoluteString
        }

        func agent(environment: [String: String] = [:]) throws -> AgentProcess {
            try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name], environment: environment)
        }

        var records: URL { state.appendingPathComponent("records") }
        var hasNoRecords: Bool { ((try? FileManager.default.contentsOfDirectory(atPath: records.path)) ?? ["?"]).isEmpty }
    }

    /// A SIGKILL between the completed file's rename and the command's start (the agent's
    /// `renamed` test hook): the record says the run is pending, and the restarted agent runs
    /// it, once, and then removes the record.
    @Test func aKillBeforeTheCommandStartsRunsItAfterTheRestart() throws {
        let scene = try Scene("pending.bin", seed: 3262, size: 256 << 10)
        var first: AgentProcess? = try scene.agent(environment: ["REACHABILITY_AGENT_TEST_KILL_AT": "renamed"])
        let added = try first!.control(["queue", "add", scene.url, "-o", scene.destination.path, "--on-complete", scene.script.path])
        #expect(added.status == 0, "\(added)")
        #expect(F.waitSync(timeout: .seconds(30)) { !first!.process.isRunning }, "the hook did not kill the agent")
        #expect(!first!.output.contains { $0.contains(#""event":"onComplete""#) }, "\(first!.output)")
        first = nil
        #expect(Self.runLines(scene.runs).isEmpty)

        let second = try scene.agent()
        #expect(second.waitForLine { $0.contains(#""event":"onComplete""#) && $0.contains("exited with status 0") } != nil,
                "\(second.output)")
        #expect(Self.runLines(scene.runs) == ["completed \(scene.destination.path)"])
        #expect(F.waitSync { scene.hasNoRecords }, "the record goes once the run is done")
        #expect(second.output.filter { $0.contains(#""event":"onComplete""#) }.count == 1, "\(second.output)")
        _ = second.terminate(SIGKILL)

        // A third start finds nothing to run.
        let third = try scene.agent()
        _ = try third.control(["agent", "status"])
        #expect(!third.output.contains { $0.contains(#""event":"onComplete""#) }, "\(third.output)")
        #expect(Self.runLines(scene.runs).count == 1)
        _ = third.terminate()
    }

    /// A SIGKILL while the command runs: the record says `started`, and the restarted agent does
    /// not run it again (it may have done its work), saying so in an event.
    @Test func aKillWhileTheCommandRunsDoesNotRunItAgain() throws {
        let scene = try Scene("started.bin", seed: 3263, size: 256 << 10, holdUntil: { $0.file("release") })
        let release = scene.directory.file("release")
        defer { _ = FileManager.default.createFile(atPath: release.path, contents: nil) }   // lets a held command go
        var first: AgentProcess? = try scene.agent()
        let added = try first!.control(["queue", "add", scene.url, "-o", scene.destination.path, "--on-complete", scene.script.path])
        #expect(added.status == 0, "\(added)")
        #expect(F.waitSync(timeout: .seconds(30)) { Self.runLines(scene.runs).count == 1 }, "the command did not start")
        #expect(first!.terminate(SIGKILL) != nil)
        first = nil
        _ = FileManager.default.createFile(atPath: release.path, contents: nil)

        let second = try scene.agent()
        #expect(second.waitForLine { $0.contains(#""event":"onComplete""#) && $0.contains("not run again") } != nil,
                "\(second.output)")
        #expect(Self.runLines(scene.runs) == ["completed \(scene.destination.path)"])
        #expect(F.waitSync { scene.hasNoRecords }, "the record goes once the run is done")
        _ = second.terminate()
    }

    /// A failed job's command runs once: `queue resume` and a restart that end it again do not
    /// run it a second time (its record says `done`).
    @Test func aResumedFailedJobDoesNotRunItsCommandAgain() throws {
        let scene = try Scene("slow/late.bin", seed: 3264, size: 1 << 20, slowRate: "64k")
        var first: AgentProcess? = try scene.agent()
        let added = try first!.control(["queue", "add", scene.url, "-o", scene.destination.path,
                                        "--deadline", "1", "--on-complete", scene.script.path])
        #expect(added.status == 0, "\(added)")
        let id = String(added.standardOutput.prefix(8))
        #expect(first!.waitForLine { $0.contains(#""event":"onComplete""#) && $0.contains("exited with status 0") } != nil,
                "\(first!.output)")
        #expect(Self.runLines(scene.runs) == ["failed \(scene.destination.path)"])
        let record = scene.records.appendingPathComponent(
            try FileManager.default.contentsOfDirectory(atPath: scene.records.path).first { $0.hasSuffix(".json") } ?? "none")
        #expect(F.waitSync {
            ((try? String(contentsOf: record, encoding: .utf8)) ?? "").replacingOccurrences(of: " ", with: "").contains(#""step":"done""#)
        }, "the record says the run is done")

        let resumed = try first!.control(["queue", "resume", id])
        #expect(resumed.status == 0, "\(resumed)")
        // It ends again at once (its deadline has passed); the command is not run again.
        #expect(F.waitSync(timeout: .seconds(30)) {
            first!.output.filter { $0.contains(#""type":"download","event":"failed""#) }.count >= 2
        }, "\(first!.output)")
        #expect(Self.runLines(scene.runs) == ["failed \(scene.destination.path)"])
        #expect(first!.terminate(SIGKILL) != nil)
        first = nil

        let second = try scene.agent()
        #expect(second.waitForLine { $0.contains(#""event":"onComplete""#) && $0.contains("not run again") } != nil,
                "\(second.output)")
        #expect(Self.runLines(scene.runs) == ["failed \(scene.destination.path)"])
        _ = second.terminate()
    }
}
