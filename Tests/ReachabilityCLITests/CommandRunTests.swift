import LinuxReachability
import Testing
@testable import ReachabilityCLI

@Suite("status and watch over scripted paths")
struct CommandRunTests {
    @Test(arguments: [(Fixtures.satisfiedWifi, 0), (Fixtures.noRoute, 1), (Fixtures.ipv6OnlyWired, 0)] as [(NetworkPath, Int32)])
    func statusExitStatusFollowsThePath(path: NetworkPath, expected: Int32) async {
        let harness = Harness(source: ScriptedPathSource(current: path))
        #expect(await harness.run(["status"]) == expected)
        #expect(harness.standardOutput.text == PathText.summary(path) + "\n")
        #expect(harness.standardError.text.isEmpty)
        #expect(harness.source.isCancelled, "the monitor is cancelled before exiting")
    }

    @Test func statusJSONIsOneObjectOnOneLine() async {
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.noRoute))
        #expect(await harness.run(["status", "--json"]) == 1)
        #expect(harness.standardOutput.text == PathJSON.line(Fixtures.noRoute, at: Fixtures.time) + "\n")
    }

    @Test func statusExplain() async {
        let harness = Harness()
        #expect(await harness.run(["status", "--explain"]) == 0)
        #expect(harness.standardOutput.text == PathText.explanation(Fixtures.satisfiedWifi) + "\n")
    }

    @Test func statusPassesNamespaceToTheMonitor() async throws {
        let harness = Harness()
        #expect(await harness.run(["status", "--netns", "blue"]) == 0)
        #expect(try #require(harness.configurations.first).networkNamespace == "blue")
    }

    @Test(arguments: ["status", "watch", "wait"])
    func namespaceWithoutPrivilegeIsExit77(command: String) async {
        let harness = Harness(canEnterNetworkNamespace: false)
        #expect(await harness.run([command, "--netns", "blue"]) == 77)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.text.hasPrefix("Error: --netns blue needs CAP_SYS_ADMIN"))
        #expect(harness.configurations.isEmpty)
    }

    @Test(arguments: [(.permissionDenied, 77), (.namespaceNotFound, 1), (.netlink, 1)] as [(ReachabilityError, Int32)])
    func monitorStartErrorsAreReported(error: ReachabilityError, expected: Int32) async {
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, startError: error))
        #expect(await harness.run(["status", "--netns", "blue"]) == expected)
        #expect(harness.standardError.text == "Error: \(error.description)\n")
        #expect(harness.standardOutput.text.isEmpty)
    }

    @Test func watchPrintsCurrentThenOneLinePerChangeAndDropsRepeats() async {
        let source = ScriptedPathSource(
            current: Fixtures.satisfiedWifi,
            script: [Fixtures.satisfiedWifi, Fixtures.noRoute, Fixtures.noRoute, Fixtures.dualStackWifi])
        let harness = Harness(source: source)
        #expect(await harness.run(["watch"]) == 0)
        #expect(harness.standardOutput.lines == [
            "2026-11-30T06:00:00.125Z reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)",
            "2026-11-30T06:00:00.125Z unreachable: no route",
            "2026-11-30T06:00:00.125Z reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1; 2001:db8::20, gw fe80::1)",
        ])
        #expect(harness.standardError.text.isEmpty)
    }

    @Test(arguments: [(["watch"], 1), (["watch", "--json"], 2)])
    func aChangeOutsideThePrimaryRouteIsALineOnlyInJSON(arguments: [String], lineCount: Int) async {
        var ethernetUp = Fixtures.satisfiedWifi
        ethernetUp.interfaces[0].hasCarrier = true
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, script: [ethernetUp]))
        #expect(await harness.run(arguments) == 0)
        #expect(harness.standardOutput.lines.count == lineCount)
    }

    @Test func watchJSONIsOneObjectPerLine() async {
        let source = ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.cellular])
        let harness = Harness(source: source)
        #expect(await harness.run(["watch", "--json"]) == 0)
        #expect(harness.standardOutput.lines == [
            PathJSON.line(Fixtures.noRoute, at: Fixtures.time),
            PathJSON.line(Fixtures.cellular, at: Fixtures.time),
        ])
    }

    @Test func interruptEndsWatchWithExitZero() async {
        let source = ScriptedPathSource(current: Fixtures.satisfiedWifi, script: [Fixtures.noRoute], staysOpen: true)
        let harness = Harness(source: source)
        let subscribed = source.pathsRequests()
        async let status = harness.run(["watch"])
        // Wait for the event, not for time: the command has subscribed, so the script is buffered.
        for await _ in subscribed { break }
        #expect(harness.interrupt())
        #expect(await status == 0)
        #expect(harness.standardOutput.lines.count == 2)
        #expect(source.isCancelled)
        #expect(!harness.interrupt(), "the handler is removed when watch returns")
    }
}
