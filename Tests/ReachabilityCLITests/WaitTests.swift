import LinuxReachability
import Testing
@testable import ReachabilityCLI

@Suite("wait")
struct WaitTests {
    @Test(arguments: [
        (PathRequirement(), Fixtures.satisfiedWifi, true),
        (PathRequirement(), Fixtures.noRoute, false),
        (PathRequirement(connection: .wifi), Fixtures.satisfiedWifi, true),
        (PathRequirement(connection: .wifi), Fixtures.ipv6OnlyWired, false),
        (PathRequirement(connection: .wired), Fixtures.ipv6OnlyWired, true),
        (PathRequirement(connection: .cellular), Fixtures.cellular, true),
        (PathRequirement(connection: .cellular, allowsExpensive: false), Fixtures.cellular, false),
        (PathRequirement(allowsExpensive: false), Fixtures.cellular, false),
        (PathRequirement(allowsExpensive: false), Fixtures.wiredOnLink, true),
        (PathRequirement(allowsRoaming: false), Fixtures.cellular, true),
        (PathRequirement(allowsRoaming: false), Fixtures.roamingCellular, false),
        (PathRequirement(allowsExpensive: false), Fixtures.meteredWifi, false),
        (PathRequirement(connection: .wifi), Fixtures.meteredWifi, true),
    ])
    func qualification(requirement: PathRequirement, path: NetworkPath, expected: Bool) {
        #expect(requirement.isMet(by: path) == expected)
    }

    static func stream(_ paths: [NetworkPath], staysOpen: Bool) -> AsyncStream<NetworkPath> {
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        for path in paths { continuation.yield(path) }
        if !staysOpen { continuation.finish() }
        return stream
    }

    @Test func currentPathQualifiesImmediately() async {
        let outcome = await PathRequirement().firstQualifyingPath(
            current: Fixtures.satisfiedWifi, updates: Self.stream([], staysOpen: true), timeout: .zero,
            sleep: Harness.neverReturns)
        #expect(outcome == .qualified(Fixtures.satisfiedWifi))
    }

    @Test func aLaterPathQualifies() async {
        let requirement = PathRequirement(connection: .wifi, allowsExpensive: false)
        let updates = Self.stream([Fixtures.noRoute, Fixtures.cellular, Fixtures.ipv6OnlyWired, Fixtures.dualStackWifi],
                                  staysOpen: true)
        let outcome = await requirement.firstQualifyingPath(
            current: Fixtures.noRoute, updates: updates, timeout: .seconds(30), sleep: Harness.neverReturns)
        #expect(outcome == .qualified(Fixtures.dualStackWifi))
    }

    @Test func notExpensiveSkipsCellular() async {
        let updates = Self.stream([Fixtures.cellular, Fixtures.wiredOnLink], staysOpen: true)
        let outcome = await PathRequirement(allowsExpensive: false).firstQualifyingPath(
            current: Fixtures.cellular, updates: updates, timeout: nil, sleep: Harness.neverReturns)
        #expect(outcome == .qualified(Fixtures.wiredOnLink))
    }

    @Test func timesOutWhenNothingQualifies() async {
        let updates = Self.stream([Fixtures.noRoute, Fixtures.ipv6OnlyWired], staysOpen: true)
        let outcome = await PathRequirement(connection: .wifi).firstQualifyingPath(
            current: Fixtures.noRoute, updates: updates, timeout: .seconds(5), sleep: Harness.returnsAtOnce)
        #expect(outcome == .timedOut)
    }

    @Test func zeroTimeoutChecksOnlyTheCurrentPath() async {
        let outcome = await PathRequirement().firstQualifyingPath(
            current: Fixtures.noRoute, updates: Self.stream([Fixtures.satisfiedWifi], staysOpen: true),
            timeout: .zero, sleep: Harness.neverReturns)
        #expect(outcome == .timedOut)
    }

    @Test func endsWhenTheMonitorStops() async {
        let outcome = await PathRequirement().firstQualifyingPath(
            current: Fixtures.noRoute, updates: Self.stream([Fixtures.noRoute], staysOpen: false),
            timeout: nil, sleep: Harness.neverReturns)
        #expect(outcome == .ended)
    }

    @Test func waitCommandExitsZeroWhenQualified() async {
        let source = ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.cellular, Fixtures.satisfiedWifi],
                                        staysOpen: true)
        let harness = Harness(source: source)
        #expect(await harness.run(["wait", "--require", "wifi", "--not-expensive", "--timeout", "10"]) == 0)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.text.isEmpty)
        #expect(source.isCancelled)
    }

    @Test func waitCommandExitsOneOnTimeoutWithADiagnostic() async {
        let source = ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.cellular], staysOpen: true)
        let harness = Harness(source: source, sleep: Harness.returnsAtOnce)
        #expect(await harness.run(["wait", "--not-expensive", "--timeout=2.5"]) == 1)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.text == """
            reachability wait: timed out after 2.5s waiting for a reachable path that is not expensive; \
            last path: unreachable: no route beyond the local network (wlp2s0, 192.0.2.20)

            """)
    }

    @Test("wait --host follows the route to the host, not the default route")
    func waitForHost() async {
        let lan = HostPath(host: "10.77.0.1", addresses: ["10.77.0.1"], resolutionFailure: nil, path: Fixtures.wiredOnLink)
        let unreachable = HostPath(host: "10.77.0.1", addresses: ["10.77.0.1"], resolutionFailure: nil, path: .unsatisfied(.noCarrier))
        // No default route at all, and the host is reachable: exit 0.
        let source = ScriptedPathSource(current: Fixtures.noRoute, hostScript: [unreachable, lan], staysOpen: true)
        let harness = Harness(source: source)
        #expect(await harness.run(["wait", "--host", "10.77.0.1", "--timeout", "10"]) == 0)
        #expect(harness.standardError.text.isEmpty)
        // A satisfied default route does not help an unreachable host; the diagnostic names it.
        // (The script ends, so the outcome comes after every answer was seen, whatever the timing.)
        let unresolved = HostPath(host: "lan.example", addresses: [], resolutionFailure: "Name or service not known", path: nil)
        let ended = Harness(source: ScriptedPathSource(current: Fixtures.satisfiedWifi, hostScript: [unresolved]))
        #expect(await ended.run(["wait", "--host", "lan.example", "--timeout", "inf"]) == 1)
        #expect(ended.standardError.text == """
            reachability wait: the monitor stopped before finding a reachable path to lan.example; \
            last path: cannot resolve lan.example: Name or service not known

            """)
        // --timeout 0 checks the host's first answer.
        let once = Harness(source: ScriptedPathSource(current: Fixtures.noRoute, hostScript: [lan], staysOpen: true))
        #expect(await once.run(["wait", "--host", "10.77.0.1", "--timeout", "0"]) == 0)
    }

    @Test(arguments: [["--host", "bad host"], ["--host", "a/b"], ["--host", "x.example", "--require", "internet"]])
    func waitForHostUsage(arguments: [String]) async {
        let harness = Harness()
        #expect(await harness.run(["wait"] + arguments) == 64)
        #expect(harness.standardError.text.contains("--host"))
    }

    @Test func waitCommandExitsOneWhenTheMonitorStops() async {
        let source = ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.ipv6OnlyWired])
        let harness = Harness(source: source)
        #expect(await harness.run(["wait", "--require", "wifi", "--timeout", "inf"]) == 1)
        #expect(harness.standardError.text == """
            reachability wait: the monitor stopped before finding a reachable wifi path; \
            last path: unreachable: no route beyond the local network (wlp2s0, 192.0.2.20)

            """)
    }
}
