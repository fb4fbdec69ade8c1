import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 32 item 6 across a restart: a job's `--on-complete` command is kept in its resume
/// record, so the job the restarted agent restores still runs it when it ends, once. Needs root
/// (the agent's namespace).
@Suite("--on-complete across an agent restart", .serialized, .enabled(if: isRoot, rootReason),
       .enabled(if: DownloadTestNginx.isAvailable, "nginx is not installed at /usr/sbin/nginx"))
struct OnCompleteRestartTests {
    typealias F = DownloadFixtures

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
}
