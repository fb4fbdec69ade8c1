import TestSupport
import Glibc
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
        // Then UPower's facts, read from this machine's bus (unknown without UPower): one line.
        let text = harness.standardOutput.text
        #expect(text.hasPrefix(PathText.explanation(Fixtures.satisfiedWifi) + "\npower: "), "\(text)")
        #expect(text.hasSuffix("\n") && !text.dropFirst(PathText.explanation(Fixtures.satisfiedWifi).count + 1).dropLast().contains("\n"))
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

    @Test(arguments: [(.permissionDenied, 77), (.namespaceNotFound, 66), (.netlink, 1)] as [(ReachabilityError, Int32)])
    func monitorStartErrorsAreReported(error: ReachabilityError, expected: Int32) async {
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, startError: error))
        #expect(await harness.run(["status", "--netns", "blue"]) == expected)
        #expect(harness.standardError.text == "Error: \(error.description)\n")
        #expect(harness.standardOutput.text.isEmpty)
    }

    /// Runs `watch` over a script that stays open and interrupts it once its SIGINT handler is in
    /// place: waits for that (bounded), not for time. `watch` subscribes (which buffers the whole
    /// script) before it installs the handler, so an interrupt sent on subscription alone could
    /// find no handler, and `watch` would then run for ever (it once hung a CI run). If the
    /// handler never comes, the source is cancelled so that the test fails instead of hanging.
    func watchUntilInterrupted(_ arguments: [String], current: NetworkPath, script: [NetworkPath]) async -> Harness {
        let source = ScriptedPathSource(current: current, script: script, staysOpen: true)
        let harness = Harness(source: source)
        async let status = harness.run(arguments)
        let handled = await Polling.wait { harness.handles(SIGINT) }
        #expect(handled, "watch never installed its SIGINT handler")
        if handled { #expect(harness.interrupt()) } else { source.cancel() }
        #expect(await status == 0)
        #expect(source.isCancelled)
        return harness
    }

    @Test func watchPrintsCurrentThenOneLinePerChangeAndDropsRepeats() async {
        let harness = await watchUntilInterrupted(
            ["watch"], current: Fixtures.satisfiedWifi,
            script: [Fixtures.satisfiedWifi, Fixtures.noRoute, Fixtures.noRoute, Fixtures.dualStackWifi])
        #expect(harness.standardOutput.lines == [
            "2026-11-30T06:00:00.125Z reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)",
            "2026-11-30T06:00:00.125Z unreachable: no route beyond the local network (wlp2s0, 192.0.2.20)",
            "2026-11-30T06:00:00.125Z reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1; 2001:db8::20, gw fe80::1)",
        ])
        #expect(harness.standardError.text.isEmpty)
    }

    @Test(arguments: [(["watch"], 1), (["watch", "--json"], 2)])
    func aChangeOutsideThePrimaryRouteIsALineOnlyInJSON(arguments: [String], lineCount: Int) async {
        var ethernetUp = Fixtures.satisfiedWifi
        ethernetUp.interfaces[0].hasCarrier = true
        let harness = await watchUntilInterrupted(arguments, current: Fixtures.satisfiedWifi, script: [ethernetUp])
        #expect(harness.standardOutput.lines.count == lineCount)
    }

    @Test func watchJSONIsOneObjectPerLine() async {
        let harness = await watchUntilInterrupted(["watch", "--json"], current: Fixtures.noRoute, script: [Fixtures.cellular])
        #expect(harness.standardOutput.lines == [
            PathJSON.line(Fixtures.noRoute, at: Fixtures.time),
            PathJSON.line(Fixtures.cellular, at: Fixtures.time),
        ])
    }

    @Test func watchFailsWhenTheMonitorStopsOnItsOwn() async {
        let harness = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, script: [Fixtures.noRoute]))
        #expect(await harness.run(["watch"]) == 1)
        #expect(harness.standardOutput.lines.count == 2)
        #expect(harness.standardError.text == "reachability watch: the monitor stopped unexpectedly\n")
    }

    @Test func interruptEndsWatchWithExitZeroAndRemovesTheHandler() async {
        let harness = await watchUntilInterrupted(["watch"], current: Fixtures.satisfiedWifi, script: [Fixtures.noRoute])
        #expect(harness.standardOutput.lines.count == 2)
        #expect(!harness.interrupt(), "the handler is removed when watch returns")
    }
}
