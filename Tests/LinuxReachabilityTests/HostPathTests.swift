import Glibc
import Testing
@testable import LinuxReachability

extension Snapshot {
    func hostPath(_ lookups: [(String, LookupResult)]) -> NetworkPath {
        let interfaces = PathEvaluator.interfaces(table: table, classifications: classifications)
        return PathEvaluator.hostPath(
            lookups: lookups.map { .init(target: HostWatches.literal($0.0)!, result: $0.1) }, table: table,
            interfaces: interfaces,
            interface: { PathEvaluator.interface($0, table: table, classification: classifications[$0.index] ?? Classification(type: .loopback, reason: "test")) })
    }
}

func local(oif: Int32 = 1, source: String) -> LookupResult {
    .route(RouteInfo(family: source.contains(":") ? .ipv6 : .ipv4, type: RTNetlink.rtnLocal, flags: 0, outputInterface: oif,
                     gateway: nil, preferredSource: IPAddress.parse(source), table: 255))
}

@Suite("Paths to one host")
struct HostPathTests {
    @Test func aServerOnTheLocalNetworkNeedsNoDefaultRoute() {
        var s = Snapshot()
        s.link(2, "enp3s0", .wired, v4: "10.77.0.2")
        let path = s.hostPath([("10.77.0.1", route(oif: 2, source: "10.77.0.2"))])
        #expect(path.isSatisfied && path.connection == .wired)
        #expect(path.routes == [PathRoute(family: .ipv4, interfaceName: "enp3s0", interfaceIndex: 2, gateway: nil, sourceAddress: "10.77.0.2")])
    }

    @Test func loopbackAndOwnAddressesAreLocal() {
        var s = Snapshot()
        s.link(2, "enp3s0", .wired, v4: "10.77.0.2")
        let loopback = s.hostPath([("127.0.0.1", local(source: "127.0.0.1"))])
        #expect(loopback.isSatisfied && loopback.primaryInterface?.name == "lo" && loopback.primaryInterface?.type == .loopback)
        let own = s.hostPath([("10.77.0.2", local(source: "10.77.0.2"))])
        #expect(own.isSatisfied)
        // The kernel still answers "local" with lo down, and nothing arrives: not reachable.
        _ = s.table.apply(.link(LinkInfo(index: 1, name: "lo", flags: RTNetlink.iffLoopback, hardwareType: 772, kind: nil), deleted: false))
        let down = s.hostPath([("127.0.0.1", local(source: "127.0.0.1"))])
        #expect(!down.isSatisfied && down.unsatisfiedReason == .noInterfaceUp)
    }

    @Test("no route, a blackhole, no carrier, no source address")
    func unreachableHosts() {
        var s = Snapshot()
        s.link(2, "enp3s0", .wired, v4: "10.77.0.2")
        s.link(3, "enp4s0", .wired, carrier: false, v4: "10.78.0.2")
        s.link(4, "enp5s0", .wired)
        #expect(s.hostPath([("192.0.2.80", unreachable)]).unsatisfiedReason == .noRoute)
        let blackhole = LookupResult.route(RouteInfo(family: .ipv4, type: 6, flags: 0, outputInterface: 1, gateway: nil,
                                                     preferredSource: nil, table: 254))
        #expect(!s.hostPath([("192.0.2.80", blackhole)]).isSatisfied)
        #expect(s.hostPath([("10.78.0.1", route(oif: 3, source: "10.78.0.2"))]).unsatisfiedReason == .noCarrier)
        #expect(s.hostPath([("10.77.0.1", route(oif: 2, source: "10.77.0.2", linkDown: true))]).unsatisfiedReason == .noCarrier)
        #expect(s.hostPath([("10.79.0.1", route(oif: 4))]).unsatisfiedReason == .noAddress)
        // A link-local destination needs no usable address: the kernel sources from the link's own.
        #expect(s.hostPath([("fe80::1%enp5s0", route(.ipv6, oif: 4))]).isSatisfied)
    }

    @Test("the first address with a usable route decides; one route per family")
    func severalAddresses() {
        var s = Snapshot()
        s.link(2, "enp3s0", .wired, v4: "10.77.0.2", v6: "2001:db8::2")
        let path = s.hostPath([("2001:db8:1::1", unreachable), ("10.77.0.1", route(oif: 2, source: "10.77.0.2")),
                               ("10.77.0.9", route(oif: 2, source: "10.77.0.2")), ("2001:db8::1", route(.ipv6, oif: 2))])
        #expect(path.isSatisfied)
        #expect(path.routes.map(\.family) == [.ipv4, .ipv6])
        #expect(path.supportsIPv4 && path.supportsIPv6)
    }

    @Test("connectivity speaks for a host only through the gateway the check went through")
    func connectivityMerge() {
        var s = Snapshot()
        s.link(2, "enp3s0", .wired, v4: "10.77.0.2")
        var primary = s.evaluate([(.ipv4, route(oif: 2, gateway: "10.77.0.1", source: "10.77.0.2"))])
        primary.connectivity = .portal
        primary.portalURL = "http://portal.example/"
        primary.connectivityEvidence = ConnectivityEvidence(url: "http://check.example/", time: nil, answer: "HTTP 302")
        let internet = s.hostPath([("192.0.2.80", route(oif: 2, gateway: "10.77.0.1", source: "10.77.0.2"))])
        let merged = PathEvaluator.withConnectivity(internet, from: primary)
        #expect(merged.connectivity == .portal && merged.portalURL == "http://portal.example/" && merged.isConnectivityChecked)
        let lan = PathEvaluator.withConnectivity(s.hostPath([("10.77.0.9", route(oif: 2, source: "10.77.0.2"))]), from: primary)
        #expect(lan.connectivity == .unknown && lan.portalURL == nil && !lan.isConnectivityChecked)
        // Without a check, nothing is added.
        #expect(PathEvaluator.withConnectivity(internet, from: s.evaluate([(.ipv4, unreachable)])) == internet)
    }
}

@Suite("Which hosts are followed, and when names are resolved")
struct HostWatchesTests {
    let start = ContinuousClock.now

    @Test(arguments: [
        ("Server.Example", "server.example"), ("[2001:db8::1]", "2001:db8::1"), ("10.77.0.1", "10.77.0.1"),
        ("fe80::1%eth0", "fe80::1%eth0"), ("[fe80::1%25eth0]", "fe80::1%25eth0"), ("lan.example.", "lan.example"),
    ])
    func keys(text: String, key: String) {
        #expect(HostWatches.key(for: text) == key)
    }

    @Test(arguments: ["", "bad host", "a/b", "x\u{1B}y", String(repeating: "a", count: 254), "10.0.0.1%eth0", "fe80::1%"])
    func invalidHosts(text: String) {
        #expect(HostWatches.key(for: text) == nil)
        #expect(!HostPath.isValidHost(text))
    }

    @Test func literalsNeedNoResolverAndNamesAreResolvedOnce() {
        var hosts = HostWatches()
        let result1 = hosts.add("10.77.0.1", at: start)
        #expect(result1)
        let result2 = hosts.add("10.77.0.1", at: start)
        #expect(!result2)
        let result3 = hosts.add("server.example", at: start)
        #expect(result3)
        let result4 = hosts.resolutionsToStart(at: start)
        #expect(result4 == ["server.example"])
        let result5 = hosts.resolutionsToStart(at: start)
        #expect(result5.isEmpty, "already resolving")
        let result6 = hosts.resolved("server.example", .success([[10, 77, 0, 9], [10, 77, 0, 9], [10, 77, 0, 10]]), at: start)
        #expect(result6)
        #expect(hosts.watches["server.example"]?.targets.map(\.presentation) == ["10.77.0.9", "10.77.0.10"])
        #expect(hosts.prefixes.count == 3)
        // Another network: names again, literals never.
        hosts.primaryPathChanged()
        let result7 = hosts.resolutionsToStart(at: start)
        #expect(result7 == ["server.example"])
        let result8 = hosts.remove("10.77.0.1")
        #expect(!result8)
        let result9 = hosts.remove("10.77.0.1")
        #expect(result9)
        #expect(hosts.watches["10.77.0.1"] == nil)
    }

    @Test("a failure is retried from 1 s doubling to 30 s; addresses a name had are kept")
    func failures() {
        var hosts = HostWatches()
        _ = hosts.add("lan.example", at: start)
        var now = start
        var delays: [Duration] = []
        for _ in 0..<7 {
            let result10 = hosts.resolutionsToStart(at: now)
            #expect(result10 == ["lan.example"])
            _ = hosts.resolved("lan.example", .failure(.init(message: "Name or service not known")), at: now)
            #expect(hosts.watches["lan.example"]?.resolution == .failed("Name or service not known"))
            let due = hosts.deadline!
            delays.append(due - now)
            let result11 = hosts.resolutionsToStart(at: due - .milliseconds(1))
            #expect(result11.isEmpty)
            now = due
        }
        #expect(delays == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30)])
        _ = hosts.resolutionsToStart(at: now)
        _ = hosts.resolved("lan.example", .success([[10, 77, 0, 9]]), at: now)
        hosts.primaryPathChanged()
        _ = hosts.resolutionsToStart(at: now)
        let result12 = hosts.resolved("lan.example", .failure(.init(message: "Temporary failure in name resolution")), at: now)
        #expect(!result12)
        #expect(hosts.watches["lan.example"]?.resolution == .resolved)
        #expect(hosts.watches["lan.example"]?.targets.map(\.presentation) == ["10.77.0.9"])
    }

    @Test("a first lookup without an answer is reported after 10 s; at most 4 lookups at once; 8 addresses a name")
    func bounds() {
        var hosts = HostWatches()
        for index in 0..<6 { _ = hosts.add("host\(index).example", at: start) }
        let result13 = hosts.resolutionsToStart(at: start)
        #expect(result13.count == HostWatches.maximumConcurrentResolutions)
        #expect(hosts.deadline == start + HostWatches.firstAnswerTimeout)
        let result14 = hosts.expireFirstAnswers(at: start + .seconds(9))
        #expect(!result14)
        let result15 = hosts.expireFirstAnswers(at: start + .seconds(10))
        #expect(result15)
        #expect(hosts.watches["host0.example"]?.resolution == .failed("no answer from the resolver within 10 s"))
        _ = hosts.resolved("host0.example", .success((1...20).map { [10, 0, 0, UInt8($0)] }), at: start + .seconds(11))
        #expect(hosts.watches["host0.example"]?.targets.count == HostWatches.maximumTargets)
        #expect(hosts.watches["host0.example"]?.resolution == .resolved)
        let result16 = hosts.resolutionsToStart(at: start + .seconds(11))
        #expect(result16.count == 1, "a slot came free")
    }
}
