import Foundation
import LinuxReachability
import Testing
import TestSupport

@Suite("The command line with NetworkManager's facts", .serialized,
       .enabled(if: systemBusLabUnavailable == nil, systemBusLabReason))
struct SystemFactsCommandTests {
    @Test("status --explain says which sources were used and why each interface is or is not expensive; --json carries it")
    func statusExplains() async throws {
        let lab = try SystemFactsLab(uplinks: [("wlrch0", 1, 10), ("enrch1", 2, 20)])
        defer { lab.close() }
        try lab.bus.startNetworkManager(in: lab.net.client)
        try lab.bus.addDevice("wlan0", kind: "wifi", interface: "wlrch0", metered: 3)
        try lab.bus.addDevice("eth1", kind: "ethernet", interface: "enrch1", metered: 4)
        let directory = try DownloadFixtures.Directory("status")
        let explain = try CLIProcess(["status", "--explain"], namespace: lab.net.client, directory: directory.url,
                                     environment: lab.bus.environment)
        #expect(await explain.waitForExit() == 0, "\(explain.transcript)")
        let text = explain.lines.joined(separator: "\n")
        #expect(text.hasPrefix("reachable via wifi (wlrch0, 10.77.1.2, gw 10.77.1.1) expensive"), "\(text)")
        #expect(text.contains("\n  NetworkManager: used (pid "), "\(text)")
        #expect(text.contains("\n  ModemManager: not running (not on the system bus)"), "\(text)")
        #expect(text.contains("    evidence: NetworkManager DeviceType=wifi\n    expensive: yes (NetworkManager: Metered=guess-yes)"), "\(text)")
        #expect(text.contains("    expensive: no (not cellular-like, NetworkManager: Metered=guess-no)"), "\(text)")

        let json = try CLIProcess(["status", "--json"], namespace: lab.net.client, directory: directory.url,
                                  environment: lab.bus.environment)
        #expect(await json.waitForExit() == 0, "\(json.transcript)")
        let object = try #require(json.events.first)
        #expect(object["isExpensive"] as? Bool == true)
        #expect(object["isRoaming"] as? Bool == false)
        #expect(object["isConstrained"] as? Bool == false, "guess-yes is expensive, not constrained")
        let interfaces = try #require(object["interfaces"] as? [[String: Any]])
        #expect(interfaces.first?["metered"] as? String == "guess-yes")
        #expect(interfaces.first?["costReason"] as? String == "NetworkManager: Metered=guess-yes")
        let sources = try #require(object["sources"] as? [[String: Any]])
        #expect(sources.map { $0["service"] as? String } == ["NetworkManager", "ModemManager"])
        #expect(sources.map { $0["state"] as? String } == ["used", "not-running"])
    }

    @Test("watch prints a line when the wifi turns metered and when it turns back")
    func watchLines() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        try lab.bus.startNetworkManager(in: lab.net.client)
        let device = try lab.bus.addDevice("wlan0", kind: "wifi", interface: "wlrch0", metered: 4)
        let directory = try DownloadFixtures.Directory("watch")
        let watch = try CLIProcess(["watch"], namespace: lab.net.client, directory: directory.url, environment: lab.bus.environment)
        defer { watch.kill() }
        #expect(await DownloadFixtures.wait { watch.lines.count >= 1 }, "\(watch.transcript)")
        try lab.bus.setMetered(device, 3)
        #expect(await DownloadFixtures.wait { watch.lines.count >= 2 }, "\(watch.transcript)")
        try lab.bus.setMetered(device, 4)
        #expect(await DownloadFixtures.wait { watch.lines.count >= 3 }, "\(watch.transcript)")
        let lines = watch.lines.map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? "" }
        #expect(lines.prefix(3) == [
            "reachable via wifi (wlrch0, 10.77.1.2, gw 10.77.1.1), internet: full",
            "reachable via wifi (wlrch0, 10.77.1.2, gw 10.77.1.1) expensive, internet: full",
            "reachable via wifi (wlrch0, 10.77.1.2, gw 10.77.1.1), internet: full",
        ], "\(watch.transcript)")
    }

    @Test("download --no-expensive stops (checkpointed) within 100 ms of its wifi turning metered and resumes when it turns back")
    func downloadStopsOnMeteredWifi() async throws {
        let net = try OutageLab(rate: "1m")
        defer { net.close() }
        let bus = try SystemBusLab()
        defer { bus.close() }
        try bus.startNetworkManager(in: net.client)
        let device = try bus.addDevice("wlan0", kind: "wifi", interface: "eth1", metered: 4)
        let content = try net.serveRandom(count: 6 << 20, seed: 19)
        let cli = try net.download(names: ["file.bin"], ["--no-expensive"], environment: bus.environment)
        #expect(await cli.waitForBytes(1 << 20), "\(cli.transcript)")

        // From before the driver's call: the latency includes its round trip to the mock.
        let turnedMetered = Date()
        try bus.set(device, SystemBusLab.deviceInterface, "Metered", .uint32(3))
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)")
        let waiting = try #require(cli.events.first { $0["event"] as? String == "waiting" })
        let stoppedAt = try #require(Self.date(waiting["time"] as? String))
        let latency = stoppedAt.timeIntervalSince(turnedMetered)
        #expect(latency < 0.1, "stopped \(Int(latency * 1000)) ms after the wifi turned metered\n\(cli.transcript)")
        print("download --no-expensive: stopped \(Int((latency * 1000).rounded())) ms after Metered=guess-yes")
        // The transfer really stopped: nginx has no connection left, and no byte comes after.
        let sentWhileMetered = await net.bytesSentWhenIdle(timeout: .seconds(5))
        let bytesAtStop = cli.bytesSeen
        #expect(sentWhileMetered < content.count)

        try bus.setMetered(device, 4)
        #expect(await cli.waitFor("resumed"), "\(cli.transcript)")
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(DownloadFixtures.sha256(fileAt: net.downloaded("file.bin")) == DownloadFixtures.sha256(content))
        let resumedAt = cli.events.filter { $0["event"] as? String == "resumed" }.compactMap { $0["offset"] as? Int }.last ?? 0
        #expect(resumedAt >= bytesAtStop - (1 << 20), "resumed at \(resumedAt) after \(bytesAtStop) bytes had been reported")
    }

    private static func date(_ text: String?) -> Date? {
        guard let text else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }
}
