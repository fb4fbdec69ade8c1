import TestSupport
import Foundation
import Testing

/// Metrics end to end, as an attacker would try them: the built agent watches a namespace holding
/// an interface whose name tries to break out of its label, downloads a real file from nginx, loses
/// its path, and both its metrics file (Prometheus text) and `agent metrics` (OpenMetrics) are read
/// back by prometheus_client's parsers.
@Suite("Metrics end to end", .serialized, .needsRoot,
       .needsNginx)
struct MetricsIntegrationTests: DownloadScenarios {

    /// Quotes, a literal backslash-n, braces, '=', ',' and '#': everything a label value must escape
    /// or survive (the kernel refuses '/', ':' and whitespace in names; 15 bytes at most).
    static let hostileName = #"q"}\n{a=1,#"#

    @Test func agentMetricsSurviveAHostileInterfaceAndCountTheDownload() throws {
        let lab = NetworkLab()
        defer { lab.close() }
        let namespace = try lab.namespace("metrics")
        try ip("-n \(namespace) link add uplink type veth peer name peer0")
        try sh(["ip", "-n", namespace, "link", "add", Self.hostileName, "type", "veth", "peer", "name", "peer1"])
        try ip("-n \(namespace) addr add 10.77.0.2/24 dev uplink")
        // An address makes it usable, so the path (usable interfaces only, by default) lists it.
        try sh(["ip", "-n", namespace, "addr", "add", "10.78.0.2/24", "dev", Self.hostileName])
        for link in ["peer0", "peer1", "uplink", Self.hostileName] { try sh(["ip", "-n", namespace, "link", "set", link, "up"]) }
        try ip("-n \(namespace) route add default via 10.77.0.1 dev uplink")

        let nginx = try DownloadTestNginx()
        defer { nginx.stop() }
        let data = F.randomData(count: 3 << 20, seed: 77)
        try nginx.serve(data, at: "m.bin")
        let directory = try F.Directory("metrics")
        chmod(directory.url.path, 0o755)
        let metricsFile = directory.file("reachability.prom").path

        let agent = try AgentProcess(stateDirectory: directory.file("state"),
                                     arguments: ["--netns", namespace, "--metrics-file", metricsFile, "--metrics-interval", "1"])
        defer { agent.stop() }
        // No -o: the agent keeps files in STATE_DIR/files (or a download-dir= of agent.conf).
        let added = try agent.control(["queue", "add", nginx.url("m.bin").absoluteString, "--sha256", F.sha256(data)])
        #expect(added.status == 0, "\(added)")
        #expect(agent.waitForLine { $0.contains(#""type":"download","event":"completed""#) } != nil, "\(agent.output)")

        let metrics = try agent.control(["agent", "metrics"])
        #expect(metrics.status == 0, "\(metrics)")
        let families = try MetricsParser.parse(metrics.standardOutput, format: .openMetrics)
        func value(_ family: String, _ sample: String, _ labels: [String: String] = [:]) -> Double? {
            MetricsParser.family(family, in: families)?.samples.first { candidate in
                candidate.name == sample && labels.allSatisfy { candidate.labels[$0.key] == $0.value }
            }?.value
        }
        #expect(value("reachability_path_satisfied", "reachability_path_satisfied") == 1)
        #expect(value("reachability_interface_primary", "reachability_interface_primary", ["interface": "uplink"]) == 1)
        #expect(value("reachability_interface_up", "reachability_interface_up", ["interface": Self.hostileName]) == 1,
                "the hostile name comes back exactly: \(metrics.standardOutput)")
        #expect(value("reachability_downloads", "reachability_downloads", ["state": "completed"]) == 1)
        #expect(value("reachability_downloads_finished", "reachability_downloads_finished_total", ["result": "completed"]) == 1)
        #expect((value("reachability_download_received_bytes", "reachability_download_received_bytes_total") ?? 0) >= Double(data.count))
        #expect(!metrics.standardOutput.contains("m.bin"), "no URL or file name in metrics")

        // The path goes away: the file follows (rewritten on the change), read by the text parser.
        try ip("-n \(namespace) link set uplink down")
        #expect(F.waitSync(timeout: .seconds(10)) {
            ((try? String(contentsOfFile: metricsFile, encoding: .utf8)) ?? "").contains("reachability_path_outages_total 1\n")
        })
        let file = try String(contentsOfFile: metricsFile, encoding: .utf8)
        let fromFile = try MetricsParser.parse(file, format: .prometheus)
        #expect(MetricsParser.family("reachability_path_satisfied", in: fromFile)?.samples.first?.value == 0)
        #expect(MetricsParser.family("reachability_path_outages", in: fromFile)?.type == "counter")
        let mode = try FileManager.default.attributesOfItem(atPath: metricsFile)[.posixPermissions] as? Int
        #expect(mode == 0o644)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter { $0.hasSuffix(".tmp") }.isEmpty)

        let stopped = try #require(agent.terminate())
        #expect(stopped.status == 0)
        let final = try MetricsParser.parse(try String(contentsOfFile: metricsFile, encoding: .utf8), format: .prometheus)
        #expect((MetricsParser.family("reachability_path_outage_seconds", in: final)?.samples.first?.value ?? 0) > 0,
                "the file written at exit counts the outage up to then")
    }
}
