import Testing
@testable import LinuxReachability

/// Messages recorded from a 6.x kernel with a Python netlink socket inside a namespace holding a
/// veth `wlp1s0` (ifindex 3) with 10.77.1.2/24 and `default via 10.77.1.1 onlink`.
enum Recorded {
    static let link = bytes("d80500001000000001000000c3390000000001000300000043100100000000000b000300776c70317330000008000d00e803000005001000060000000500110000000000050043000000000008000400dc050000080032004400000008003300ffff000008001b000000000008001e000000000008003d000000000008001f000200000008002800ffff0000080029000000010008003a000000010008003f0000000100080040000000010008003b00f8ff070008003c00ffff0000080042000000000008002000020000000500210001000000080023000200000008002f000100000008003000010000000600440000000000060045000000000005002700000000000a000100b232d1bdce7a00000a000200ffffffffffff0000cc001700010000000000000002000000000000005a00000000000000b0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000006400070001000000020000005a000000b000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000c002b0005000200000000001000120009000100766574680000000008000500020000000c0006006e6f71756575650030031a008c00020088000100000000000000000000000000010000000100000001000000010000000000000001000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000010270000e80300000000000000000000000000000000000001000000a0020a00080001000000008014000500ffff00009cf101005c710000e8030000f40002000000000040000000dc05000001000000010000000100000001000000ffffffffa00f0000e803000000000000803a0900805101000300000058020000100000000000000001000000010000000100000060ea000000000000000000000000000000000000000000000000000001000000000000000000000010270000e8030000010000000000000000000000010000000000000000000000010000000000000000000000000000000000000080ee360000000000000000000100000000000000000000000000000000000000000000000004000000000000ffff0000ffffffff0100000000000000000000000000000034010300260000000000000001000000000000004c00000000000000000000000000000001000000000000000000000000000000000000000000000000000000000000000200000000000000020000000000000094000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001000000000000000200000000000000000000000000000000000000000000004c00000000000000940000000000000000000000000000000000000000000000000000000000000000000000000000003c00060007000000000000000000000000000000000000000000000002000000000000000000000000000000000000000000000000000000000000001400070000000000000000000000000000000000050008000000000024000e00000000000000000000000000000000000000000000000000000000000000000004003e8004004180")
    /// One RTM_NEWADDR followed by NLMSG_DONE in a second datagram.
    static let address = bytes("500000001400020001000000c33900000218800003000000080001000a4d0102080002000a4d01020b000300776c703173300000080008008000000014000600ffffffffffffffff9bf101009bf10100")
    static let done = bytes("140000000300020001000000c339000000000000")
    static let routeReply = bytes("700000001800000001000000c339000002200000fe0000010002000008000f00fe00000008000100080808080800040003000000080007000a4d0102080005000a4d0101080019000000000024000c000200000000000000000000000000000000000000000000000000000000000000")

    static func bytes(_ hex: String) -> [UInt8] {
        var result: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            result.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return result
    }
}

@Suite("rtnetlink parsing from recorded bytes")
struct RTNetlinkTests {
    @Test func parsesLink() throws {
        let messages = RTNetlink.parse(Recorded.link)
        #expect(messages.count == 1)
        guard case .link(let link, let deleted) = messages[0].message else {
            Issue.record("expected a link, got \(messages)")
            return
        }
        #expect(!deleted)
        #expect(link.name == "wlp1s0")
        #expect(link.index == 3)
        #expect(link.kind == "veth")
        #expect(link.hardwareType == 1)
        #expect(link.isUp)
        #expect(link.hasCarrier)
        #expect(!link.isLoopback)
    }

    @Test func parsesAddressAndDone() {
        let messages = RTNetlink.parse(Recorded.address) + RTNetlink.parse(Recorded.done)
        guard case .address(let address, deleted: false) = messages.first?.message else {
            Issue.record("expected an address, got \(messages)")
            return
        }
        #expect(address.family == .ipv4)
        #expect(address.presentation == "10.77.1.2")
        #expect(address.prefixLength == 24)
        #expect(address.index == 3)
        #expect(address.isUsable)
        #expect(messages.last?.message == .done)
    }

    @Test func parsesRouteReply() {
        let messages = RTNetlink.parse(Recorded.routeReply, routeReplies: true)
        guard case .route(let route) = messages.first?.message else {
            Issue.record("expected a route, got \(messages)")
            return
        }
        #expect(route.family == .ipv4)
        #expect(route.type == RTNetlink.rtnUnicast)
        #expect(route.outputInterface == 3)
        #expect(route.gateway.flatMap(IPAddress.format) == "10.77.1.1")
        #expect(route.preferredSource.flatMap(IPAddress.format) == "10.77.1.2")
        #expect(route.table == 254)
        #expect(!route.isLinkDown)
        // Without `routeReplies` the same message is a change to the prefix 8.8.8.8/32.
        guard case .routingChanged(.route(let prefix)) = RTNetlink.parse(Recorded.routeReply).first?.message else {
            Issue.record("expected a routing change")
            return
        }
        #expect(prefix == RoutePrefix(address: [8, 8, 8, 8]))
    }

    @Test("a route change matters only when its prefix covers a lookup destination")
    func routePrefixCoverage() throws {
        let v4 = try #require(RoutePrefix(address: [8, 8, 8, 8]))
        let v6 = try #require(RoutePrefix(address: IPAddress.parse("2001:4860:4860::8888")!))
        func prefix(_ text: String, _ length: UInt8) -> RoutePrefix {
            var prefix = RoutePrefix(address: IPAddress.parse(text)!)!
            prefix.length = length
            return prefix
        }
        #expect(prefix("0.0.0.0", 0).contains(v4))              // default
        #expect(prefix("0.0.0.0", 1).contains(v4))              // VPN split default 0/1
        #expect(!prefix("128.0.0.0", 1).contains(v4))
        #expect(prefix("8.8.8.0", 24).contains(v4))
        #expect(!prefix("172.16.0.1", 32).contains(v4))         // a storm of host routes elsewhere
        #expect(!prefix("0.0.0.0", 0).contains(v6))             // another family
        #expect(prefix("::", 0).contains(v6))
        #expect(prefix("2001:4860::", 32).contains(v6))
        #expect(!prefix("fe80::", 64).contains(v6))             // link-local routes on link down
        #expect(!prefix("ff00::", 8).contains(v6))              // multicast
        #expect(prefix("2001:4860:4860::8888", 128).contains(v6))
        #expect(!prefix("2001:4860:4860::8889", 128).contains(v6))
        #expect(prefix("2001:4860:4860::", 80).contains(v6))   // crosses into the low 64 bits
        #expect(RoutingChange.rule.affects(v4))
    }

    @Test("truncated or hostile input never crashes", arguments: [0, 1, 15, 16, 17, 40, 100])
    func truncated(length: Int) {
        let cut = Array(Recorded.link.prefix(length))
        let messages = RTNetlink.parse(cut)
        #expect(messages.count <= 1)
        var bogusLength = Recorded.address
        bogusLength[0] = 0xff  // claims more bytes than present
        #expect(RTNetlink.parse(bogusLength).isEmpty)
    }

    @Test func buildsLookupLikeIproute2() {
        let request = RTNetlink.routeLookup(destination: [8, 8, 8, 8], sequence: 7)
        #expect(request.count == 36)
        #expect(Array(request[0..<4]) == [36, 0, 0, 0])
        #expect(Array(request[4..<6]) == [26, 0])  // RTM_GETROUTE
        #expect(Array(request[16..<18]) == [2, 32])  // AF_INET, /32
        #expect(Array(request[28..<36]) == [8, 0, 1, 0, 8, 8, 8, 8])  // RTA_DST
        let dump = RTNetlink.dumpRequest(type: RTNetlink.getLink, sequence: 1)
        #expect(dump.count == 32)
        #expect(Array(dump[6..<8]) == [0x01, 0x03])  // NLM_F_REQUEST | NLM_F_DUMP
    }

    @Test func addressText() {
        #expect(IPAddress.parse("2001:db8::1").flatMap(IPAddress.format) == "2001:db8::1")
        #expect(IPAddress.parse("192.0.2.1") == [192, 0, 2, 1])
        #expect(IPAddress.parse("not an address") == nil)
    }
}
