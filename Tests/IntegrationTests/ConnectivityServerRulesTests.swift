import Foundation
import LinuxReachability
import Testing
import TestSupport

/// NetworkManager's `[connectivity]` as Ubuntu and Fedora ship it, against servers answering as
/// theirs do, read through `reachability status` and `wait --require internet`.
@Suite("NetworkManager's connectivity servers and rules", .serialized, .needsRoot)
struct ConnectivityServerRulesTests {
    /// Writes `DIRECTORY/NetworkManager/conf.d/NAME` and returns the environment that reads it.
    func networkManager(_ server: ProbeServer, _ name: String, _ text: String) throws -> [String: String] {
        let nm = server.directory.appendingPathComponent("NetworkManager")
        try FileManager.default.createDirectory(at: nm.appendingPathComponent("conf.d"), withIntermediateDirectories: true)
        try Data("[main]\nplugins=keyfile\n".utf8).write(to: nm.appendingPathComponent("NetworkManager.conf"))
        try Data(text.utf8).write(to: nm.appendingPathComponent("conf.d/\(name)"))
        return ["REACHABILITY_NETWORKMANAGER_DIR": nm.path, "XDG_CONFIG_HOME": server.directory.path]
    }

    func status(_ namespace: String, _ environment: [String: String]) throws -> [String: Any] {
        let (code, json, errors) = try runBuilt(["status", "--json", "--netns", namespace], environment: environment)
        #expect(code == 0, "\(errors)")
        return try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test("Ubuntu: no response=, the server answers 204 with X-NetworkManager-Status: online: full, and wait --require internet returns")
    func ubuntu() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        try server.mode("ubuntu")
        // As /usr/lib/NetworkManager/conf.d/20-connectivity-ubuntu.conf (the host is ours).
        let environment = try networkManager(server, "20-connectivity-ubuntu.conf", "[connectivity]\nuri=http://10.77.9.1/\n")
        let object = try status(net.client, environment)
        #expect(object["connectivity"] as? String == "full", "\(object)")
        let answer = (object["connectivityCheck"] as? [String: Any])?["answer"] as? String
        #expect(answer?.hasPrefix("HTTP 204 with X-NetworkManager-Status: online from 10.77.9.1:80") == true, "\(answer ?? "-")")
        let started = ContinuousClock.now
        let (waited, _, errors) = try runBuilt(["wait", "--netns", net.client, "--require", "internet", "--timeout", "10"],
                                               environment: environment)
        #expect(waited == 0, "\(errors)")
        #expect(ContinuousClock.now - started < .seconds(5))

        // The same server without the header is not NetworkManager's answer: a portal, as NM says.
        try server.mode("full")
        #expect(try status(net.client, environment)["connectivity"] as? String == "portal")
        // An empty response= accepts a bare 204.
        let empty = try networkManager(server, "20-connectivity-ubuntu.conf", "[connectivity]\nuri=http://10.77.9.1/\nresponse=\n")
        #expect(try status(net.client, empty)["connectivity"] as? String == "full")
    }

    @Test("Fedora: response=OK, the server answers 200 OK: full; an error page is limited, not a portal")
    func fedora() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        try server.mode("fedora")
        // As Fedora's 20-connectivity-fedora.conf (NetworkManager's contrib/fedora/rpm).
        let environment = try networkManager(server, "20-connectivity-fedora.conf", """
            [connectivity]
            enabled=true
            uri=http://10.77.9.1/static/hotspot.txt
            response=OK
            interval=300
            """)
        #expect(try status(net.client, environment)["connectivity"] as? String == "full")
        let (waited, _, errors) = try runBuilt(["wait", "--netns", net.client, "--require", "internet", "--timeout", "10"],
                                               environment: environment)
        #expect(waited == 0, "\(errors)")
        try server.mode("redirect")
        let portal = try status(net.client, environment)
        #expect(portal["connectivity"] as? String == "portal" && portal["portalURL"] as? String == "http://10.77.9.1/login?from=check")
        try server.mode("error")
        #expect(try status(net.client, environment)["connectivity"] as? String == "limited")
    }

    @Test("a check URL on 127.0.0.1 is probed over loopback, not bound to the primary interface")
    func loopbackURL() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(net.lab.prefix)-loopback")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // An empty 200 is the expected answer when no text is expected.
        try Data().write(to: directory.appendingPathComponent("check"))
        let port = try await loopbackServer(in: net.client, lab: net.lab, serving: directory)
        let monitor = try startCheckedMonitor(in: net.client, url: "http://127.0.0.1:\(port)/check", timeout: .seconds(2))
        defer { monitor.cancel() }
        let full = try await waitForPath(monitor, timeout: .seconds(5), "full over loopback") { $0.connectivity == .full }
        #expect(full.connectivityEvidence?.answer.contains("from 127.0.0.1:\(port) via lo") == true,
                "\(String(describing: full.connectivityEvidence))")
    }
}
