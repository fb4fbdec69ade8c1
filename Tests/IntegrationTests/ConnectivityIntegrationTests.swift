import Foundation
import LinuxReachability
import Synchronization
import Testing
import TestSupport

@Suite("Connectivity checks in network namespaces", .serialized, .needsRoot)
struct ConnectivityIntegrationTests {
    @Test("full, then an upstream blackhole is limited and recovery is full within about a second")
    func blackholeAndRecovery() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        let monitor = try startCheckedMonitor(in: net.client, interval: .seconds(1), timeout: .seconds(1))
        defer { monitor.cancel() }
        // The route is published first, the check's answer second.
        #expect(monitor.currentPath.isSatisfied)
        let full = try await waitForPath(monitor, "full") { $0.connectivity == .full }
        #expect(full.connectivityEvidence?.answer.contains("HTTP 204 from 10.77.9.1:80 via enp3s0 (10.77.1.2)") == true,
                "\(String(describing: full.connectivityEvidence))")
        #expect(full.primaryInterface?.name == "enp3s0")

        // Replies to the client vanish upstream; the client's own path stays up.
        try ip("-n \(net.router) route add blackhole 10.77.1.2/32")
        let limited = try await waitForPath(monitor, timeout: .seconds(6), "limited") { $0.connectivity == .limited }
        #expect(limited.isSatisfied)
        #expect(limited.connectivityEvidence?.answer.contains("no answer within 1 s") == true,
                "\(String(describing: limited.connectivityEvidence))")
        try ip("-n \(net.router) route del blackhole 10.77.1.2/32")
        let restored = ContinuousClock.now
        _ = try await waitForPath(monitor, timeout: .seconds(5), "full again") { $0.connectivity == .full }
        let recovery = ContinuousClock.now - restored
        #expect(recovery < .milliseconds(2500), "recovery took \(recovery)")
        print("connectivity recovery after the blackhole: \(recovery)")
    }

    @Test("a portal by redirect and by a login page, with its URL; full after logging in; bounded cost")
    func portal() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        try server.mode("redirect")
        let monitor = try startCheckedMonitor(in: net.client)
        defer { monitor.cancel() }
        let redirected = try await waitForPath(monitor, "portal by redirect") { $0.connectivity == .portal }
        #expect(redirected.portalURL == "http://10.77.9.1/login?from=check")
        #expect(redirected.isSatisfied)
        let started = ContinuousClock.now
        let before = server.requests
        try server.mode("login")
        // The portal answer does not change: checks back off (1 s, 2 s, ...), no update meanwhile.
        let page = try await waitForPath(monitor, timeout: .seconds(6), "portal by login page") {
            $0.connectivity == .portal && $0.portalURL == ProbeServer.url
        }
        #expect(page.connectivityEvidence?.answer.hasPrefix("HTTP 200") == true)
        try server.mode("full")  // "logged in"
        _ = try await waitForPath(monitor, timeout: .seconds(10), "full after login") { $0.connectivity == .full }
        let elapsed = ContinuousClock.now - started
        let made = server.requests - before
        // Back-off from 1 s doubling: at most one check per second, fewer as the portal stays.
        let seconds = Int(elapsed.components.seconds) + 1
        #expect(made <= seconds + 1, "\(made) checks in \(elapsed)")
    }

    @Test("a hostile probe server: endless body and silence cost one bounded check each")
    func hostileServer() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        try server.mode("flood")
        let monitor = try startCheckedMonitor(in: net.client, timeout: .seconds(1))
        defer { monitor.cancel() }
        let flooded = try await waitForPath(monitor, timeout: .seconds(3), "a 200 with a page that never ends") {
            $0.connectivity == .portal
        }
        #expect(flooded.portalURL == ProbeServer.url)
        try server.mode("silent")
        let silent = try await waitForPath(monitor, timeout: .seconds(6), "silence is limited") { $0.connectivity == .limited }
        #expect(silent.connectivityEvidence?.answer.contains("to answer") == true, "\(String(describing: silent.connectivityEvidence))")
    }

    @Test("a DNS failure is limited; no route is none, with nothing sent")
    func dnsFailureAndNoRoute() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        // The lookup must fail inside the lab: the resolvers the host is configured with are
        // made unreachable in the client namespace, so no query leaves it.
        let resolvConf = (try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) ?? ""
        for line in resolvConf.split(separator: "\n") where line.hasPrefix("nameserver") {
            let address = line.split(separator: " ").last.map(String.init) ?? ""
            guard address.contains("."), !address.hasPrefix("127.") else { continue }
            try ip("-n \(net.client) route add unreachable \(address)/32")
        }
        let monitor = try startCheckedMonitor(in: net.client, url: "http://probe.reachability-test.invalid/check")
        defer { monitor.cancel() }
        let limited = try await waitForPath(monitor, timeout: .seconds(8), "limited by DNS") { $0.connectivity == .limited }
        #expect(limited.connectivityEvidence?.answer.contains("cannot resolve probe.reachability-test.invalid") == true,
                "\(String(describing: limited.connectivityEvidence))")
        try ip("-n \(net.client) route del default")
        let offline = try await waitForPath(monitor, "none without a route") { !$0.isSatisfied }
        #expect(offline.connectivity == .offline)
        #expect(offline.connectivityEvidence?.answer == "no usable route; nothing sent")
    }

    @Test("not configured: unknown, and not one probe request")
    func notConfiguredSendsNothing() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        #expect(monitor.currentPath.connectivity == .unknown)
        #expect(monitor.currentPath.connectivityEvidence == nil)
        try ip("-n \(net.client) link set enp3s0 down")
        _ = try await waitForPath(monitor, "down") { !$0.isSatisfied }
        try ip("-n \(net.client) link set enp3s0 up")
        try ip("-n \(net.client) route add default via 10.77.1.1 dev enp3s0")
        let back = try await waitForPath(monitor, "back") { $0.isSatisfied }
        #expect(back.connectivity == .unknown)
        // A configured monitor, started last, is counted by the same server: the count can move.
        let checked = try startCheckedMonitor(in: net.client)
        defer { checked.cancel() }
        _ = try await waitForPath(checked, "full") { $0.connectivity == .full }
        #expect(server.requests == 1, "only the configured monitor's check reached the server")
    }
}

@Suite("reachability status / watch / wait with a connectivity check", .serialized, .needsRoot)
struct ConnectivityCommandLineTests {
    func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (Int32, String, String) {
        try runBuilt(arguments, environment: environment)
    }

    @Test("NetworkManager's [connectivity] is honoured; status waits for the answer; wait --require internet")
    func networkManagerConfiguration() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        try server.mode("online")
        // A NetworkManager configuration written by the test: the main file, and a conf.d
        // snippet that overrides its URI (later files win, as in NetworkManager).
        let nm = server.directory.appendingPathComponent("NetworkManager")
        try FileManager.default.createDirectory(at: nm.appendingPathComponent("conf.d"), withIntermediateDirectories: true)
        try Data("[main]\nplugins=keyfile\n\n[connectivity]\nuri=http://10.77.9.1/wrong\ninterval=300\n".utf8)
            .write(to: nm.appendingPathComponent("NetworkManager.conf"))
        try Data("[connectivity]\nuri=\(ProbeServer.url)\n".utf8).write(to: nm.appendingPathComponent("conf.d/20-connectivity.conf"))
        let environment = ["REACHABILITY_NETWORKMANAGER_DIR": nm.path,
                           "XDG_CONFIG_HOME": server.directory.path]

        let (status, json, _) = try run(["status", "--json", "--netns", net.client], environment: environment)
        #expect(status == 0)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(object["connectivity"] as? String == "full", "\(json)")
        #expect((object["connectivityCheck"] as? [String: Any])?["url"] as? String == ProbeServer.url)
        #expect(object["portalURL"] is NSNull)

        // A portal: the text says where to log in; --explain shows the evidence.
        try server.mode("redirect")
        let (_, text, _) = try run(["status", "--netns", net.client], environment: environment)
        #expect(text == "reachable via wired (enp3s0, 10.77.1.2, gw 10.77.1.1), internet: portal, log in at http://10.77.9.1/login?from=check\n")
        let (_, explain, _) = try run(["status", "--explain", "--netns", net.client], environment: environment)
        #expect(explain.contains("check: GET \(ProbeServer.url)"))
        #expect(explain.contains("last answer: HTTP 302 (portal at http://10.77.9.1/login?from=check) from 10.77.9.1:80 via enp3s0 (10.77.1.2)"))

        // wait --require internet returns once the portal lets us through.
        let waiter = try RunningCommand(["wait", "--netns", net.client, "--require", "internet", "--timeout", "20"],
                                        environment: environment)
        let watch = try RunningCommand(["watch", "--json", "--netns", net.client], environment: environment)
        // The path line comes first, the check's answer second.
        let first = await watch.line { $0.contains("\"status\"") }
        #expect(first?.contains("\"connectivity\":\"unknown\"") == true, "\(first ?? "nothing")")
        let second = await watch.line { $0.contains("\"status\"") }
        #expect(second?.contains("\"connectivity\":\"portal\"") == true, "\(second ?? "nothing")")
        try server.mode("online")
        let exited = await waitUntil(deadline: .now + .seconds(20)) { !waiter.process.isRunning }
        #expect(exited && waiter.process.terminationStatus == 0)
        let third = await watch.line(timeout: .seconds(20)) { $0.contains("\"status\"") }
        #expect(third?.contains("\"connectivity\":\"full\"") == true, "\(third ?? "nothing")")
        #expect(watch.stop() == 0)

        // Without any configuration: no check, no request, and wait --require internet is a usage error.
        let before = server.requests
        let (plain, plainJSON, _) = try run(["status", "--json", "--netns", net.client],
                                            environment: ["REACHABILITY_NETWORKMANAGER_DIR": "/nonexistent",
                                                          "XDG_CONFIG_HOME": server.directory.path])
        #expect(plain == 0 && plainJSON.contains("\"connectivity\":\"unknown\""))
        let (usage, _, message) = try run(["wait", "--netns", net.client, "--require", "internet"],
                                          environment: ["REACHABILITY_NETWORKMANAGER_DIR": "/nonexistent",
                                                        "XDG_CONFIG_HOME": server.directory.path])
        #expect(usage == 64 && message.contains("--require internet needs a connectivity check"))
        #expect(server.requests == before)
    }
}

@Suite("Downloads behind a captive portal", .serialized, .needsRoot)
struct ConnectivityDownloadTests {
    @Test("a download waits for login at the portal's URL without a request, and resumes the moment the check reads full")
    func downloadWaitsForLogin() async throws {
        let (net, server) = try ProbeServer.behindOneUplink()
        defer { server.remove(); net.close() }
        try server.mode("redirect")
        let directory = server.directory.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let download = try CLIProcess(["download", "http://10.77.9.1/file", "-o", "file.bin", "--json",
                                       "--connectivity-url", ProbeServer.url],
                                      namespace: net.client, directory: directory,
                                      environment: ["REACHABILITY_NETWORKMANAGER_DIR": "/nonexistent"])
        defer { download.kill() }
        let waiting = await download.waitForEvent(timeout: .seconds(15)) {
            $0["event"] as? String == "waiting" && $0["reason"] as? String == "portal"
        }
        #expect(waiting, "no waiting event naming the portal: \(download.lines) \(download.standardError)")
        let event = download.events.first { $0["event"] as? String == "waiting" }
        #expect(event?["portalURL"] as? String == "http://10.77.9.1/login?from=check")
        // Let the check back off once (a second probe request), then count: the file was never asked for.
        #expect(await waitUntil(deadline: .now + .seconds(10), every: .milliseconds(20)) { server.requests(for: "/check") >= 2 })
        #expect(server.requests(for: "/file") == 0, "the download went to the portal")
        try server.mode("full")  // logged in
        let loggedIn = ContinuousClock.now
        #expect(await download.waitFor("completed", timeout: .seconds(15)), "\(download.lines) \(download.standardError)")
        #expect(await download.waitForExit(timeout: .seconds(15)) == 0)
        print("download resumed \(ContinuousClock.now - loggedIn) after the portal let it through")
        let file = try Data(contentsOf: directory.appendingPathComponent("file.bin"))
        let expected = Data((0..<1024).flatMap { _ in (0...255).map(UInt8.init) })
        #expect(file == expected)
        #expect(server.requests(for: "/file") == 1)
        let problems = download.lines.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
    }
}
