import Foundation
import LinuxReachability
import Testing
@testable import ReachabilityCLI
import ReachabilityAgent

@Suite("Path text and JSON")
struct PathOutputTests {
    @Test(arguments: [
        (Fixtures.satisfiedWifi, "reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)"),
        (Fixtures.noRoute, "unreachable: no route beyond the local network (wlp2s0, 192.0.2.20)"),
        (NetworkPath.unsatisfied(.noRoute), "unreachable: no route"),
        (NetworkPath.unsatisfied(.noCarrier), "unreachable: no carrier"),
        (Fixtures.ipv6OnlyWired, "reachable via wired (eth0, 2001:db8::7, gw fe80::1)"),
        (Fixtures.dualStackWifi, "reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1; 2001:db8::20, gw fe80::1)"),
        (Fixtures.wiredOnLink, "reachable via wired (eth0, 198.51.100.7)"),
        (Fixtures.cellular, "reachable via cellular (wwan0, 10.64.0.2, gw 10.64.0.1) expensive"),
    ])
    func summaryLine(path: NetworkPath, expected: String) {
        #expect(PathText.summary(path) == expected)
    }

    @Test("control characters in interface names are printed escaped")
    func hostileInterfaceNames() {
        var path = Fixtures.satisfiedWifi
        let hostile = "wl\u{1B}[2J\u{7}x\\y\u{9B}z\u{202E}"
        path.routes[0].interfaceName = hostile
        path.primaryInterface?.name = hostile
        path.interfaces[1].name = hostile
        path.interfaces[1].classificationReason = "override '\u{1B}]0;owned\u{7}=wifi' from --classify"
        let expected = "wl\\x1b[2J\\x07x\\\\y\\x9bz\\u{202e}"
        #expect(PathText.summary(path) == "reachable via wifi (\(expected), 192.0.2.20, gw 192.0.2.1)")
        let explanation = PathText.explanation(path)
        #expect(!explanation.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 || $0.value == 0x9B })
        #expect(explanation.contains("  \(expected) (index 3): wifi [primary]"))
        #expect(explanation.contains("evidence: override '\\x1b]0;owned\\x07=wifi'"))
        #expect(PathText.escaped("enp3s0") == "enp3s0")
    }

    @Test func watchLineStartsWithISO8601Milliseconds() {
        #expect(PathText.line(Fixtures.satisfiedWifi, at: Fixtures.time)
                == "2026-11-30T06:00:00.125Z reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)")
        #expect(PathText.line(Fixtures.noRoute, at: Fixtures.time) == "2026-11-30T06:00:00.125Z unreachable: no route beyond the local network (wlp2s0, 192.0.2.20)")
    }

    @Test func explanationShowsEvidenceStateAddressesAndRoutes() {
        #expect(PathText.explanation(Fixtures.satisfiedWifi) == """
            reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)
              expensive: no, roaming: no, ipv4: yes, ipv6: no
            connectivity:
              not checked (no --connectivity-url, reachability.conf or NetworkManager [connectivity])
            routes:
              ipv4: dev wlp2s0 (index 3), gw 192.0.2.1, src 192.0.2.20
              ipv6: none
            interfaces:
              eth0 (index 2): wired
                evidence: ARPHRD_ETHER
                expensive: no (not cellular-like)
                up: yes, carrier: no
                addresses: none
              wlp2s0 (index 3): wifi [primary]
                evidence: uevent DEVTYPE=wlan
                expensive: no (not cellular-like)
                up: yes, carrier: yes
                addresses: 192.0.2.20, fe80::20
            """)
    }

    @Test func jsonForSatisfiedWifiWithGateway() throws {
        let line = PathJSON.line(Fixtures.satisfiedWifi, at: Fixtures.time)
        #expect(!line.contains("\n"))
        #expect(line.hasPrefix(#"{"time":"2026-11-30T06:00:00.125Z","status":"satisfied","reason":null,"connection":"wifi","interface":"wlp2s0","index":3,"sourceAddress":"192.0.2.20","isExpensive":false,"isRoaming":false,"isConstrained":false,"supportsIPv4":true,"supportsIPv6":false,"gateways":["192.0.2.1"],"routes":[{"family":"ipv4","interface":"wlp2s0","index":3,"gateway":"192.0.2.1","sourceAddress":"192.0.2.20"}],"interfaces":[{"name":"eth0","index":2,"type":"wired","reason":"ARPHRD_ETHER","isUp":true,"hasCarrier":false,"addresses":[],"isExpensive":false,"costReason":"not cellular-like","metered":null,"cellular":null},"#))
        let object = try decode(line)
        let interfaces = try #require(object["interfaces"] as? [[String: Any]])
        #expect(interfaces.map { $0["name"] as? String } == ["eth0", "wlp2s0"])
        #expect(interfaces[1]["reason"] as? String == "uevent DEVTYPE=wlan")
        #expect(interfaces[1]["addresses"] as? [String] == ["192.0.2.20", "fe80::20"])
    }

    @Test func jsonForUnsatisfiedNoRoute() throws {
        let object = try decode(PathJSON.line(Fixtures.noRoute, at: Fixtures.time))
        #expect(object["status"] as? String == "unsatisfied")
        #expect(object["reason"] as? String == "no route")
        #expect(object["connection"] as? String == "unavailable")
        #expect(object["interface"] is NSNull)
        #expect(object["sourceAddress"] is NSNull)
        #expect(object["gateways"] as? [String] == [])
        #expect(object["supportsIPv4"] as? Bool == false)
        #expect((object["interfaces"] as? [Any])?.count == 2)
    }

    @Test func jsonForIPv6Only() throws {
        let object = try decode(PathJSON.line(Fixtures.ipv6OnlyWired, at: Fixtures.time))
        #expect(object["status"] as? String == "satisfied")
        #expect(object["connection"] as? String == "wired")
        #expect(object["interface"] as? String == "eth0")
        #expect(object["supportsIPv4"] as? Bool == false)
        #expect(object["supportsIPv6"] as? Bool == true)
        #expect(object["gateways"] as? [String] == ["fe80::1"])
        #expect(object["sourceAddress"] as? String == "2001:db8::7")
    }

    @Test func jsonKeyOrderIsStable() {
        let keys = ["time", "status", "reason", "connection", "interface", "index", "sourceAddress", "isExpensive",
                    "isRoaming", "isConstrained", "supportsIPv4", "supportsIPv6", "gateways", "routes", "interfaces", "connectivity",
                    "portalURL", "connectivityCheck", "sources"]
        for path in [Fixtures.satisfiedWifi, Fixtures.noRoute, Fixtures.cellular] {
            guard case .object(let members) = PathJSON.object(path, at: Fixtures.time) else {
                Issue.record("not an object"); continue
            }
            #expect(members.map(\.key) == keys)
        }
    }

    @Test(arguments: [
        ("plain", #""plain""#),
        ("quote\"back\\slash", #""quote\"back\\slash""#),
        ("line\nbreak\ttab\u{1}", #""line\nbreak\ttab\u0001""#),
        ("wlan-é", #""wlan-é""#),
    ])
    func jsonStringEscaping(value: String, expected: String) throws {
        #expect(JSONValue.string(value).serialized == expected)
        let parsed = try JSONSerialization.jsonObject(with: Data("[\(expected)]".utf8)) as? [String]
        #expect(parsed == [value])
    }

    private func decode(_ line: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }
}
