import Foundation
import Synchronization
import Testing
@testable import ReachabilityAgent
import ReachabilityBase
import TestSupport

/// `queue add --on-complete` (issue 32 item 6): split once, run with the outcome, retried.
@Suite struct OnCompleteTests {
    @Test(arguments: [
        ("/usr/bin/notify-send 'Download done' \"$FILE\"", ["/usr/bin/notify-send", "Download done", "$FILE"]),
        ("logger -t reach a\\ b  c", ["logger", "-t", "reach", "a b", "c"]),
        ("sh -c 'echo \"x\" > /tmp/y; true'", ["sh", "-c", "echo \"x\" > /tmp/y; true"]),
        ("prog \"a \\\"q\\\" \\\\ b\" ''", ["prog", "a \"q\" \\ b", ""]),
    ])
    func splitsAsAShellWouldWithoutOne(text: String, argv: [String]) throws {
        #expect(try OnCompleteCommand.parse(text) == argv)
        #expect(OnCompleteCommand.problem(with: argv) == nil)
    }

    @Test(arguments: ["", "   ", "prog 'open", "prog \"open", "prog \\", "./relative arg", "bin/prog", "prog\u{1b}[2J"])
    func refusesWhatIsNoCommand(text: String) {
        #expect(throws: InvalidValue.self) { try OnCompleteCommand.parse(text) }
    }

    @Test func aFailingCommandIsRetriedWithTheOutcomeInItsEnvironmentAndEachRunIsAnEvent() async throws {
        let directory = try ScratchDirectory("oncomplete")
        // Fails twice (exit 1), then succeeds; each run appends what it was told.
        let script = directory.path + "/notify.sh"
        try """
            #!/bin/sh
            echo "$REACHABILITY_OUTCOME $REACHABILITY_FILE $REACHABILITY_JOB_ID $1" >> "\(directory.path)/runs"
            [ "$(wc -l < "\(directory.path)/runs")" -ge 3 ]
            """.write(toFile: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script)
        let runner = OnCompleteRunner(delays: [.milliseconds(10), .milliseconds(10), .milliseconds(10), .milliseconds(10), .milliseconds(10)])
        let id = UUID()
        runner.register(try OnCompleteCommand.parse("\(script) 'an argument'"), for: id)
        let events = Mutex<[String]>([])
        runner.jobEnded(id, url: "http://h/f.iso", file: "/srv/f.iso", outcome: "completed", error: nil,
                        environment: ["PATH": "/usr/bin:/bin"], now: { Date() }, emit: { line in events.withLock { $0.append(line) } })
        runner.jobEnded(id, url: "http://h/f.iso", file: "/srv/f.iso", outcome: "completed", error: nil,
                        environment: [:], now: { Date() }, emit: { line in events.withLock { $0.append(line) } })   // once per job
        #expect(await Polling.wait(timeout: .seconds(10)) { events.withLock { $0.count } == 3 })
        let lines = events.withLock { $0 }
        #expect(lines.map { $0.contains("\"run\":\(lines.firstIndex(of: $0)! + 1)") } == [true, true, true])
        #expect(lines[0].contains("\"status\":\"exited with status 1\"") && lines[0].contains("\"retry\":true"), "\(lines[0])")
        #expect(lines[2].contains("\"status\":\"exited with status 0\"") && lines[2].contains("\"retry\":false"), "\(lines[2])")
        let runs = try String(contentsOfFile: directory.path + "/runs", encoding: .utf8).split(separator: "\n")
        #expect(runs.count == 3)
        #expect(runs.allSatisfy { $0 == "completed /srv/f.iso \(id.uuidString.lowercased()) an argument" }, "\(runs)")
    }

    @Test func retriesStopAfterFive() async throws {
        let runner = OnCompleteRunner(delays: Array(repeating: .milliseconds(5), count: 5))
        let id = UUID()
        runner.register(["/bin/false"], for: id)
        let events = Mutex<[String]>([])
        runner.jobEnded(id, url: "u", file: "f", outcome: "failed", error: "x", environment: [:], now: { Date() },
                        emit: { line in events.withLock { $0.append(line) } })
        #expect(await Polling.wait(timeout: .seconds(10)) { events.withLock { $0.count } == 6 })
        #expect(events.withLock { $0.last }?.contains("\"retry\":false") == true)
    }
}
