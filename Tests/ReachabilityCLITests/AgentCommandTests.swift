import TestSupport
import Foundation
import LinuxReachability
import Testing
@testable import ReachabilityAgent
@testable import ReachabilityCLI
@testable import ReachabilityEvents

/// `reachability agent` run whole under the harness: a scripted path source instead of netlink,
/// signals through the context, `agent.conf` from the harness's files, a real state directory and
/// socket in a temporary directory. The control commands talk to it through a second harness, as
/// a second process would.
@Suite("agent command under the harness", .serialized)
struct AgentCommandTests {
    typealias Directory = ScratchDirectory

    /// A running agent, its harness, and the task that returns its exit status.
    struct Running {
        let harness: Harness
        let task: Task<Int32, Never>

        /// Waits (bounded) for an event line containing `fragment`.
        func waitFor(_ fragment: String, timeout: Duration = .seconds(20)) async -> Bool {
            await Polling.wait(timeout: timeout) { harness.standardOutput.text.contains(fragment) }
        }

        /// SIGTERM through the harness, then the exit status. Without a handler (bounded wait) the
        /// signal would be lost and the agent run for ever: the task is cancelled and -1 returned.
        func terminate() async -> Int32 {
            guard await Polling.wait({ harness.handles(SIGTERM) }) else {
                Issue.record("the agent installed no SIGTERM handler")
                task.cancel()
                return -1
            }
            #expect(harness.signal(SIGTERM))
            return await task.value
        }
    }

    static func start(_ arguments: [String], harness: Harness) async -> Running {
        let running = Running(harness: harness, task: Task { await harness.run(["agent"] + arguments) })
        return running
    }

    /// A control command as a second process would run it.
    static func control(_ arguments: [String], state: String) async -> (Int32, String, String) {
        let client = Harness()
        let status = await client.run(arguments + ["--state-dir", state])
        return (status, client.standardOutput.text, client.standardError.text)
    }

    @Test func startsAnswersMetricsAndStopsOnSIGTERM() async throws {
        let directory = try Directory()
        let source = ScriptedPathSource(current: Fixtures.satisfiedWifi, script: [Fixtures.noRoute], staysOpen: true)
        let agent = await Self.start(["--state-dir", directory.state, "--metrics-file", directory.path + "/agent.prom"],
                                     harness: Harness(source: source))
        #expect(await agent.waitFor(#""event":"listening""#), "\(agent.harness.standardOutput.text)\(agent.harness.standardError.text)")
        #expect(await agent.waitFor(#""type":"path","event":"changed","status":"unsatisfied""#))
        #expect(agent.harness.handles(SIGTERM) && agent.harness.handles(SIGINT) && agent.harness.handles(SIGHUP))

        let (status, text, _) = await Self.control(["agent", "status", "--json"], state: directory.state)
        #expect(status == 0)
        #expect(text.contains(#""pathStatus":"unsatisfied""#), "\(text)")

        let (metricsStatus, metrics, errors) = await Self.control(["agent", "metrics"], state: directory.state)
        #expect(metricsStatus == 0, "\(errors)")
        let families = try MetricsParser.parse(metrics, format: .openMetrics)
        #expect(MetricsParser.family("reachability_path_outages", in: families)?.samples(named: "reachability_path_outages_total").first?.value == 1)
        #expect(MetricsParser.family("reachability_downloads", in: families)?.samples.count == DownloadMetrics.stateNames.count)

        let (_, prometheus, _) = await Self.control(["agent", "metrics", "--format", "prometheus"], state: directory.state)
        #expect(!prometheus.contains("# EOF"))
        _ = try MetricsParser.parse(prometheus, format: .prometheus)
        // The file was written at start, with the same families.
        let file = try String(contentsOfFile: directory.path + "/agent.prom", encoding: .utf8)
        #expect(try MetricsParser.parse(file, format: .prometheus).map(\.name) == families.map(\.name))

        #expect(await agent.terminate() == 0)
        let output = agent.harness.standardOutput.text
        #expect(output.contains(#""event":"stopping""#) && output.contains(#""event":"stopped","checkpointed":true"#))
        #expect(!agent.harness.handles(SIGTERM), "handlers are removed when the agent returns")
        #expect(source.isCancelled)
        let (after, _, afterErrors) = await Self.control(["agent", "status"], state: directory.state)
        #expect(after == 1)
        #expect(afterErrors.contains("no agent is running on \(directory.state)"))
        for line in output.split(separator: "\n") {
            #expect(line.hasPrefix(#"{"schema":1,"time":""#), "\(line)")
        }
    }

    @Test func sighupReloadsAgentConfFromTheContext() async throws {
        let directory = try Directory()
        let conf = directory.state + "/agent.conf"
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, staysOpen: true),
                              files: [conf: "max-concurrent=3\nconnections=2\n"])
        let agent = await Self.start(["--state-dir", directory.state, "--max-concurrent", "7", "--connections", "9"], harness: harness)
        #expect(await agent.waitFor(#""event":"listening""#))
        #expect(harness.standardOutput.text.contains(#""maxConcurrent":3,"maxConnectionsPerHost":2"#), "agent.conf wins over the command line")
        #expect(harness.handles(SIGHUP), "the handlers are in place before the agent says it is listening")
        #expect(harness.signal(SIGHUP))
        #expect(await agent.waitFor(#""event":"reloaded","maxConcurrent":3,"maxConnectionsPerHost":2"#))
        #expect(await agent.terminate() == 0)
    }

    @Test func aBadAgentConfExits78BeforeListening() async throws {
        let directory = try Directory()
        let conf = directory.state + "/agent.conf"
        let harness = Harness(files: [conf: "max-concurrent=lots\n"])
        #expect(await harness.run(["agent", "--state-dir", directory.state]) == 78)
        #expect(harness.standardError.text == "Error: \(conf):1: max-concurrent: expected a number from 1 to 64, got 'lots'\n")
        #expect(!harness.standardOutput.text.contains("listening"))
        #expect(harness.configurations.isEmpty, "no monitor was started")
    }

    @Test func aSecondAgentOnTheSameDirectoryIsRefused() async throws {
        let directory = try Directory()
        let first = await Self.start(["--state-dir", directory.state],
                                     harness: Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, staysOpen: true)))
        #expect(await first.waitFor(#""event":"listening""#))
        let second = Harness()
        #expect(await second.run(["agent", "--state-dir", directory.state]) == 1)
        #expect(second.standardError.text.hasPrefix("Error: another agent is already running on \(directory.state) (pid \(getpid()))"),
                "\(second.standardError.text)")
        #expect(await first.terminate() == 0)
    }

    @Test func aMetricsFileInAWorldWritableDirectoryExits73BeforeListening() async throws {
        let directory = try Directory()
        chmod(directory.path, 0o1777)
        let harness = Harness()
        #expect(await harness.run(["agent", "--state-dir", directory.state, "--metrics-file", directory.path + "/m.prom"]) == 73)
        #expect(harness.standardError.text.contains("is writable by every user (mode 1777)"))
        #expect(!harness.standardOutput.text.contains("listening"))
        #expect(!FileManager.default.fileExists(atPath: directory.state + "/agent.sock"))
    }

    @Test func theMonitorFailingToStartIsReported() async throws {
        let directory = try Directory()
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, startError: ReachabilityError.permissionDenied))
        #expect(await harness.run(["agent", "--state-dir", directory.state]) == 77)
        #expect(harness.standardError.text.hasPrefix("Error: "))
    }

    /// The agent's own transport settings reach its downloads: a dead --proxy is named in the
    /// download's retry event (libcurl alone says only "could not connect to the server").
    @Test func agentProxyReachesItsDownloads() async throws {
        let directory = try Directory()
        let port = 1 + UInt16.random(in: 1...50)   // privileged ports below 64: nothing listens there
        let agent = await Self.start(["--state-dir", directory.state, "--proxy", "http://user:secret@127.0.0.1:\(port)"],
                                     harness: Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, staysOpen: true)))
        #expect(await agent.waitFor(#""event":"listening""#))
        let (status, _, errors) = await Self.control(["queue", "add", "http://192.0.2.1/f.bin"],
                                                     state: directory.state)
        #expect(status == 0, "\(errors)")
        #expect(await agent.waitFor("could not connect through the proxy http://user:***@127.0.0.1:\(port)"),
                "\(agent.harness.standardOutput.text)")
        #expect(!agent.harness.standardOutput.text.contains("secret"), "the proxy password is never logged")
        #expect(await agent.terminate() == 0)
    }

    /// A job's own proxy (`queue add --proxy`) wins over the agent's (here none), and is named
    /// with its password masked.
    @Test func queueAddProxyIsTheJobsOwn() async throws {
        let directory = try Directory()
        let port = 1 + UInt16.random(in: 1...50)   // privileged ports below 64: nothing listens there
        let agent = await Self.start(["--state-dir", directory.state, "--no-proxy"],
                                     harness: Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, staysOpen: true)))
        #expect(await agent.waitFor(#""event":"listening""#))
        let (status, _, errors) = await Self.control(["queue", "add", "--proxy", "http://user:secret@127.0.0.1:\(port)",
                                                      "http://192.0.2.1/f.bin"], state: directory.state)
        #expect(status == 0, "\(errors)")
        #expect(await agent.waitFor("could not connect through the proxy http://user:***@127.0.0.1:\(port)"),
                "\(agent.harness.standardOutput.text)")
        #expect(agent.harness.standardOutput.text.contains(#""proxy":"http://user:***@127.0.0.1:\#(port)""#),
                "the started event names the job's proxy: \(agent.harness.standardOutput.text)")
        #expect(!agent.harness.standardOutput.text.contains("secret"), "the proxy password is never logged")
        #expect(await agent.terminate() == 0)
    }

    @Test(arguments: [
        (["--cacert", "/nonexistent/ca.pem"], Int32(66), "cannot read --cacert /nonexistent/ca.pem"),
        (["--limit-rate", "fast"], 64, "expected bytes per second"),
        (["--proxy", "ftp://p"], 64, "expected a proxy URL"),
        (["--proxy", "http://p:0"], 64, "the port must be 1 to 65535"),
        (["--proxy", "http://u:pw@p:3128", "--no-proxy"], 64, "cannot be used together"),
    ])
    func agentTransportOptionsAreChecked(arguments: [String], status: Int32, fragment: String) async throws {
        let directory = try Directory()
        let harness = Harness()
        #expect(await harness.run(["agent", "--state-dir", directory.state] + arguments) == status)
        #expect(harness.standardError.text.contains(fragment), "\(harness.standardError.text)")
        #expect(harness.configurations.isEmpty, "no monitor was started")
    }

    /// `queue add` refuses the per-download options it cannot keep safely, with the reason and what
    /// to do instead, before talking to any agent.
    @Test(arguments: [
        (["-H", "Authorization: Bearer x"], "'queue add' does not take '-H, --header <name: value>': headers usually carry credentials"),
        (["--header=X: y"], "does not take '-H, --header <name: value>'"),
        (["-HX: y"], "does not take '-H, --header <name: value>'"),
        (["--limit-rate", "1m"], "start the agent with 'reachability agent --limit-rate SPEED'"),
        (["--cacert", "ca.pem"], "'reachability agent --cacert FILE'"),
        (["-x", "ftp://p"], "expected a proxy URL like http://host:3128"),
        (["-x", "http://user:secret@p :3128"], "'http://user:***@p :3128'"),
        (["-x", "http://p:3128", "--no-proxy"], "cannot be used together"),
        (["--upload", "/etc/hostname", "--no-proxy"], "are for downloads, not '--upload'"),
        (["-k"], "always check the server's certificate"),
        (["--insecure"], "always check the server's certificate"),
    ])
    func queueAddRefusesPerDownloadTransportOptions(arguments: [String], fragment: String) async {
        let harness = Harness()
        #expect(await harness.run(["queue", "add", "http://a/x"] + arguments + ["--state-dir", "/nonexistent"]) == 64)
        #expect(harness.standardError.text.hasPrefix("Error: "))
        #expect(harness.standardError.text.contains(fragment), "\(harness.standardError.text)")
        #expect(harness.standardError.text.contains("See 'reachability queue add --help'"))
        #expect(!harness.standardError.text.contains("no agent is running"), "refused before connecting")
    }

    /// Issue 32: the job's time limits and `--on-complete` are parsed before any agent is asked.
    @Test(arguments: [
        (["--deadline", "0"], "'--deadline <seconds>'"),
        (["--no-progress-timeout", "-5"], "'--no-progress-timeout <seconds>'"),
        (["--on-complete", "notify 'open"], "expected a command whose quotes are closed"),
        (["--on-complete", "./relative"], "absolute path or a name on the agent's PATH"),
    ])
    func queueAddChecksTimeLimitsAndOnComplete(arguments: [String], fragment: String) async {
        let harness = Harness()
        #expect(await harness.run(["queue", "add", "http://a/x"] + arguments + ["--state-dir", "/nonexistent"]) == 64)
        #expect(harness.standardError.text.contains(fragment), "\(harness.standardError.text)")
        #expect(!harness.standardError.text.contains("no agent is running"), "refused before connecting")
    }

    @Test func agentLimitTakesARateOrNone() async {
        let harness = Harness()
        #expect(await harness.run(["agent", "limit", "2q", "--state-dir", "/nonexistent"]) == 64)
        #expect(harness.standardError.text.contains("expected bytes per second"), "\(harness.standardError.text)")
    }

    @Test func queueAddHelpExplainsTheRefusals() async {
        let harness = Harness()
        #expect(await harness.run(["queue", "add", "-H", "x: y", "--help"]) == 0)
        let help = harness.standardOutput.text
        #expect(help.contains("Request headers (-H) are not taken"))
        #expect(!help.contains("--header"), "refused options are not offered in help")
    }

    @Test func withoutAnAgentTheControlCommandsSaySo() async throws {
        let directory = try Directory()
        for command in [["agent", "metrics"], ["agent", "status"], ["queue", "list"]] {
            let (status, _, errors) = await Self.control(command, state: directory.state)
            #expect(status == 1)
            #expect(errors == "Error: no agent is running on \(directory.state) (start one with 'reachability agent')\n")
        }
    }
}

/// The shutdown bound returns at its limit even when the work never ends.
@Suite("agent shutdown bound")
struct AgentShutdownBoundTests {
    @Test func returnsAtTheLimitWhenTheWorkIsStuck() async {
        let start = ContinuousClock.now
        let finished = await AgentDaemon.finishes(within: .milliseconds(50)) {
            // Stuck for as long as the test could run: nothing cancels it.
            await neverEndingWork()
        }
        #expect(!finished)
        // Returning at all proves the point (the work sleeps an hour); the bound is loose because a
        // busy cooperative pool can delay the 50 ms timer.
        #expect(ContinuousClock.now - start < .seconds(120))
    }

    @Test func saysSoWhenTheWorkEnds() async {
        #expect(await AgentDaemon.finishes(within: .seconds(30)) {})
    }
}

extension ScratchDirectory {
    convenience init() throws { try self.init("ah") }
    /// The agent's state directory inside it.
    var state: String { path("state") }
}
