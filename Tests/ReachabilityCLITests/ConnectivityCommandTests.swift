import Foundation
import LinuxReachability
import Testing
@testable import ReachabilityCLI
import ReachabilityAgent

extension Fixtures {
    static func checked(_ path: NetworkPath, _ connectivity: Connectivity, portal: String? = nil,
                        answer: String = "HTTP 204 from 192.0.2.9:80 via wlp2s0 (192.0.2.20) in 3 ms") -> NetworkPath {
        var path = path
        path.connectivity = connectivity
        path.portalURL = portal
        path.connectivityEvidence = ConnectivityEvidence(url: "http://192.0.2.9/check", time: time, answer: answer)
        return path
    }
}

@Suite("Connectivity: configuration, output, wait")
struct ConnectivityCommandTests {
    @Test func reachabilityConfParses() throws {
        let settings = try ConnectivityConfiguration.parseReachabilityConf("""
            # check like NetworkManager
            connectivity-url = http://192.0.2.9/nm
            connectivity-response=NetworkManager is online
            connectivity-interval=60
            connectivity-timeout=2.5
            """, path: "/etc/reachability/reachability.conf")
        #expect(settings.url == "http://192.0.2.9/nm")
        #expect(settings.response == "NetworkManager is online")
        #expect(settings.interval == .seconds(60))
        #expect(settings.timeout == .milliseconds(2500))
        #expect(settings.source == "/etc/reachability/reachability.conf:2")
        #expect(throws: ConnectivityConfiguration.ConfigurationError(
            description: "/x.conf:1: unknown key 'connectivity-uri' (expected connectivity-url, connectivity-response, connectivity-interval or connectivity-timeout)")) {
            try ConnectivityConfiguration.parseReachabilityConf("connectivity-uri=http://x/", path: "/x.conf")
        }
        #expect(throws: ConnectivityConfiguration.ConfigurationError.self) {
            try ConnectivityConfiguration.parseReachabilityConf("connectivity-interval=0", path: "/x.conf")
        }
    }

    @Test("connectivity-interval is whole seconds from 1 s to a week, as NetworkManager's",
          arguments: ["0.001", "0.5", "1.5", "1e3", "0", "-1", "604801", "99999999999999999999", "300s", "", "+1"])
    func intervalBound(value: String) {
        do {
            _ = try ConnectivityConfiguration.parseReachabilityConf("connectivity-interval=\(value)", path: "/x.conf")
            Issue.record("accepted connectivity-interval=\(value)")
        } catch {
            #expect(error.description.hasPrefix("/x.conf:1: connectivity-interval: expected whole seconds from 1 to 604800, got '\(value)' (a week, NetworkManager's longest)"))
            #expect(error.description.contains("connectivity-url=none") == (value == "0"))
        }
    }

    @Test func intervalBoundsAccepted() throws {
        #expect(try ConnectivityConfiguration.parseReachabilityConf("connectivity-interval=1", path: "/x").interval == .seconds(1))
        #expect(try ConnectivityConfiguration.parseReachabilityConf("connectivity-interval=604800", path: "/x").interval == .seconds(604_800))
        // The library refuses a sub-second interval too.
        #expect(throws: ReachabilityError.self) { try ConnectivityCheck(url: "http://192.0.2.9/", interval: .milliseconds(1)) }
        // NetworkManager's own reading: junk is its default 300 s, more than a week is a week.
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[connectivity]\nuri=http://x/\ninterval=0.001\n")])?.interval == .seconds(300))
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[connectivity]\nuri=http://x/\ninterval=9999999\n")])?.interval == .seconds(604_800))
        // An empty response= expects 204 (or an empty 200), as NetworkManager does.
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[connectivity]\nuri=http://x/\nresponse=\n")])?.response == "")
    }

    @Test("NetworkManager: later files win, /etc hides the same name elsewhere, disabled means off")
    func networkManager() {
        let files = [
            "/etc/NetworkManager/NetworkManager.conf": "[main]\nplugins=ifupdown\n[connectivity]\nuri=http://main/\n",
            "/usr/lib/NetworkManager/conf.d/20-connectivity-debian.conf": "[connectivity]\nuri=http://debian/nm\n",
            "/etc/NetworkManager/conf.d/20-connectivity-debian.conf": "[connectivity]\nuri=http://local/nm\ninterval=60\n",
            "/usr/lib/NetworkManager/conf.d/10-other.conf": "[connectivity]\nresponse=hello\n",
        ]
        let names = ConnectivityConfiguration.networkManagerFiles(environment: [:]) { directory in
            files.keys.filter { ($0 as NSString).deletingLastPathComponent == directory }.map { ($0 as NSString).lastPathComponent }
        }
        #expect(names == ["/etc/NetworkManager/NetworkManager.conf", "/usr/lib/NetworkManager/conf.d/10-other.conf",
                          "/etc/NetworkManager/conf.d/20-connectivity-debian.conf"])
        let settings = ConnectivityConfiguration.parseNetworkManager(names.map { ($0, files[$0]!) })
        #expect(settings?.url == "http://local/nm")
        #expect(settings?.response == "hello")
        #expect(settings?.interval == .seconds(60))
        // NetworkManager's default response when none is set.
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[connectivity]\nuri=http://x/\n")])?.response
                == "NetworkManager is online")
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[connectivity]\nuri=http://x/\nenabled=false\n")]) == nil)
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[connectivity]\nuri=http://x/\ninterval=0\n")]) == nil)
        #expect(ConnectivityConfiguration.parseNetworkManager([("/a", "[main]\nuri=http://x/\n")]) == nil)
    }

    @Test("the command line wins over reachability.conf, which wins over NetworkManager; nothing configured is no check")
    func precedence() async throws {
        let nm = ["/etc/NetworkManager/NetworkManager.conf": "[connectivity]\nuri=http://nm.example/check\ninterval=30\n"]
        var harness = Harness(files: nm)
        #expect(await harness.run(["status"]) == 0)
        var check = try #require(harness.configurations.last?.connectivityCheck)
        #expect(check.url == "http://nm.example/check" && check.expectedResponse == "NetworkManager is online")
        #expect(check.interval == .seconds(30))

        harness = Harness(files: nm.merging(["/etc/reachability/reachability.conf": "connectivity-url=http://etc.example/\n"]) { $1 })
        #expect(await harness.run(["status"]) == 0)
        check = try #require(harness.configurations.last?.connectivityCheck)
        #expect(check.url == "http://etc.example/" && check.expectedResponse == nil)

        harness = Harness(files: nm.merging(["/home/tester/.config/reachability/reachability.conf": "connectivity-url=none\n"]) { $1 })
        #expect(await harness.run(["status"]) == 0)
        #expect(harness.configurations.last?.connectivityCheck == nil)

        harness = Harness(files: nm)
        #expect(await harness.run(["status", "--connectivity-url", "http://[2001:db8::9]:8080/x", "--connectivity-response", "ok"]) == 0)
        check = try #require(harness.configurations.last?.connectivityCheck)
        #expect(check.url == "http://[2001:db8::9]:8080/x" && check.expectedResponse == "ok")

        harness = Harness()
        #expect(await harness.run(["status"]) == 0)
        #expect(harness.configurations.last?.connectivityCheck == nil)
    }

    @Test func badValuesAreClearErrors() async {
        var harness = Harness()
        #expect(await harness.run(["status", "--connectivity-url", "https://check.example/"]) == 64)
        #expect(harness.standardError.text.contains("https is not supported"))
        harness = Harness(files: ["/etc/reachability/reachability.conf": "connectivity-url=ftp://x/\n"])
        #expect(await harness.run(["status"]) == 78)
        #expect(harness.standardError.text.contains("/etc/reachability/reachability.conf:1"))
    }

    @Test func textAndJSONSayIt() throws {
        let portal = Fixtures.checked(Fixtures.satisfiedWifi, .portal, portal: "http://portal.example/login\u{1B}[2J",
                                      answer: "HTTP 302 (portal at http://portal.example/login)")
        #expect(PathText.summary(portal)
                == "reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1), internet: portal, log in at http://portal.example/login\\x1b[2J")
        #expect(PathText.summary(Fixtures.checked(Fixtures.satisfiedWifi, .full)).hasSuffix("), internet: full"))
        #expect(PathText.summary(Fixtures.checked(Fixtures.satisfiedWifi, .unknown)).hasSuffix(", internet: checking"))
        #expect(PathText.summary(Fixtures.satisfiedWifi) == "reachable via wifi (wlp2s0, 192.0.2.20, gw 192.0.2.1)")
        let explanation = PathText.explanation(Fixtures.checked(Fixtures.satisfiedWifi, .full))
        #expect(explanation.contains("""
            connectivity:
              internet: full
              check: GET http://192.0.2.9/check
              last answer: HTTP 204 from 192.0.2.9:80 via wlp2s0 (192.0.2.20) in 3 ms at 2026-11-30T06:00:00.125Z
            """))
        let object = try #require(JSONSerialization.jsonObject(with: Data(PathJSON.line(portal, at: Fixtures.time).utf8)) as? [String: Any])
        #expect(object["connectivity"] as? String == "portal")
        #expect(object["portalURL"] as? String == "http://portal.example/login\u{1B}[2J")
        let evidence = try #require(object["connectivityCheck"] as? [String: Any])
        #expect(evidence["url"] as? String == "http://192.0.2.9/check")
        let unchecked = try #require(JSONSerialization.jsonObject(with: Data(PathJSON.line(Fixtures.satisfiedWifi, at: Fixtures.time).utf8)) as? [String: Any])
        #expect(unchecked["connectivity"] as? String == "unknown")
        #expect(unchecked["connectivityCheck"] is NSNull)
    }

    @Test func waitRequireInternet() async {
        let harness = Harness()
        #expect(await harness.run(["wait", "--require", "internet", "--timeout", "0"]) == 64)
        #expect(harness.standardError.text.contains("--require internet needs a connectivity check"))

        let portal = Fixtures.checked(Fixtures.satisfiedWifi, .portal, portal: "http://p/")
        let full = Fixtures.checked(Fixtures.satisfiedWifi, .full)
        let source = ScriptedPathSource(current: portal, script: [Fixtures.checked(Fixtures.satisfiedWifi, .limited), full])
        let waiting = Harness(source: source)
        #expect(await waiting.run(["wait", "--require", "internet", "--connectivity-url", "http://192.0.2.9/check"]) == 0)
        #expect(PathRequirement(connection: .internet).isMet(by: full))
        #expect(!PathRequirement(connection: .internet).isMet(by: portal))
    }

    @Test("a download waiting behind a portal says where to log in; path events carry connectivity")
    func downloadEventsNameThePortal() throws {
        let facts = EventSchema.DownloadFacts(id: "1", url: "http://x/f", file: "/tmp/f", bytes: 0, total: nil)
        let portal = Fixtures.checked(Fixtures.satisfiedWifi, .portal, portal: "http://portal.example/login")
        let waiting = try #require(JSONSerialization.jsonObject(with: Data(EventSchema.downloadLine(
            .waitingForConnectivity, facts, at: Fixtures.time, path: portal).utf8)) as? [String: Any])
        #expect(waiting["event"] as? String == "waiting")
        #expect(waiting["reason"] as? String == "portal")
        #expect(waiting["portalURL"] as? String == "http://portal.example/login")
        // Without a portal (no path, or another state): the plain event.
        let plain = EventSchema.downloadLine(.waitingForConnectivity, facts, at: Fixtures.time,
                                             path: Fixtures.checked(Fixtures.satisfiedWifi, .limited))
        #expect(!plain.contains("portal"))
        #expect(EventSchema.portal(of: NetworkPath.unsatisfied(.noRoute)) == nil)
        // A portal that named no URL: the probe URL.
        #expect(EventSchema.portal(of: Fixtures.checked(Fixtures.satisfiedWifi, .portal)) == "http://192.0.2.9/check")
        let pathLine = try #require(JSONSerialization.jsonObject(with: Data(EventSchema.pathLine(portal, at: Fixtures.time).utf8)) as? [String: Any])
        #expect(pathLine["connectivity"] as? String == "portal")
        #expect(pathLine["portalURL"] as? String == "http://portal.example/login")
        #expect(pathLine["isRoaming"] as? Bool == false && pathLine["isConstrained"] as? Bool == false)
    }
}
