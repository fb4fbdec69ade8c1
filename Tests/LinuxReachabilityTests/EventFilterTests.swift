import Testing
@testable import LinuxReachability
import TestSupport

/// Runs a classic BPF program the way the kernel does on a netlink datagram (only the opcodes
/// `EventFilter` emits); an out-of-bounds load drops, as in the kernel.
func runFilter(_ program: [EventFilter.Instruction], on packet: [UInt8]) -> UInt32 {
    var a: UInt32 = 0, x: UInt32 = 0
    var scratch = [UInt32](repeating: 0, count: 16)
    var pc = 0
    func load(_ offset: UInt32, _ size: Int) -> UInt32? {
        let start = Int(offset)
        guard start + size <= packet.count else { return nil }
        return packet[start..<(start + size)].reduce(0) { $0 << 8 | UInt32($1) }
    }
    while pc < program.count {
        let i = program[pc]
        pc += 1
        switch i.code {
        case EventFilter.loadWordAbsolute: guard let v = load(i.constant, 4) else { return 0 }; a = v
        case EventFilter.loadHalfAbsolute: guard let v = load(i.constant, 2) else { return 0 }; a = v
        case EventFilter.loadByteAbsolute: guard let v = load(i.constant, 1) else { return 0 }; a = v
        case EventFilter.loadLength: a = UInt32(packet.count)
        case EventFilter.loadImmediate: a = i.constant
        case EventFilter.loadScratch: a = scratch[Int(i.constant)]
        case EventFilter.storeScratch: scratch[Int(i.constant)] = a
        case EventFilter.subtract: a = a &- i.constant
        case EventFilter.add: a = a &+ i.constant
        case EventFilter.negate: a = 0 &- a
        case EventFilter.andX: a &= x
        case EventFilter.shiftLeftX: a = x >= 32 ? 0 : a << x
        case EventFilter.moveToX: x = a
        case EventFilter.jumpAlways: pc += Int(i.constant)
        case EventFilter.jumpEqual, EventFilter.jumpEqualX, EventFilter.jumpGreater, EventFilter.jumpGreaterOrEqual:
            let operand = i.code == EventFilter.jumpEqualX ? x : i.constant
            let taken: Bool
            switch i.code {
            case EventFilter.jumpGreater: taken = a > operand
            case EventFilter.jumpGreaterOrEqual: taken = a >= operand
            default: taken = a == operand
            }
            pc += Int(taken ? i.jumpIfTrue : i.jumpIfFalse)
        case EventFilter.returnConstant: return i.constant
        default:
            Issue.record("unknown opcode \(i.code)")
            return 0
        }
    }
    Issue.record("fell off the end")
    return 0
}

/// An rtnetlink route notification laid out as the kernel writes it: rtmsg, RTA_TABLE, RTA_DST.
func routeNotification(_ destination: String, _ length: UInt8, type: UInt16 = RTNetlink.newRoute) -> [UInt8] {
    let address = IPAddress.parse(destination)!
    var body: [UInt8] = [address.count == 4 ? RTNetlink.afInet : RTNetlink.afInet6, length, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0]
    body += RTNetlink.attributeBytes(type: RTNetlink.rtaTable, value: [254, 0, 0, 0])
    if length > 0 { body += RTNetlink.attributeBytes(type: RTNetlink.rtaDst, value: address) }
    return RTNetlink.header(length: 16 + body.count, type: type, flags: 0, sequence: 0) + body
}

func addressNotification(_ text: String, scope: UInt8, deleted: Bool = false) -> [UInt8] {
    let address = IPAddress.parse(text)!
    var body: [UInt8] = [address.count == 4 ? RTNetlink.afInet : RTNetlink.afInet6, 64, 0, scope, 3, 0, 0, 0]
    body += RTNetlink.attributeBytes(type: RTNetlink.ifaAddress, value: address)
    return RTNetlink.header(length: 16 + body.count, type: deleted ? RTNetlink.delAddr : RTNetlink.newAddr,
                            flags: 0, sequence: 0) + body
}

@Suite("Kernel-side event filter")
struct EventFilterTests {
    let program = EventFilter.program(destinations: [
        RoutePrefix(address: [8, 8, 8, 8])!, RoutePrefix(address: IPAddress.parse("2001:4860:4860::8888")!)!,
    ])

    @Test("route changes: kept only when the prefix covers a lookup destination", arguments: [
        ("0.0.0.0", 0, true), ("0.0.0.0", 1, true), ("128.0.0.0", 1, false), ("8.8.8.0", 24, true),
        ("8.8.8.8", 32, true), ("8.8.8.9", 32, false), ("172.16.0.1", 32, false), ("10.77.1.0", 24, false),
        ("::", 0, true), ("2000::", 3, true), ("2001:4860::", 32, true), ("2001:4860:4860::", 80, true),
        ("2001:4860:4860::8888", 128, true), ("2001:4860:4860::8889", 128, false), ("fe80::", 64, false),
        ("ff00::", 8, false), ("2001:db8::", 32, false),
    ] as [(String, UInt8, Bool)])
    func routes(destination: String, length: UInt8, kept: Bool) throws {
        let packet = routeNotification(destination, length)
        #expect((runFilter(program, on: packet) != 0) == kept)
        #expect((runFilter(program, on: routeNotification(destination, length, type: RTNetlink.delRoute)) != 0) == kept)
        // The user-space test agrees with the kernel-side one.
        guard case .routingChanged(let change) = RTNetlink.parse(packet).first?.message else {
            Issue.record("not parsed as a routing change")
            return
        }
        let probes = [RoutePrefix(address: [8, 8, 8, 8])!, RoutePrefix(address: IPAddress.parse("2001:4860:4860::8888")!)!]
        #expect(probes.contains(where: change.affects) == kept)
    }

    @Test func linkLocalAndHostAddressesAreDroppedOthersKept() {
        #expect(runFilter(program, on: addressNotification("fe80::1", scope: RTNetlink.scopeLink)) == 0)
        #expect(runFilter(program, on: addressNotification("fe80::1", scope: RTNetlink.scopeLink, deleted: true)) == 0)
        #expect(runFilter(program, on: addressNotification("127.0.0.1", scope: RTNetlink.scopeHost)) == 0)
        #expect(runFilter(program, on: addressNotification("10.77.1.2", scope: 0)) != 0)
        #expect(runFilter(program, on: addressNotification("2001:db8::2", scope: 0, deleted: true)) != 0)
    }

    @Test func linksRulesAndOddMessagesAreKept() {
        #expect(runFilter(program, on: Recorded.link) != 0)
        #expect(runFilter(program, on: RTNetlink.header(length: 28, type: RTNetlink.newRule, flags: 0, sequence: 0)
                          + [UInt8](repeating: 0, count: 12)) != 0)
        // A route message too short to hold RTA_DST where the filter looks: accepted, user space decides.
        let short = RTNetlink.header(length: 28, type: RTNetlink.newRoute, flags: 0, sequence: 0) + [2, 32] + [UInt8](repeating: 0, count: 10)
        #expect(runFilter(program, on: short) != 0)
        // Attributes in another order (RTA_DST first): accepted rather than misread.
        var body: [UInt8] = [2, 32, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0]
        body += RTNetlink.attributeBytes(type: RTNetlink.rtaDst, value: [172, 16, 0, 1])
        body += RTNetlink.attributeBytes(type: RTNetlink.rtaTable, value: [254, 0, 0, 0])
        #expect(runFilter(program, on: RTNetlink.header(length: 16 + body.count, type: RTNetlink.newRoute, flags: 0, sequence: 0) + body) != 0)
    }

    @Test("with the watched hosts' addresses: a route is kept exactly when user space would keep it",
          arguments: [1, 8, EventFilter.maximumDestinationsPerFamily])
    func manyDestinations(count: Int) {
        var generator = SplitMix(seed: UInt64(count))
        var destinations = [RoutePrefix(address: [8, 8, 8, 8])!, RoutePrefix(address: IPAddress.parse("2001:4860:4860::8888")!)!]
        for _ in 1..<count {
            destinations.append(RoutePrefix(address: [10, UInt8.random(in: 0...255, using: &generator), UInt8.random(in: 0...255, using: &generator), 1])!)
            destinations.append(RoutePrefix(address: [0xfd, 0x00] + (0..<14).map { _ in UInt8.random(in: 0...255, using: &generator) })!)
        }
        let program = EventFilter.program(destinations: destinations)
        #expect(program.count < 4096)
        var kept = 0
        for _ in 0..<3000 {
            // Prefixes near the destinations (so some cover them) and far from them.
            let base = destinations.randomElement(using: &generator)!
            let isIPv4 = base.family == .ipv4
            var address = (try? #require(RoutePrefix(address: isIPv4 ? [0, 0, 0, 0] : [UInt8](repeating: 0, count: 16))))!
            address.high = Bool.random(using: &generator) ? base.high : UInt64.random(in: 0...UInt64.max, using: &generator)
            address.low = Bool.random(using: &generator) ? base.low : UInt64.random(in: 0...UInt64.max, using: &generator)
            if isIPv4 { address.high &= 0xFFFF_FFFF_0000_0000; address.low = 0 }
            let length = UInt8.random(in: 1...(isIPv4 ? 32 : 128), using: &generator)
            var bytes = [UInt8](repeating: 0, count: isIPv4 ? 4 : 16)
            for index in bytes.indices {
                let word = index < 8 ? address.high : address.low
                bytes[index] = UInt8(truncatingIfNeeded: word >> (56 - 8 * UInt64(index % 8)))
            }
            let packet = routeNotification(IPAddress.format(bytes)!, length)
            guard case .routingChanged(let change) = RTNetlink.parse(packet).first?.message else {
                Issue.record("not parsed")
                return
            }
            let expected = destinations.contains(where: change.affects)
            if expected { kept += 1 }
            #expect((runFilter(program, on: packet) != 0) == expected, "\(IPAddress.format(bytes)!)/\(length)")
        }
        // Both outcomes were drawn many times.
        #expect(kept > 300 && kept < 2700, "\(kept) of 3000 kept")
    }

    @Test func beyondTheLimitEveryRouteOfThatFamilyIsKept() {
        let many = (0...EventFilter.maximumDestinationsPerFamily).map { RoutePrefix(address: [10, 0, UInt8($0), 1])! }
        let program = EventFilter.program(destinations: many + [RoutePrefix(address: IPAddress.parse("2001:4860:4860::8888")!)!])
        #expect(runFilter(program, on: routeNotification("172.16.0.0", 16)) != 0)
        #expect(runFilter(program, on: routeNotification("fd00::", 16)) == 0)
    }
}
