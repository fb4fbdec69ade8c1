import TestSupport
import Foundation
import Testing
@testable import ResumableDownloads

/// One file over two uplinks: a client namespace with a wired uplink (eth1) and a cellular-like
/// one (ww0: the `ww` prefix classifies it as cellular, hence expensive), both to one server,
/// each shaped on the server side with `tc tbf` (no netem on this kernel), nginx unlimited.
/// Bytes per uplink are the client's receive counters.
@Suite("Multipath downloads", .serialized, .needsRoot,
       .needsNginx)
struct MultipathDownloadTests: DownloadScenarios {
    static let size = 16 << 20

    /// The lab: eth1 at 40 Mbit/s (default route, metric 100) and ww0 at 20 Mbit/s (metric 200).
    static func lab(seed: UInt64) throws -> (OutageLab, Data) {
        let net = try OutageLab(rate: "0")
        // Each /32 address answers ARP only on its own interface (both sit on one bridge).
        for key in ["net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.default.arp_ignore=1"] {
            _ = try sh(["ip", "netns", "exec", net.client, "sysctl", "-qw", key])
        }
        try ip("-n \(net.client) route replace default via \(OutageLab.serverAddress) dev eth1 onlink metric 100")
        try net.uplink("ww0", address: "10.88.0.3", metric: 200)
        try shape(net, "peth1", "40mbit")
        try shape(net, "pww0", "20mbit")
        let content = try net.serveRandom(count: size, seed: seed)
        return (net, content)
    }

    static func shape(_ net: OutageLab, _ device: String, _ rate: String) throws {
        _ = try sh(["ip", "netns", "exec", net.server, "tc", "qdisc", "add", "dev", device, "root", "tbf",
                    "rate", rate, "burst", "32kb", "latency", "20ms"])
    }

    /// Bytes `interface` received so far in the client namespace.
    static func received(_ net: OutageLab, _ interface: String) -> Int {
        Int(((try? sh(["ip", "netns", "exec", net.client, "cat", "/sys/class/net/\(interface)/statistics/rx_bytes"])) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// Waits until `interface` received `bytes` more than `base`.
    static func waitForTraffic(_ net: OutageLab, _ interface: String, beyond base: Int, bytes: Int,
                               timeout: Duration) async -> Bool {
        await F.wait(timeout: timeout) { received(net, interface) - base >= bytes }
    }

    @Test("two uplinks carry one file; the expensive one only while allowed")
    func twoUplinks() async throws {
        let (net, content) = try Self.lab(seed: 1811)
        defer { net.close() }
        let (wiredBase, cellularBase) = (Self.received(net, "eth1"), Self.received(net, "ww0"))
        let cli = try net.download("file.bin")
        #expect(await cli.waitForExit(timeout: .seconds(60)) == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content))
        let (wired, cellular) = (Self.received(net, "eth1") - wiredBase, Self.received(net, "ww0") - cellularBase)
        // The expensive uplink joins only once the cheap one stops gaining (rounds of 150 ms - 1 s
        // in a 2-3 s download), so its share varies from run to run (1/13 to 1/3 seen); 1/32 is
        // eight times what ARP and neighbour discovery bring (`noExpensive`), and far from 0.
        #expect(cellular > Self.size / 32, "ww0 carried \(cellular) bytes, eth1 \(wired)\n\(cli.transcript)")
        #expect(wired > Self.size / 2, "eth1 carried \(wired) bytes")
        #expect(cli.lines.flatMap(EventSchemaValidator.problems).isEmpty, "\(cli.lines.flatMap(EventSchemaValidator.problems))")
        // The connections event named both paths.
        #expect(cli.events.contains { event in
            guard event["event"] as? String == "connections", let paths = event["paths"] as? [[String: Any]] else { return false }
            return Set(paths.compactMap { $0["interface"] as? String }) == ["eth1", "ww0"]
        }, "\(cli.transcript)")
    }

    /// `lab(seed:)` with a download of its file started with `arguments`, after reading ww0's
    /// receive counter (the baseline the cellular bytes are counted from).
    static func downloading(seed: UInt64, _ arguments: [String]) throws -> (OutageLab, Data, Int, CLIProcess) {
        let (net, content) = try lab(seed: seed)
        do {
            let cellularBase = received(net, "ww0")
            return (net, content, cellularBase, try net.download("file.bin", arguments))
        } catch { net.close(); throw error }
    }

    @Test("--no-expensive keeps the download on the cheap uplink")
    func noExpensive() async throws {
        let (net, content, cellularBase, cli) = try Self.downloading(seed: 1812, ["--no-expensive"])
        defer { net.close() }
        #expect(await cli.waitForExit(timeout: .seconds(60)) == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content))
        // ARP and neighbour discovery only, never the file.
        #expect(Self.received(net, "ww0") - cellularBase < 64 << 10)
    }

    @Test("--expensive-as-fallback: the expensive uplink carries the file only while the cheap one is gone")
    func expensiveAsFallback() async throws {
        let (net, content, cellularBase, cli) = try Self.downloading(seed: 1813, ["--expensive-as-fallback"])
        defer { net.close() }
        #expect(await cli.waitForBytes(4 << 20, timeout: .seconds(20)), "\(cli.transcript)")
        #expect(Self.received(net, "ww0") - cellularBase < 64 << 10, "ww0 used beside eth1")
        try ip("-n \(net.client) link set eth1 down")
        #expect(await Self.waitForTraffic(net, "ww0", beyond: cellularBase, bytes: 1 << 20, timeout: .seconds(10)),
                "ww0 did not take over\n\(cli.transcript)")
        #expect(await cli.waitForExit(timeout: .seconds(60)) == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content))
    }

    /// The wired uplink goes down mid-download: its connections' ranges move to the cellular one
    /// at once (no wait for the network, no gap), and when it comes back it is used again. The
    /// handovers are timed on the download's own clock, from the agent reading that the route to
    /// the server moved to the `connections` event that shows the move: load delays the kernel's
    /// news and this test's polling of the counters, which are not the rule (wall time around
    /// the whole took 2.019 s against 2 s once, at load).
    @Test("an uplink going down hands its ranges over at once; coming back, it is used again")
    func uplinkCutAndRestored() async throws {
        let (net, content) = try Self.lab(seed: 1814)
        defer { net.close() }
        let cli = try net.download("file.bin")
        // Cut with most of the file still to come. Whether ww0 already carries a share when eth1
        // goes varies (the ramp adds it once eth1 stops gaining; once in 20 runs it had carried
        // under 512 KiB by the end): either way eth1's ranges must move to it at once.
        #expect(await cli.waitForBytes(2 << 20, timeout: .seconds(20)), "\(cli.transcript)")
        try ip("-n \(net.client) link set eth1 down")
        // The cellular uplink keeps delivering; the download never waits for the network.
        let atCut = Self.received(net, "ww0")
        #expect(await Self.waitForTraffic(net, "ww0", beyond: atCut, bytes: 256 << 10, timeout: .seconds(15)))
        let cut = try #require(await Self.handover(cli, pathOver: "ww0", connectionsOver: ["ww0"]),
                               "no handover to ww0\n\(cli.transcript)")
        #expect(cut.duration < .seconds(1), "\(cut)\n\(cli.transcript)")
        try ip("-n \(net.client) link set eth1 up")
        try ip("-n \(net.client) route replace default via \(OutageLab.serverAddress) dev eth1 onlink metric 100")
        let wiredAtRestore = Self.received(net, "eth1")
        let usedAgain = await Self.waitForTraffic(net, "eth1", beyond: wiredAtRestore, bytes: 256 << 10, timeout: .seconds(15))
        #expect(usedAgain || cli.bytesSeen == content.count, "eth1 not used again\n\(cli.transcript)")
        var back: Handover?
        if usedAgain {
            back = await Self.handover(cli, pathOver: "eth1", connectionsOver: ["eth1", "ww0"], after: cut.handedOver)
            #expect(back != nil, "eth1 carried bytes but no event said so\n\(cli.transcript)")
            if let back { #expect(back.duration < .seconds(2), "\(back)\n\(cli.transcript)") }
        }
        #expect(await cli.waitForExit(timeout: .seconds(60)) == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content))
        #expect(cli.count("waiting") == 0, "\(cli.eventNames)")
        print("multipath handover: cut \(cut.duration), restore \(back.map { "\($0.duration)" } ?? "-")")
    }

    /// A handover read from a download's transcript: when the agent read (its `--verbose` log)
    /// that the route to the server went over another interface, and when the first
    /// `connections` event after that showed the connections moved.
    struct Handover: CustomStringConvertible {
        var pathMoved: Date
        var handedOver: Date
        var duration: Duration { .milliseconds(Int64((handedOver.timeIntervalSince(pathMoved) * 1000).rounded())) }
        var description: String { "the route moved at \(pathMoved), the connections at \(handedOver): \(duration)" }
    }

    /// Waits up to 10 s for the agent to read the route to the server over `interface` (after
    /// `after`) and then for a `connections` event over exactly `interfaces`; nil if none came.
    static func handover(_ cli: CLIProcess, pathOver interface: String, connectionsOver interfaces: Set<String>,
                         after: Date = .distantPast) async -> Handover? {
        _ = await F.wait(timeout: .seconds(10)) {
            handover(in: cli, pathOver: interface, connectionsOver: interfaces, after: after) != nil
        }
        return handover(in: cli, pathOver: interface, connectionsOver: interfaces, after: after)
    }

    static func handover(in cli: CLIProcess, pathOver interface: String, connectionsOver interfaces: Set<String>,
                         after: Date) -> Handover? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        // "<time> info <label>: host=... interface=ww0 ... path to host changed"
        let moved = cli.standardError.split(separator: "\n").lazy.compactMap { line -> Date? in
            guard line.hasSuffix("path to host changed"), line.contains(" interface=\(interface) "),
                  let stamp = line.split(separator: " ").first, let time = formatter.date(from: String(stamp)),
                  time > after else { return nil }
            return time
        }.first
        guard let moved else { return nil }
        let handedOver = cli.events.lazy.compactMap { event -> Date? in
            guard event["event"] as? String == "connections", let paths = event["paths"] as? [[String: Any]],
                  Set(paths.compactMap { $0["interface"] as? String }) == interfaces,
                  let stamp = event["time"] as? String, let time = formatter.date(from: stamp), time >= moved else { return nil }
            return time
        }.first
        return handedOver.map { Handover(pathMoved: moved, handedOver: $0) }
    }
}
