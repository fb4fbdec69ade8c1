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

    // MARK: conditions, parsed

    @Test(arguments: [
        ("eth1", "eth1:routable"),
        ("eth1:carrier", "eth1:carrier"),
        ("wlan0:ADDRESS", "wlan0:address"),
        ("br0:routable", "br0:routable"),
        ("enx0123456789ab", "enx0123456789ab:routable"),
    ])
    func interfaceConditions(text: String, expected: String) throws {
        #expect(try WaitPlan.InterfaceCondition.parse(text).get().description == expected)
    }

    @Test(arguments: ["", ":carrier", "eth1:up", "eth1:", "a/b", "has space", "sixteen-bytes-xx", "..", "eth1:carrier:x",
                            "a\u{1B}[31mb", "tab\tname", "ünïcode"])
    func badInterfaceConditions(text: String) async {
        let harness = Harness()
        #expect(await harness.run(["wait", "--interface", text]) == 64)
        #expect(harness.standardError.text.contains("is invalid for '--interface <name[:state]>'"))
    }

    @Test(arguments: [
        (["--dns-name", "bad name"], "--dns-name"),
        (["--dns-name", String(repeating: "a", count: 64) + ".example"], "--dns-name"),
        (["--dns-name", "a..b"], "--dns-name"),
        (["--ignore", ""], "--ignore"),
        (["--ignore", "a/b"], "--ignore"),
        (["--timeout", "soon"], "--timeout"),
    ])
    func badValues(arguments: [String], option: String) async {
        let harness = Harness()
        #expect(await harness.run(["wait"] + arguments) == 64)
        #expect(harness.standardError.text.contains("for '\(option)"))
    }

    @Test func optionsBecomeAPlan() throws {
        let arguments = ["--interface", "eth0:carrier", "--interface", "wlan0", "--any", "--ipv6", "--dns-name", "deb.debian.org",
                         "--ignore", "docker*", "--ignore", "virbr0", "--timeout", "0"]
        let wait = try WaitCommand(arguments: ParsedArguments.parse(arguments, options: WaitCommand.options))
        #expect(wait.plan.interfaces == [.init(name: "eth0", state: .carrier), .init(name: "wlan0", state: .routable)])
        #expect(wait.plan.needsAnyInterface)
        #expect(wait.plan.families == [.ipv6])
        #expect(wait.plan.checksDNS && wait.plan.dnsName == "deb.debian.org")
        #expect(wait.plan.ignored == ["docker*", "virbr0"])
        #expect(wait.timeoutDuration == nil)
        #expect(wait.monitor.includesAllInterfaces)
        let plain = try WaitCommand(arguments: ParsedArguments.parse(["--dns"], options: WaitCommand.options))
        #expect(plain.plan.checksDNS && plain.plan.dnsName == nil)
        #expect(plain.timeoutDuration == .seconds(120))
        #expect(!plain.monitor.includesAllInterfaces)
    }

    // MARK: the decision over snapshots

    static let lanDown = NetworkInterface(name: "eth1", index: 4, type: .wired, classificationReason: "ARPHRD_ETHER",
                                          isUp: true, hasCarrier: false, addresses: [])
    static let adminDown = NetworkInterface(name: "eth2", index: 6, type: .wired, classificationReason: "ARPHRD_ETHER",
                                            isUp: false, hasCarrier: false, addresses: [])
    static let linkLocalOnly = NetworkInterface(name: "wlan0", index: 7, type: .wifi, classificationReason: "uevent DEVTYPE=wlan",
                                                isUp: true, hasCarrier: true, addresses: ["fe80::7", "169.254.3.3"])
    static let v6Only = NetworkInterface(name: "wlan0", index: 7, type: .wifi, classificationReason: "uevent DEVTYPE=wlan",
                                         isUp: true, hasCarrier: true, addresses: ["fe80::7", "2001:db8::77"])

    /// The fixture's wifi path, with more interfaces listed (as `includesAllInterfaces` reports them).
    static func wifi(plus interfaces: [NetworkInterface]) -> NetworkPath {
        var path = Fixtures.satisfiedWifi
        path.interfaces += interfaces
        return path
    }

    static func plan(_ arguments: [String]) throws -> WaitPlan {
        try WaitCommand(arguments: ParsedArguments.parse(arguments, options: WaitCommand.options)).plan
    }

    @Test(arguments: [
        // Default: a routable default path; an unplugged second NIC does not matter.
        ([], wifi(plus: [lanDown]), []),
        ([], Fixtures.noRoute, ["no default route"]),
        ([], NetworkPath.unsatisfied(.noCarrier), ["no default route (no carrier)"]),
        (["--ignore", "wlp*"], Fixtures.satisfiedWifi, ["no default route (leaves only through ignored wlp2s0)"]),
        (["--ignore", "docker*"], Fixtures.satisfiedWifi, []),
        // Families.
        (["--ipv4"], Fixtures.satisfiedWifi, []),
        (["--ipv6"], Fixtures.satisfiedWifi, ["no IPv6 default route"]),
        (["--ipv6"], Fixtures.ipv6OnlyWired, []),
        (["--ipv4", "--ipv6"], Fixtures.ipv6OnlyWired, ["no IPv4 default route"]),
        (["--ipv4", "--ipv6"], Fixtures.dualStackWifi, []),
        (["--ipv4"], Fixtures.noRoute, ["no IPv4 default route"]),
        // Interfaces: all of them, or one with --any.
        (["--interface", "eth1"], wifi(plus: [lanDown]), ["eth1: no carrier"]),
        (["--interface", "eth2:carrier"], wifi(plus: [adminDown]), ["eth2: down"]),
        (["--interface", "eth9"], Fixtures.satisfiedWifi, ["eth9: no such interface yet"]),
        (["--interface", "wlp2s0", "--interface", "eth1"], wifi(plus: [lanDown]), ["eth1: no carrier"]),
        (["--interface", "wlp2s0", "--interface", "eth1", "--any"], wifi(plus: [lanDown]), []),
        (["--interface", "eth1", "--interface", "eth2", "--any"], wifi(plus: [lanDown, adminDown]),
         ["none of the interfaces: eth1: no carrier, eth2: down"]),
        (["--interface", "wlan0"], wifi(plus: [linkLocalOnly]), ["wlan0: only a link-local address"]),
        (["--interface", "wlan0:address"], wifi(plus: [linkLocalOnly]), []),
        (["--interface", "wlan0:carrier"], wifi(plus: [linkLocalOnly]), []),
        (["--interface", "wlan0", "--ipv4"], wifi(plus: [v6Only]), ["wlan0: no IPv4 address yet"]),
        (["--interface", "wlan0", "--ipv6"], NetworkPath.unsatisfied(.noRoute, interfaces: [v6Only]),
         ["no IPv6 default route"]),
        // An interface condition alone needs no default route.
        (["--interface", "wlan0"], NetworkPath.unsatisfied(.noRoute, interfaces: [v6Only]), []),
        // --require and friends.
        (["--require", "wired"], Fixtures.satisfiedWifi,
         ["path: not a reachable wired path (now reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1))"]),
        (["--not-expensive"], Fixtures.cellular,
         ["path: not a reachable path that is not expensive (now reachable via cellular (wwan0, 10.64.0.2, gw 10.64.0.1) expensive)"]),
    ] as [([String], NetworkPath, [String])])
    func missing(arguments: [String], path: NetworkPath, expected: [String]) throws {
        let missing = try Self.plan(arguments).missing(WaitPlan.Facts(path: path))
        #expect(missing == expected)
    }

    @Test func dnsAndHostConditions() throws {
        let dns = try Self.plan(["--dns"])
        #expect(dns.missing(.init(path: Fixtures.satisfiedWifi)) == ["DNS: not asked yet (waiting for a route)"])
        #expect(dns.missing(.init(path: Fixtures.satisfiedWifi, dns: .unanswered(["10.0.0.1 did not answer"])))
            == ["DNS: 10.0.0.1 did not answer"])
        #expect(dns.missing(.init(path: Fixtures.satisfiedWifi, dns: .noResolver("no nameserver in /etc/resolv.conf")))
            == ["DNS: no nameserver in /etc/resolv.conf"])
        #expect(dns.missing(.init(path: Fixtures.satisfiedWifi, dns: .answered(server: "10.0.0.1"))).isEmpty)
        // Both conditions named at once, as the waiting line shows them.
        #expect(dns.missing(.init(path: Fixtures.noRoute, dns: .answered(server: "10.0.0.1"))) == ["no default route"])

        let host = try Self.plan(["--host", "10.77.0.1"])
        let lan = HostPath(host: "10.77.0.1", addresses: ["10.77.0.1"], resolutionFailure: nil, path: Fixtures.wiredOnLink)
        let unreachable = HostPath(host: "10.77.0.1", addresses: ["10.77.0.1"], resolutionFailure: nil, path: .unsatisfied(.noCarrier))
        let unresolved = HostPath(host: "lan.example", addresses: [], resolutionFailure: "Name or service not known", path: nil)
        #expect(host.missing(.init(path: Fixtures.noRoute)) == ["10.77.0.1: no answer yet"])
        #expect(host.missing(.init(path: Fixtures.noRoute, hostPath: lan)).isEmpty)
        #expect(host.missing(.init(path: Fixtures.satisfiedWifi, hostPath: unreachable)) == ["10.77.0.1: no route (no carrier)"])
        #expect(try Self.plan(["--host", "lan.example"]).missing(.init(path: Fixtures.satisfiedWifi, hostPath: unresolved))
            == ["lan.example: cannot resolve (Name or service not known)"])
    }

    // MARK: the state machine

    @Test func machineGoesOnlineOnTheEventThatCompletesTheConditions() throws {
        var machine = WaitStateMachine(plan: try Self.plan(["--dns", "--interface", "eth1:carrier"]), timeout: .seconds(120),
                                       path: Self.wifi(plus: [Self.lanDown]))
        #expect(machine.start() == .keepWaiting)
        #expect(machine.handle(.dns(.unanswered(["10.0.0.1 did not answer"]))) == .keepWaiting)
        #expect(machine.handle(.tick(elapsed: .seconds(5)))
            == .report(elapsed: .seconds(5), missing: ["eth1: no carrier", "DNS: 10.0.0.1 did not answer"]))
        var plugged = Self.lanDown
        plugged.hasCarrier = true
        #expect(machine.handle(.path(Self.wifi(plus: [plugged]))) == .keepWaiting)
        #expect(machine.handle(.dns(.answered(server: "10.0.0.1"))) == .online)
        #expect(machine.isFinished)
        #expect(machine.handle(.tick(elapsed: .seconds(10))) == .keepWaiting)
    }

    @Test func machineNeverGoesOnlineBeforeTheConditionHolds() throws {
        var machine = WaitStateMachine(plan: try Self.plan([]), timeout: .seconds(3), path: Fixtures.noRoute)
        #expect(machine.start() == .keepWaiting)
        #expect(machine.handle(.path(.unsatisfied(.noCarrier))) == .keepWaiting)
        #expect(machine.handle(.path(Fixtures.noRoute)) == .keepWaiting)
        #expect(machine.handle(.tick(elapsed: .seconds(3))) == .timedOut(elapsed: .seconds(3), missing: ["no default route"]))
        #expect(machine.handle(.path(Fixtures.satisfiedWifi)) == .keepWaiting)

        var stopping = WaitStateMachine(plan: try Self.plan([]), timeout: nil, path: Fixtures.noRoute)
        #expect(stopping.handle(.monitorStopped) == .stopped(missing: ["no default route"]))
        var online = WaitStateMachine(plan: try Self.plan([]), timeout: nil, path: Fixtures.satisfiedWifi)
        #expect(online.start() == .online)
    }

    @Test(arguments: [
        (Duration.zero, Duration?.some(.seconds(120)), Duration?.some(.seconds(5))),
        (.seconds(5), .seconds(120), .seconds(10)),
        (.seconds(115), .seconds(120), .seconds(120)),
        (.seconds(120), .seconds(120), nil),
        (.zero, .milliseconds(300), .milliseconds(300)),
        (.seconds(10), .milliseconds(12_500), .milliseconds(12_500)),
        (.seconds(10), nil, .seconds(15)),
    ])
    func ticks(elapsed: Duration, timeout: Duration?, expected: Duration?) {
        #expect(WaitStateMachine.nextTick(after: elapsed, timeout: timeout) == expected)
    }

    // MARK: DNS, without sockets

    @Test func resolverConfiguration() {
        let text = """
            # written by dhclient
            search lan
            nameserver 10.0.0.1
            nameserver\tfe80::1%eth0
            nameserver not-an-address
            nameserver 10.0.0.1
            options edns0
            """
        #expect(ResolverProbe.nameservers(inResolverConfiguration: text) == ["10.0.0.1", "fe80::1"])
        #expect(ResolverProbe.nameservers(inResolverConfiguration: "").isEmpty)
    }

    @Test func queryAndReply() throws {
        let root = try #require(ResolverProbe.query(identifier: 0xBEEF, name: "."))
        #expect(root == [0xBE, 0xEF, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1])
        let named = try #require(ResolverProbe.query(identifier: 1, name: "deb.debian.org"))
        #expect(Array(named[12...]) == [3] + Array("deb".utf8) + [6] + Array("debian".utf8) + [3] + Array("org".utf8) + [0, 0, 2, 0, 1])
        #expect(ResolverProbe.query(identifier: 1, name: "a..b") == nil)
        #expect(ResolverProbe.query(identifier: 1, name: String(repeating: "x", count: 64)) == nil)
        // Replies: the identifier and the QR bit must match; NXDOMAIN is an answer, SERVFAIL is not.
        #expect(ResolverProbe.answer(to: 0xBEEF, reply: [0xBE, 0xEF, 0x81, 0x80] + Array(repeating: 0, count: 8)) == .answered)
        #expect(ResolverProbe.answer(to: 0xBEEF, reply: [0xBE, 0xEF, 0x81, 0x83] + Array(repeating: 0, count: 8)) == .answered)
        #expect(ResolverProbe.answer(to: 0xBEEF, reply: [0xBE, 0xEF, 0x81, 0x82] + Array(repeating: 0, count: 8)) == .failed(responseCode: 2))
        #expect(ResolverProbe.answer(to: 0xBEEF, reply: [0xBE, 0xEE, 0x81, 0x80] + Array(repeating: 0, count: 8)) == nil)
        #expect(ResolverProbe.answer(to: 0xBEEF, reply: [0xBE, 0xEF, 0x01, 0x00] + Array(repeating: 0, count: 8)) == nil)
        #expect(ResolverProbe.answer(to: 0xBEEF, reply: [0xBE, 0xEF, 0x81]) == nil)
    }

    @Test func dnsRoundAsksEachServerUntilOneAnswers() async {
        let files = ["/etc/resolv.conf": "nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n"]
        let check = WaitDNSCheck(name: ".", readFile: { files[$0] }, ask: { server, _, _ in
            switch server {
            case "10.0.0.1": return .silent(reason: "did not answer")
            case "10.0.0.2": return .failed(responseCode: 2)
            default: return .answered
            }
        })
        #expect(await check.round() == .answered(server: "10.0.0.3"))
        let silent = WaitDNSCheck(name: ".", readFile: { _ in "nameserver 10.0.0.1\nnameserver 10.0.0.2" }, ask: { server, _, _ in
            server == "10.0.0.1" ? .silent(reason: "did not answer") : .failed(responseCode: 5)
        })
        #expect(await silent.round() == .unanswered(["10.0.0.1 did not answer", "10.0.0.2 answered REFUSED"]))
        let none = WaitDNSCheck(name: ".", readFile: { _ in nil }, ask: { _, _, _ in .answered })
        #expect(await none.round() == .noResolver("no nameserver in /etc/resolv.conf"))
    }

    // MARK: the command

    @Test func exitsZeroAtOnceAndSilentlyWhenOnline() async {
        let source = ScriptedPathSource(current: Fixtures.satisfiedWifi, staysOpen: true)
        let harness = Harness(source: source)
        #expect(await harness.run(["wait", "--timeout", "10"]) == 0)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.text.isEmpty)
        #expect(source.isCancelled)
    }

    @Test func exitsZeroWhenALaterPathQualifies() async {
        let source = ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.cellular, Fixtures.satisfiedWifi],
                                        staysOpen: true)
        let harness = Harness(source: source)
        #expect(await harness.run(["wait", "--require", "wifi", "--not-expensive", "--timeout", "10"]) == 0)
        #expect(harness.standardError.text.isEmpty)
    }

    @Test func saysEveryFiveSecondsWhatIsMissingAndTimesOutWithTheReasonLast() async {
        // The scripted clock: every sleep returns at once, so ticks at 5 s, 10 s and the 12.5 s timeout.
        let source = ScriptedPathSource(current: Self.wifi(plus: [Self.lanDown]), staysOpen: true)
        let harness = Harness(source: source, sleep: Harness.returnsAtOnce)
        #expect(await harness.run(["wait", "--interface", "eth1", "--interface", "wlp2s0", "--timeout", "12.5"]) == 1)
        #expect(harness.standardOutput.text.isEmpty)
        #expect(harness.standardError.lines == [
            "reachability wait: waiting 5s: eth1: no carrier",
            "reachability wait: waiting 10s: eth1: no carrier",
            "reachability wait: timed out after 12.5s: eth1: no carrier",
        ])
    }

    @Test func jsonEvents() async {
        let waiting = Harness(source: ScriptedPathSource(current: Fixtures.noRoute, staysOpen: true), sleep: Harness.returnsAtOnce)
        #expect(await waiting.run(["wait", "--json", "--timeout", "5"]) == 1)
        let time = Fixtures.timeText
        #expect(waiting.standardOutput.lines == [
            #"{"schema":1,"time":"\#(time)","type":"wait","event":"waiting","elapsedMilliseconds":0,"missing":["no default route"]}"#,
            #"{"schema":1,"time":"\#(time)","type":"wait","event":"timedOut","elapsedMilliseconds":5000,"missing":["no default route"]}"#,
        ])
        #expect(waiting.standardError.lines == ["reachability wait: timed out after 5s: no default route"])

        let online = Harness(source: ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.satisfiedWifi], staysOpen: true))
        #expect(await online.run(["wait", "--json"]) == 0)
        #expect(online.standardOutput.lines.last == #"{"schema":1,"time":"\#(time)","type":"wait","event":"online","elapsedMilliseconds":0}"#)
        #expect(online.standardError.text.isEmpty)
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
        // What an unresolvable host's line says is in dnsAndHostConditions.
    }

    @Test(arguments: [["--host", "bad host"], ["--host", "a/b"], ["--host", "x.example", "--require", "internet"]])
    func waitForHostUsage(arguments: [String]) async {
        let harness = Harness()
        #expect(await harness.run(["wait"] + arguments) == 64)
        #expect(harness.standardError.text.contains("--host"))
    }

    @Test func exitsOneWhenTheMonitorStops() async {
        let source = ScriptedPathSource(current: Fixtures.noRoute, script: [Fixtures.ipv6OnlyWired])
        let harness = Harness(source: source)
        #expect(await harness.run(["wait", "--require", "wifi", "--timeout", "inf"]) == 1)
        #expect(harness.standardError.text == """
            reachability wait: the monitor stopped while waiting: path: not a reachable wifi path \
            (now reachable via wired (eth0, 2001:db8::7, gw fe80::1))

            """)
    }
}
