import Glibc
import Testing
@testable import LinuxReachability

/// Builds kernel snapshots by hand and checks the path the evaluator derives.
struct Snapshot {
    var table = LinkTable()
    var classifications: [Int32: Classification] = [:]

    mutating func link(_ index: Int32, _ name: String, _ type: InterfaceType, up: Bool = true, carrier: Bool = true,
                       v4: String? = nil, v6: String? = nil) {
        var flags: UInt32 = 0
        if up { flags |= RTNetlink.iffUp }
        if carrier { flags |= RTNetlink.iffLowerUp }
        _ = table.apply(.link(LinkInfo(index: index, name: name, flags: flags, hardwareType: 1, kind: nil), deleted: false))
        classifications[index] = Classification(type: type, reason: "test")
        for (text, family) in [(v4, AddressFamily.ipv4), (v6, .ipv6)] {
            guard let text, let bytes = IPAddress.parse(text) else { continue }
            _ = table.apply(.address(AddressInfo(index: index, family: family, address: bytes, prefixLength: 24, flags: 0, scope: 0),
                                     deleted: false))
        }
        _ = table.apply(.link(LinkInfo(index: 1, name: "lo", flags: RTNetlink.iffUp | RTNetlink.iffLoopback | RTNetlink.iffLowerUp,
                                       hardwareType: 772, kind: nil), deleted: false))
    }

    func evaluate(_ lookups: [(AddressFamily, LookupResult)], all: Bool = false) -> NetworkPath {
        PathEvaluator.evaluate(table: table, classifications: classifications, lookups: lookups, all: all)
    }
}

func route(_ family: AddressFamily = .ipv4, oif: Int32, gateway: String? = nil, source: String? = nil,
           linkDown: Bool = false) -> LookupResult {
    .route(RouteInfo(family: family, type: RTNetlink.rtnUnicast, flags: linkDown ? RTNetlink.rtnhFLinkdown : 0,
                     outputInterface: oif, gateway: gateway.flatMap(IPAddress.parse),
                     preferredSource: source.flatMap(IPAddress.parse), table: 254))
}

let unreachable = LookupResult.failed(-ENETUNREACH)

@Suite("Path evaluation from snapshots")
struct PathEvaluatorTests {
    @Test func satisfiedWifi() {
        var s = Snapshot()
        s.link(2, "wlp2s0", .wifi, v4: "192.0.2.20")
        s.link(3, "enp3s0", .wired, carrier: false)
        let path = s.evaluate([(.ipv4, route(oif: 2, gateway: "192.0.2.1", source: "192.0.2.20")), (.ipv6, unreachable)])
        #expect(path.isSatisfied)
        #expect(path.connection == .wifi)
        #expect(path.primaryInterface?.name == "wlp2s0")
        #expect(path.gateways == ["192.0.2.1"])
        #expect(path.supportsIPv4 && !path.supportsIPv6)
        #expect(!path.isExpensive)
        #expect(path.interfaces.map(\.name) == ["wlp2s0"])  // usable only
        #expect(path.availableInterfaces.map(\.name) == ["wlp2s0"])
        let all = s.evaluate([(.ipv4, route(oif: 2, gateway: "192.0.2.1", source: "192.0.2.20"))], all: true)
        #expect(all.interfaces.map(\.name) == ["wlp2s0", "enp3s0"])  // loopback excluded
    }

    @Test func cellularIsExpensive() {
        var s = Snapshot()
        s.link(4, "wwan0", .cellular, v4: "100.64.0.2")
        let path = s.evaluate([(.ipv4, route(oif: 4)), (.ipv6, unreachable)])
        #expect(path.connection == .cellular)
        #expect(path.isExpensive)
    }

    @Test func ipv6Only() {
        var s = Snapshot()
        s.link(2, "enp1s0", .wired, v6: "2001:db8::2")
        let path = s.evaluate([(.ipv4, unreachable), (.ipv6, route(.ipv6, oif: 2, gateway: "fe80::1"))])
        #expect(path.isSatisfied && path.supportsIPv6 && !path.supportsIPv4)
        #expect(path.primaryRoute?.family == .ipv6)
    }

    @Test("unsatisfied reasons, most basic missing piece first")
    func reasons() {
        var none = Snapshot()
        none.link(2, "enp1s0", .wired, up: false, carrier: false, v4: "10.0.0.2")
        #expect(none.evaluate([(.ipv4, unreachable)]).unsatisfiedReason == .noInterfaceUp)

        var noCarrier = Snapshot()
        noCarrier.link(2, "enp1s0", .wired, carrier: false, v4: "10.0.0.2")
        #expect(noCarrier.evaluate([(.ipv4, unreachable)]).unsatisfiedReason == .noCarrier)
        // The kernel keeps routing into a link without carrier: still unsatisfied.
        #expect(noCarrier.evaluate([(.ipv4, route(oif: 2, gateway: "10.0.0.1"))]).unsatisfiedReason == .noCarrier)
        var linkdown = Snapshot()
        linkdown.link(2, "enp1s0", .wired, v4: "10.0.0.2")
        #expect(linkdown.evaluate([(.ipv4, route(oif: 2, linkDown: true))]).unsatisfiedReason == .noCarrier)

        var noAddress = Snapshot()
        noAddress.link(2, "enp1s0", .wired)
        #expect(noAddress.evaluate([(.ipv4, unreachable)]).unsatisfiedReason == .noAddress)
        #expect(noAddress.evaluate([(.ipv4, route(oif: 2))]).unsatisfiedReason == .noAddress)

        var noRoute = Snapshot()
        noRoute.link(2, "enp1s0", .wired, v4: "10.0.0.2")
        let path = noRoute.evaluate([(.ipv4, unreachable), (.ipv6, unreachable)])
        #expect(path.unsatisfiedReason == .noRoute)
        #expect(path.connection == .unavailable)
        #expect(path.primaryInterface == nil)
    }

    @Test func vpnOverWifiIsWifi() {
        var s = Snapshot()
        s.link(2, "wlp2s0", .wifi, v4: "192.0.2.20")
        s.link(9, "tun0", .other, v4: "10.8.0.2")
        let path = s.evaluate([(.ipv4, route(oif: 9))])
        #expect(path.primaryInterface?.name == "tun0")
        #expect(path.connection == .wifi)
    }

    @Test("a change of gateway or interface is a different path even with the same type")
    func changesAreVisible() {
        var s = Snapshot()
        s.link(2, "wlp2s0", .wifi, v4: "192.0.2.20")
        s.link(3, "wlp3s0", .wifi, v4: "198.51.100.7")
        let a = s.evaluate([(.ipv4, route(oif: 2, gateway: "192.0.2.1"))])
        let b = s.evaluate([(.ipv4, route(oif: 2, gateway: "192.0.2.254"))])
        let c = s.evaluate([(.ipv4, route(oif: 3, gateway: "198.51.100.1"))])
        #expect(a.connection == b.connection && b.connection == c.connection)
        #expect(a != b && b != c)
        #expect(a == s.evaluate([(.ipv4, route(oif: 2, gateway: "192.0.2.1"))]))
    }

    @Test func tableForgetsDeletedLinksAndTheirAddresses() {
        var s = Snapshot()
        s.link(2, "enp1s0", .wired, v4: "10.0.0.2")
        let gone = LinkInfo(index: 2, name: "enp1s0", flags: 0, hardwareType: 1)
        let first = s.table.apply(.link(gone, deleted: true))
        #expect(first == .path)
        #expect(s.table.addresses.isEmpty)
        #expect(s.table.usableLinks.isEmpty)
        let second = s.table.apply(.link(gone, deleted: true))
        #expect(second == .none)
        // Re-applying identical state is not a change.
        let lo = s.table.links[1]!
        let again = s.table.apply(.link(lo, deleted: false))
        #expect(again == .none)
    }

    @Test("only changes the path can see are path changes")
    func changeRelevance() {
        var s = Snapshot()
        s.link(2, "enp1s0", .wired, v4: "10.0.0.2")
        let linkLocal = AddressInfo(index: 2, family: .ipv6, address: IPAddress.parse("fe80::2")!, prefixLength: 64,
                                    flags: 0, scope: RTNetlink.scopeLink)
        #expect(s.table.apply(.address(linkLocal, deleted: false)) == .detail)
        #expect(s.table.apply(.address(linkLocal, deleted: true)) == .detail)
        // A container's veth pair appears down, and goes: nothing the path shows.
        let veth = LinkInfo(index: 40, name: "veth1a2b", flags: 0, hardwareType: 1, kind: "veth")
        #expect(s.table.apply(.link(veth, deleted: false)) == .detail)
        #expect(s.table.apply(.link(veth, deleted: true)) == .detail)
        // IFF_RUNNING / PROMISC flips on a usable link are not shown either.
        var promiscuous = s.table.links[2]!
        promiscuous.flags |= 0x100
        #expect(s.table.apply(.link(promiscuous, deleted: false)) == .detail)
        // Going down is.
        var down = promiscuous
        down.flags &= ~RTNetlink.iffUp
        #expect(s.table.apply(.link(down, deleted: false)) == .path)
        #expect(!s.table.hasLink(atLeast: .up))
        #expect(s.evaluate([(.ipv4, unreachable)]).unsatisfiedReason == .noInterfaceUp)
        // An up link without carrier moves the reason from "no interface up" to "no carrier".
        let noCarrier = LinkInfo(index: 41, name: "enp9s0", flags: RTNetlink.iffUp, hardwareType: 1)
        #expect(s.table.apply(.link(noCarrier, deleted: false)) == .path)
        #expect(s.evaluate([(.ipv4, unreachable)]).unsatisfiedReason == .noCarrier)
        #expect(s.table.readinessCounts == [0, 1, 0, 0])
    }

    @Test func tentativeAndLinkLocalAddressesDoNotCount() {
        let tentative = AddressInfo(index: 2, family: .ipv6, address: IPAddress.parse("2001:db8::5")!, prefixLength: 64,
                                    flags: RTNetlink.ifaFTentative, scope: 0)
        let linkLocal = AddressInfo(index: 2, family: .ipv6, address: IPAddress.parse("fe80::1")!, prefixLength: 64,
                                    flags: 0, scope: RTNetlink.scopeLink)
        #expect(!tentative.isUsable)
        #expect(!linkLocal.isUsable)
    }
}

@Suite("Overflow resynchronisation")
struct ResyncStateMachineTests {
    @Test func liveAppliesMessages() {
        var machine = ResyncStateMachine()
        #expect(machine.messagesArrived() == .apply)
        #expect(machine.quietTimerFired(drainedMore: false) == .nothing)
    }

    @Test func overflowDiscardsUntilQuietThenRedumps() {
        var machine = ResyncStateMachine()
        #expect(machine.overflowed() == .armQuietTimer)
        #expect(machine.messagesArrived() == .discard)
        // Traffic since the timer was armed: wait another quiet period.
        #expect(machine.quietTimerFired(drainedMore: false) == .armQuietTimer)
        // A last drain found more: still not quiet.
        #expect(machine.quietTimerFired(drainedMore: true) == .armQuietTimer)
        #expect(machine.quietTimerFired(drainedMore: false) == .redump)
        #expect(machine.isLive)
        #expect(machine.messagesArrived() == .apply)
    }

    @Test func overflowDuringOverflowRestartsTheWait() {
        var machine = ResyncStateMachine()
        _ = machine.overflowed()
        _ = machine.messagesArrived()
        #expect(machine.overflowed() == .armQuietTimer)
        #expect(machine.quietTimerFired(drainedMore: false) == .redump)
    }
}
