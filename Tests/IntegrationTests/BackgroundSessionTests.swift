import Foundation
import Testing
import TestSupport

/// Issue 17: background sessions against real transfers. The client namespace holds the program
/// (`background-probe`, a ResumableURLSession.background session) and the agent it starts on
/// demand; the server namespace holds nginx with an access log (so re-fetched bytes show).
@Suite("Background sessions in network namespaces", .serialized, .needsRoot,
       .needsNginx)
struct BackgroundSessionTests {
    static let size = 3 << 20
    static let files = ["a.bin": size, "b.bin": size, "c.bin": size]

    /// Waits until each of `tasks` has been told of `bytes` or more.
    static func waitForProgress(_ probe: ProbeProcess, tasks: [Int], bytes: Int) async -> Bool {
        await DownloadFixtures.wait(timeout: .seconds(30)) {
            tasks.allSatisfy { probe.totals(task: $0).last ?? 0 >= bytes }
        }
    }

    /// Three tasks; the program is SIGKILLed mid-transfer. The agent finishes them (right
    /// content, not one byte fetched twice); the next process of the session gets each file
    /// exactly once, then urlSessionDidFinishEvents, and nothing is left behind.
    @Test func downloadsOutliveAKilledProgramAndAreHandedToTheNextOne() async throws {
        let lab = try BackgroundLab(files: Self.files, seed: 1701)
        defer { lab.close() }
        let first = try lab.probe("halftunes", ["--url", lab.url("a.bin"), "--url", lab.url("b.bin"), "--url", lab.url("c.bin")])
        #expect(await Self.waitForProgress(first, tasks: [1, 2, 3], bytes: 512 << 10), "\(first.transcript)")
        first.kill()
        #expect(await lab.waitForSession("halftunes") { ($0["pendingEvents"] as? Int) == 3 && ($0["tasks"] as? Int) == 0 },
                "\(String(describing: lab.status()))")
        let sent = await lab.bytesSent(afterRequests: 3)
        #expect(sent == 3 * Self.size, "bytes served: \(sent), \(lab.net.requests)")
        #expect(lab.net.requests.count == 3, "one request per file: \(lab.net.requests)")

        let next = try lab.probe("halftunes", ["--exit-after-events"])
        #expect(await next.waitForExit(timeout: .seconds(30)) == 0, "\(next.transcript)")
        let finished = next.finishedByTask
        #expect(finished.keys.sorted() == [1, 2, 3], "\(next.transcript)")
        for (task, lines) in finished {
            #expect(lines.count == 1, "task \(task) finished \(lines.count) times")
            let name = lines.first?.object["description"]?.string ?? ""
            #expect(lines.first?.object["sha256"]?.string == lab.sha256(name), "task \(task) (\(name))")
            #expect(lines.first?.object["existed"]?.int == 1)
        }
        let completed = next.calls("completed")
        #expect(completed.count == 3 && completed.allSatisfy { $0.object["code"] == nil || $0.object["code"] == .null })
        let events = next.calls("didFinishEvents")
        #expect(events.count == 1)
        if let last = next.calls("finished").last, let done = events.first { #expect(last.arrival <= done.arrival) }
        #expect(await lab.waitForSession("halftunes") { ($0["pendingEvents"] as? Int) == 0 })
        #expect(await DownloadFixtures.wait(timeout: .seconds(10)) { lab.backgroundFiles.isEmpty }, "\(lab.backgroundFiles)")
    }

    /// The link goes down while nobody is attached: the agent waits for it and resumes, as it
    /// does for queued downloads.
    @Test func aLinkCutWhileNobodyIsAttachedResumes() async throws {
        let lab = try BackgroundLab(files: ["a.bin": Self.size], seed: 1702)
        defer { lab.close() }
        let first = try lab.probe("cut", ["--url", lab.url("a.bin")])
        #expect(await Self.waitForProgress(first, tasks: [1], bytes: 1 << 20), "\(first.transcript)")
        first.kill()
        try ip("-n \(lab.net.client) link set eth1 down")
        #expect(await DownloadFixtures.wait(timeout: .seconds(20)) {
            lab.list().contains { $0["session"] as? String == "cut" && $0["state"] as? String == "waitingForConnectivity" }
        }, "\(lab.list())")
        try ip("-n \(lab.net.client) link set eth1 up")
        try lab.net.addDefaultRoute("eth1")
        #expect(await lab.waitForSession("cut") { ($0["pendingEvents"] as? Int) == 1 }, "\(String(describing: lab.status()))")
        #expect(lab.net.requests.contains { $0.status == 206 }, "resumed with a range: \(lab.net.requests)")
        let next = try lab.probe("cut", ["--exit-after-events"])
        #expect(await next.waitForExit(timeout: .seconds(30)) == 0, "\(next.transcript)")
        #expect(next.calls("finished").map { $0.object["sha256"]?.string } == [lab.sha256("a.bin")], "\(next.transcript)")
    }

    /// The agent is SIGKILLed while the attached program's tasks run: the program starts
    /// another, the transfers continue from their records, and each event arrives once.
    @Test func anAgentKilledMidTransferResumesAndEventsArriveOnce() async throws {
        let lab = try BackgroundLab(files: Self.files, seed: 1703)
        defer { lab.close() }
        let probe = try lab.probe("survivor", ["--url", lab.url("a.bin"), "--url", lab.url("b.bin"), "--url", lab.url("c.bin")])
        #expect(await Self.waitForProgress(probe, tasks: [1, 2, 3], bytes: 1 << 20), "\(probe.transcript)")
        let killed = try #require(lab.agentPID)
        kill(killed, SIGKILL)
        #expect(await DownloadFixtures.wait(timeout: .seconds(40)) { probe.calls("completed").count == 3 }, "\(probe.transcript)")
        #expect(lab.agentPID != nil && lab.agentPID != killed, "a new agent runs")
        let finished = probe.finishedByTask
        #expect(finished.keys.sorted() == [1, 2, 3], "\(probe.transcript)")
        for (task, lines) in finished {
            #expect(lines.count == 1, "task \(task) finished \(lines.count) times")
            let name = lines.first?.object["description"]?.string ?? ""
            #expect(lines.first?.object["sha256"]?.string == lab.sha256(name), "task \(task)")
        }
        #expect(probe.calls("completed").allSatisfy { $0.object["code"] == nil || $0.object["code"] == .null }, "\(probe.transcript)")
        #expect(lab.net.requests.contains { $0.status == 206 }, "continued from the records: \(lab.net.requests)")
        #expect(await lab.waitForSession("survivor") { ($0["pendingEvents"] as? Int) == 0 })
    }

    /// Launch events: three tasks of an unattached session end together; the agent starts the
    /// registered command once, with the identifier in its environment, and it takes all three.
    @Test func launchEventsStartTheCommandOncePerBatch() async throws {
        let lab = try BackgroundLab(files: Self.files, seed: 1704)
        defer { lab.close() }
        let output = lab.net.directory.file("launched.ndjson")
        let first = try lab.probe("launcher", try lab.launchArguments(output: output)
                                  + ["--url", lab.url("a.bin"), "--url", lab.url("b.bin"), "--url", lab.url("c.bin")])
        #expect(await Self.waitForProgress(first, tasks: [1, 2, 3], bytes: 256 << 10), "\(first.transcript)")
        first.kill()
        let launched = LineFile(url: output)
        #expect(await DownloadFixtures.wait(timeout: .seconds(40)) { !launched.calls("didFinishEvents").isEmpty },
                "\(launched.objects)\n\(lab.agentEvents("background", "launchFailed"))")
        #expect(await DownloadFixtures.wait(timeout: .seconds(10)) { !lab.agentEvents("background", "launchEnded").isEmpty })
        #expect(launched.calls("launched").count == 1)
        #expect(launched.calls("launched").first?["environment"]?.string == "launcher", "REACHABILITY_BACKGROUND_SESSION")
        #expect(launched.calls("finished").count == 3)
        #expect(Set(launched.calls("finished").compactMap { $0["sha256"]?.string }) == Set(["a.bin", "b.bin", "c.bin"].map(lab.sha256)))
        let session = try #require(lab.session("launcher"))
        #expect(session["launches"] as? Int == 1 && session["pendingEvents"] as? Int == 0 && session["consecutiveLaunchFailures"] as? Int == 0,
                "\(session)")
        #expect(lab.agentEvents("background", "launching").count == 1)
    }

    /// A command that exits 1 at once is started again after 1 s, then 2 s: never in a loop.
    /// The failing launcher shows in agent status and the metrics; a process that attaches and
    /// takes the events clears it.
    @Test func aFailingLauncherBacksOff() async throws {
        let lab = try BackgroundLab(files: ["a.bin": 512 << 10], seed: 1705)
        defer { lab.close() }
        let log = lab.net.directory.file("launches.log")
        let script = lab.net.directory.file("fails.sh")
        try "#!/bin/sh\necho \"$(date +%s.%N) $REACHABILITY_BACKGROUND_SESSION\" >> \(log.path)\nexit 1\n"
            .write(to: script, atomically: true, encoding: .utf8)
        chmod(script.path, 0o755)
        let first = try lab.probe("flaky", ["--launch", script.path, "--url", lab.url("a.bin")])
        #expect(await first.waitForCall("created") != nil, "\(first.transcript)")
        first.kill()
        let lines: @Sendable () -> [Substring] = { ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n") }
        #expect(await DownloadFixtures.wait(timeout: .seconds(30)) { lines().count >= 3 }, "launches: \(lines())")
        let times = lines().compactMap { Double($0.split(separator: " ").first ?? "") }
        #expect(lines().allSatisfy { $0.hasSuffix(" flaky") })
        #expect(times.count >= 3 && times[1] - times[0] >= 0.9 && times[2] - times[1] >= 1.9, "launch times: \(times)")
        let session = try #require(lab.session("flaky"))
        #expect((session["consecutiveLaunchFailures"] as? Int ?? 0) >= 2, "\(session)")
        #expect((session["lastLaunchFailure"] as? String ?? "").contains("exited with status 1"), "\(session)")
        let text = try lab.control(["agent", "status"]).standardOutput
        #expect(text.contains("background session 'flaky'") && text.contains("failing"), "\(text)")
        let metrics = try lab.control(["agent", "metrics"]).standardOutput
        #expect(metrics.contains("reachability_background_launchers_failing 1"), "\(metrics)")

        let taker = try lab.probe("flaky", ["--exit-after-events"])
        #expect(await taker.waitForExit(timeout: .seconds(20)) == 0, "\(taker.transcript)")
        #expect(taker.calls("finished").first?.object["sha256"]?.string == lab.sha256("a.bin"))
        #expect(await lab.waitForSession("flaky") { ($0["consecutiveLaunchFailures"] as? Int) == 0 && ($0["pendingEvents"] as? Int) == 0 })
    }

    /// launchUnit, with a `systemctl` that plays the user manager (first on the PATH the agent
    /// inherits): a template unit is started with the escaped identifier as its instance, and
    /// the program it runs takes the events; a plain unit gets the identifier through the
    /// manager's environment around its start. (A real user manager is not available here;
    /// SystemdUnitNameTests has the escaping of identifiers systemd would unescape for %I.)
    @Test func launchUnitsAreStartedThroughSystemctl() async throws {
        // Half a second to download: the program is killed before it ends, so its event waits.
        let lab = try BackgroundLab(files: ["a.bin": 512 << 10], seed: 1711)
        defer { lab.close() }
        let bin = lab.net.directory.file("fakebin")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let calls = lab.net.directory.file("systemctl.log")
        let output = lab.net.directory.file("unit.ndjson")
        let probe = try BuiltProducts.url("background-probe").path
        let agent = try BuiltProducts.url("reachability").path
        // systemctl --user start NAME@INSTANCE.service runs the probe as that unit would, with
        // REACHABILITY_BACKGROUND_SESSION from the instance (%I); a plain unit's comes from set-environment.
        let script = """
            #!/bin/sh
            echo "$*" >> \(calls.path)
            case "$2" in
              set-environment) echo "${3#*=}" > \(bin.path)/session ;;
              start)
                case "$3" in
                  *@*) instance="${3#*@}"; session="${instance%.service}" ;;
                  *) session="$(cat \(bin.path)/session)" ;;
                esac
                REACHABILITY_BACKGROUND_SESSION="$session" \(probe) --state-dir \(lab.state.path) --agent \(agent) --output \(output.path) --exit-after-events --lifetime 60 ;;
            esac
            """
        try script.write(to: bin.appendingPathComponent("systemctl"), atomically: true, encoding: .utf8)
        chmod(bin.appendingPathComponent("systemctl").path, 0o755)
        let environment = ["PATH": bin.path + ":/usr/sbin:/usr/bin:/sbin:/bin"]
        for (session, unit) in [("com.example.unittest", "events@.service"), ("plain", "plain-events.service")] {
            let first = try lab.probe(session, ["--launch-unit", unit, "--url", lab.url("a.bin")], environment: environment)
            #expect(await first.waitForCall("created") != nil, "\(first.transcript)")
            first.kill()
            #expect(await DownloadFixtures.wait(timeout: .seconds(30)) {
                LineFile(url: output).calls("didFinishEvents").contains { _ in true }
                    && LineFile(url: output).calls("launched").contains { $0["environment"]?.string == session }
            }, "\(LineFile(url: output).objects)\n\((try? String(contentsOf: calls, encoding: .utf8)) ?? "")")
            #expect(await lab.waitForSession(session) { ($0["pendingEvents"] as? Int) == 0 && ($0["launches"] as? Int) == 1 })
            try? FileManager.default.removeItem(at: output)
        }
        let log = ((try? String(contentsOf: calls, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        #expect(log == ["--user start events@com.example.unittest.service",
                        "--user set-environment REACHABILITY_BACKGROUND_SESSION=plain", "--user start plain-events.service",
                        "--user unset-environment REACHABILITY_BACKGROUND_SESSION"], "\(log)")
    }

    /// Another user can neither start nor reach the agent's sessions: refused clearly.
    @Test func anotherUserIsRefused() async throws {
        // The transfer's speed is not what is tested: fast, so the owner's file comes at once.
        let lab = try BackgroundLab(rate: "10m", files: ["a.bin": Self.size], seed: 1706)
        defer { lab.close() }
        let owner = try lab.probe("mine", ["--url", lab.url("a.bin")])
        #expect(await owner.waitForCall("created") != nil, "\(owner.transcript)")
        let nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        let intruder = try lab.probe("mine", ["--url", lab.url("a.bin")], prefix: nobody)
        let invalidated = try #require(await intruder.waitForCall("invalidated", timeout: .seconds(20)), "\(intruder.transcript)")
        #expect(invalidated.object["code"]?.int == -997, "\(intruder.transcript)")
        #expect(invalidated.object["message"]?.string?.contains("another user") == true, "\(intruder.transcript)")
        let listed = try lab.control(["queue", "list"], prefix: nobody)
        #expect(listed.status == 77, "\(listed)")
        // The owner's task was not touched.
        #expect(await owner.waitForCall("finished", timeout: .seconds(30)) != nil, "\(owner.transcript)")
    }

    /// Two live processes, one identifier: the second is told at once, never a silent duplicate.
    @Test func aSecondAttachFailsClearly() async throws {
        let lab = try BackgroundLab(rate: "10m", files: ["a.bin": Self.size], seed: 1707)
        defer { lab.close() }
        let first = try lab.probe("single", ["--url", lab.url("a.bin")])
        #expect(await first.waitForCall("created") != nil, "\(first.transcript)")
        let second = try lab.probe("single", [])
        let invalidated = try #require(await second.waitForCall("invalidated", timeout: .seconds(20)), "\(second.transcript)")
        #expect(invalidated.object["code"]?.int == -996, "backgroundSessionInUseByAnotherProcess: \(second.transcript)")
        #expect(invalidated.object["message"]?.string?.contains("already attached by process \(first.pid)") == true, "\(second.transcript)")
        #expect(await second.waitForExit() == 2)
        #expect(await first.waitForCall("finished", timeout: .seconds(30)) != nil, "the first keeps its session: \(first.transcript)")
        #expect(lab.agentEvents("background", "attachRefused").count == 1)
    }

    /// A process that dies inside didFinishDownloadingTo gets the file again next time (at least
    /// once), and the original stayed the agent's meanwhile.
    @Test func aProcessKilledInsideDidFinishGetsTheFileAgain() async throws {
        let lab = try BackgroundLab(rate: "10m", files: ["a.bin": 256 << 10], seed: 1708)
        defer { lab.close() }
        let first = try lab.probe("again", ["--url", lab.url("a.bin"), "--die-in-delegate"])
        #expect(await first.waitForExit(timeout: .seconds(30)) != nil)
        #expect(first.calls("finished").count == 1, "\(first.transcript)")
        #expect(await lab.waitForSession("again") { ($0["pendingEvents"] as? Int) == 1 && $0["attachedPID"] == nil })
        let second = try lab.probe("again", ["--exit-after-events"])
        #expect(await second.waitForExit(timeout: .seconds(20)) == 0, "\(second.transcript)")
        #expect(second.calls("finished").map { $0.object["sha256"]?.string } == [lab.sha256("a.bin")], "\(second.transcript)")
        #expect(await DownloadFixtures.wait(timeout: .seconds(10)) { lab.backgroundFiles.isEmpty }, "\(lab.backgroundFiles)")
    }

    /// Duplicate requests of one session share one transfer (one GET at the server), and each
    /// task gets the file; `queue list` shows the transfer with its session and both tasks.
    @Test func duplicateRequestsJoinOneTransfer() async throws {
        let lab = try BackgroundLab(files: ["a.bin": Self.size], seed: 1709)
        defer { lab.close() }
        let probe = try lab.probe("dupes", ["--url", lab.url("a.bin"), "--url", lab.url("a.bin")])
        #expect(await DownloadFixtures.wait(timeout: .seconds(20)) {
            lab.list().contains { ($0["taskIdentifiers"] as? [Int]) == [1, 2] && $0["session"] as? String == "dupes" }
        }, "\(lab.list())")
        #expect(await DownloadFixtures.wait(timeout: .seconds(30)) { probe.calls("completed").count == 2 }, "\(probe.transcript)")
        #expect(probe.calls("finished").compactMap { $0.object["sha256"]?.string } == [lab.sha256("a.bin"), lab.sha256("a.bin")])
        #expect(await lab.bytesSent(afterRequests: 1) == Self.size && lab.net.requests.count == 1, "\(lab.net.requests)")
    }

    /// earliestBeginDate and countOfBytesClientExpectsToReceive hold tasks back with a reason
    /// (queue list says which); queue cancel ends one, and its program hears -999.
    @Test func tasksWaitForTheirDateAndForDiskSpace() async throws {
        let lab = try BackgroundLab(rate: "10m", files: ["a.bin": 64 << 10], seed: 1710)
        defer { lab.close() }
        let later = try lab.probe("later", ["--url", lab.url("a.bin"), "--not-before", "2"])
        #expect(await DownloadFixtures.wait(timeout: .seconds(10)) {
            lab.list().contains { ($0["waitingReason"] as? String ?? "").contains("earliestBeginDate") }
        }, "\(lab.list())")
        let created = try #require(await later.waitForCall("created"))
        let finished = try #require(await later.waitForCall("finished", timeout: .seconds(20)), "\(later.transcript)")
        #expect(finished.arrival - created.arrival >= .milliseconds(1900))

        let huge = try lab.probe("huge", ["--url", lab.url("a.bin"), "--expects", "\(Int64(1) << 60)"])
        #expect(await huge.waitForCall("created") != nil)
        let row = await DownloadFixtures.wait(timeout: .seconds(10)) {
            lab.list().contains { $0["session"] as? String == "huge" && $0["waitingFor"] as? String == "lowDiskSpace" }
        }
        #expect(row, "\(lab.list())")
        let id = try #require(lab.list().first { $0["session"] as? String == "huge" }?["id"] as? String)
        #expect(try lab.control(["queue", "cancel", String(id.prefix(8))]).status == 0)
        let completed = try #require(await huge.waitForCall("completed", timeout: .seconds(10)), "\(huge.transcript)")
        #expect(completed.object["code"]?.int == -999)
    }
}
