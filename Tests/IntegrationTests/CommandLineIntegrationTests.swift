import Foundation
import Glibc
import Testing
import TestSupport

@Suite("reachability status / watch / wait in namespaces", .serialized, .needsRoot)
struct CommandLineIntegrationTests {
    func run(_ arguments: [String]) throws -> (Int32, String) {
        let result = try ChildProcess.run(try builtBinary().path, arguments, environment: nil)
        return (result.status, result.standardOutput)
    }

    @Test func statusJSONAndExplain() throws {
        let net = try Topology(uplink: "wlp1s0", subnet: 1)
        defer { net.close() }
        let (status, json) = try run(["status", "--json", "--netns", net.client])
        #expect(status == 0)
        let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        #expect(object?["status"] as? String == "satisfied")
        #expect(object?["connection"] as? String == "wifi")
        #expect(object?["interface"] as? String == "wlp1s0")
        #expect(object?["gateways"] as? [String] == ["10.77.1.1"])
        #expect(object?["isExpensive"] as? Bool == false)

        let (_, explain) = try run(["status", "--explain", "--netns", net.client])
        #expect(explain.contains("name prefix 'wl'"))

        try ip("-n \(net.client) route del default")
        let (unsatisfied, text) = try run(["status", "--netns", net.client])
        #expect(unsatisfied == 1)
        #expect(text.contains("unreachable: no route"))
    }

    @Test func watchFollowsChangesAndStopsCleanly() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        let watch = try RunningCommand(["watch", "--netns", net.client])
        let first = await watch.line { $0.contains("reachable via") }
        #expect(first?.contains("reachable via wired (enp3s0, 10.77.1.2, gw 10.77.1.1)") == true)
        // ISO-8601 timestamp first.
        #expect(first?.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "#, options: .regularExpression) != nil)
        try ip("-n \(net.client) link set enp3s0 down")
        let down = await watch.line { $0.contains("unreachable") }
        #expect(down?.hasSuffix("unreachable: no interface up") == true)
        #expect(watch.stop() == 0)
    }

    @Test func waitExitsWhenThePathQualifies() async throws {
        let net = try Topology(uplink: "wwan0", subnet: 1)
        defer { net.close() }
        try net.uplink("enp3s0", subnet: 2, defaultRoute: false)
        // Only cellular now: --require wired times out.
        let (timedOut, _) = try run(["wait", "--netns", net.client, "--require", "wired", "--timeout", "0.3"])
        #expect(timedOut == 1)
        let (expensive, _) = try run(["wait", "--netns", net.client, "--not-expensive", "--timeout", "0.3"])
        #expect(expensive == 1)
        let waiter = try RunningCommand(["wait", "--netns", net.client, "--require", "wired", "--timeout", "10"])
        try ip("-n \(net.client) route replace default via 10.77.2.1 dev enp3s0")
        let exited = await waitUntil(deadline: .now + .seconds(10)) { !waiter.process.isRunning }
        #expect(exited)
        #expect(waiter.process.terminationStatus == 0)
    }
}
