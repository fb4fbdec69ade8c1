import Foundation
import Synchronization
import LinuxReachability
import Testing
@testable import ResumableDownloads
import TestSupport

@Suite("Download outages in network namespaces", .serialized, .needsRoot,
       .needsNginx)
struct DownloadOutageTests: DownloadScenarios {
    /// 3 MiB at nginx's 1 MiB/s: each outage starts after the first MiB with two seconds of
    /// transfer still to come, and the test does not wait through more.
    static let size = 3 << 20

    /// Starts a download of fresh random content and waits until `atBytes` arrived.
    /// These tests account for the bytes and requests of one connection (re-sent bytes within a
    /// checkpoint window, one request after the outage, the connection's source address): the
    /// downloads use one (`SegmentedDownloadTests` covers outages with several).
    static let oneConnection = ["--connections", "1"]

    static func begin(_ net: OutageLab, seed: UInt64, atBytes: Int = 1 << 20, _ extra: [String] = []) async throws -> (CLIProcess, Data) {
        let content = try net.serveRandom(count: size, seed: seed)
        let cli = try net.download("file.bin", Self.oneConnection + extra)
        #expect(await cli.waitForBytes(atBytes), "\(cli.transcript)")
        return (cli, content)
    }

    /// `begin` in a fresh lab, returned first (the caller closes it).
    static func begin(seed: UInt64, atBytes: Int = 1 << 20, _ extra: [String] = []) async throws -> (OutageLab, CLIProcess, Data) {
        let net = try OutageLab()
        do {
            let (cli, content) = try await begin(net, seed: seed, atBytes: atBytes, extra)
            return (net, cli, content)
        } catch { net.close(); throw error }
    }

    /// Takes the client's path away (`linkDown`: eth1 down; otherwise the default route deleted)
    /// and waits until the download says it is waiting.
    static func cutPath(_ net: OutageLab, _ cli: CLIProcess, linkDown: Bool = false,
                        sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try ip("-n \(net.client) " + (linkDown ? "link set eth1 down" : "route del default"))
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)", sourceLocation: sourceLocation)
    }

    /// Completion, SHA-256, and at most one checkpoint window re-sent by the server.
    static func expectRecovered(_ net: OutageLab, _ cli: CLIProcess, _ content: Data,
                                sourceLocation: SourceLocation = #_sourceLocation) async {
        let status = await cli.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(cli.transcript)", sourceLocation: sourceLocation)
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content), sourceLocation: sourceLocation)
        let sent = await net.bytesSentWhenIdle()
        let wasted = sent - content.count
        // Each resume also re-fetches the 64 KiB overlap it compares with the disk.
        let overlaps = cli.count("resumed") * Int(ResumeOverlap.maximum)
        #expect(wasted >= 0 && wasted <= OutageLab.checkpointBytes + overlaps,
                "server sent \(sent) bytes for \(content.count): \(wasted) wasted; requests \(net.requests)\n\(cli.transcript)",
                sourceLocation: sourceLocation)
        #expect(cli.count("restarted") == 0, sourceLocation: sourceLocation)
    }

    @Test("link down, then up with the route restored")
    func linkDownThenUp() async throws {
        let (net, cli, content) = try await Self.begin(seed: 1)
        defer { net.close() }
        try await Self.cutPath(net, cli, linkDown: true)
        try ip("-n \(net.client) link set eth1 up")
        try net.addDefaultRoute("eth1")
        #expect(await cli.waitFor("resumed"), "\(cli.transcript)")
        await Self.expectRecovered(net, cli, content)
    }

    @Test("--netns from outside: the transfers run in the client namespace, outages included")
    func netnsOption() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let content = try net.serveRandom(count: Self.size, seed: 8)
        // 10.88.0.1 is only reachable from the client namespace, so any byte proves where curl runs.
        let cli = try net.download("file.bin", Self.oneConnection, usesNetnsOption: true)
        #expect(await cli.waitForBytes(1 << 20), "\(cli.transcript)")
        try await Self.cutPath(net, cli)
        try net.addDefaultRoute("eth1")
        await Self.expectRecovered(net, cli, content)
        #expect(net.requests.allSatisfy { $0.address == "10.88.0.2" })
    }

    @Test("--netns naming no namespace: exit 66 with the monitor's wording, nothing created")
    func netnsOptionUnknownNamespace() async throws {
        let directory = try F.Directory()
        let name = "rchT-missing-\(getpid())"
        let cli = try CLIProcess(["download", "--netns", name, "--state-dir", directory.file("state").path,
                                  "http://192.0.2.1/file.bin"], directory: directory.url)
        #expect(await cli.waitForExit() == 66)
        #expect(cli.standardError == "Error: no network namespace named '\(name)' (see 'ip netns list')\n")
        #expect(!FileManager.default.fileExists(atPath: directory.file("file.bin.part").path))
    }

    @Test("--no-expensive with --classify: waits on a cellular-only path, then uses the cheap uplink")
    func noExpensive() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let content = try net.serveRandom(count: 2 << 20, seed: 9)
        let cli = try net.download("file.bin", Self.oneConnection + ["--no-expensive", "--classify", "eth1=cellular"])
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)")
        #expect(cli.count("started") == 0)
        // eth1 stays the primary (metric 0) but is expensive: the agent pins to eth2.
        try net.uplink("eth2", address: "10.88.0.3", metric: 10)
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content))
        _ = await net.bytesSentWhenIdle()
        #expect(!net.requests.isEmpty && net.requests.allSatisfy { $0.address == "10.88.0.3" }, "\(net.requests)")
    }

    @Test("default route deleted, then added again")
    func routeDeletedThenAdded() async throws {
        let (net, cli, content) = try await Self.begin(seed: 2)
        defer { net.close() }
        try await Self.cutPath(net, cli)
        try net.addDefaultRoute("eth1")
        await Self.expectRecovered(net, cli, content)
        #expect(cli.count("resumed") >= 1)
    }

    @Test("TCP reset (iptables REJECT with tcp-reset), then the rule removed")
    func tcpReset() async throws {
        let (net, cli, content) = try await Self.begin(seed: 3)
        defer { net.close() }
        let rule = ["OUTPUT", "-p", "tcp", "--dport", "80", "!", "--tcp-flags", "RST", "RST",
                    "-j", "REJECT", "--reject-with", "tcp-reset"]
        try sh(["ip", "netns", "exec", net.client, "iptables", "-A"] + rule)
        // The reset ends the transfer; the immediate reconnect is refused too, so the download
        // waits for the server (probing it, without spending its failure budget).
        #expect(await cli.waitFor("waitingForServer"), "\(cli.transcript)")
        try sh(["ip", "netns", "exec", net.client, "iptables", "-D"] + rule)
        await Self.expectRecovered(net, cli, content)
    }

    @Test("server restarted mid-transfer")
    func serverRestarted() async throws {
        let (net, cli, content) = try await Self.begin(seed: 4)
        defer { net.close() }
        net.stopServer()
        let bytesBeforeRestart = cli.bytesSeen
        // A SIGKILLed nginx never logs the request it was serving: count only the new instance.
        try? FileManager.default.removeItem(at: net.accessLog)
        #expect(await cli.waitFor("retrying"), "\(cli.transcript)")
        try net.startServer()
        let status = await cli.waitForExit()
        #expect(status == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(content))
        let offsets = cli.events.filter { $0["event"] as? String == "resumed" }.compactMap { $0["offset"] as? Int }
        let resumedAt = try #require(offsets.last, "\(cli.transcript)")
        #expect(resumedAt >= bytesBeforeRestart, "resumed at \(resumedAt), had reported \(bytesBeforeRestart)")
        let sent = await net.bytesSentWhenIdle()
        // The resume re-fetches the 64 KiB before its offset, compared with the disk (issue 7).
        let overlap = min(resumedAt, Int(ResumeOverlap.maximum))
        #expect(sent == content.count - resumedAt + overlap, "requests after the restart: \(net.requests)")
    }

    @Test("path switch: a second uplink with another source address takes over, the first goes away")
    func pathSwitch() async throws {
        let net = try OutageLab()
        defer { net.close() }
        try net.uplink("eth2", address: "10.88.0.3", defaultRoute: false)
        let (cli, content) = try await Self.begin(net, seed: 5)
        // The backup route (metric 10) loses to eth1's (metric 0) until eth1 disappears.
        try net.addDefaultRoute("eth2", metric: 10)
        try ip("-n \(net.client) link del eth1")
        await Self.expectRecovered(net, cli, content)
        #expect(cli.count("resumed") >= 1, "\(cli.transcript)")
        // The first request (200, the whole file) went out on eth1, every resume (206) on eth2.
        // Checked by status, not by log order: nginx logs a request when it ends, and the one cut
        // with eth1 ends at its send_timeout, possibly after the resume on eth2 has finished.
        let first = net.requests.filter { $0.status == 200 }, resumes = net.requests.filter { $0.status == 206 }
        #expect(first.map(\.address) == ["10.88.0.2"], "\(net.requests)\n\(cli.transcript)")
        #expect(!resumes.isEmpty && resumes.allSatisfy { $0.address == "10.88.0.3" }, "\(net.requests)\n\(cli.transcript)")
    }

    @Test("outage longer than --max-outage fails cleanly, keeps the resume data, and a rerun finishes")
    func outageLongerThanTheLimit() async throws {
        let (net, cli, content) = try await Self.begin(seed: 6, ["--max-outage", "1"])
        defer { net.close() }
        let reached = cli.bytesSeen
        try ip("-n \(net.client) route del default")
        #expect(await cli.waitForExit() == 75, "\(cli.transcript)")
        #expect(cli.eventNames.suffix(2) == ["waiting", "failed"])
        #expect(cli.standardError.contains("resume data kept"))
        #expect(FileManager.default.fileExists(atPath: net.downloaded("file.bin").path + ".part"))
        #expect(!FileManager.default.fileExists(atPath: net.downloaded("file.bin").path))

        try net.addDefaultRoute("eth1")
        let again = try net.download("file.bin", Self.oneConnection)
        let offsets = again.events.compactMap { $0["offset"] as? Int }
        await Self.expectRecovered(net, again, content)
        let resumed = again.events.first { $0["event"] as? String == "resumed" }
        #expect((resumed?["offset"] as? Int ?? 0) >= reached, "\(again.transcript) \(offsets)")
        #expect(again.count("started") == 0)
    }

    @Test("resource changed during the outage: restarts, and the new file is what arrives")
    func resourceChangedDuringOutage() async throws {
        let (net, cli, _) = try await Self.begin(seed: 7)
        defer { net.close() }
        try await Self.cutPath(net, cli)
        // Another length, so nginx's ETag (mtime-length) changes even within the same second.
        let replacement = try net.serveRandom(count: Self.size + 4096, seed: 77)
        try net.addDefaultRoute("eth1")
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: net.downloaded("file.bin")) == F.sha256(replacement))
        // If-Range no longer matched, so nginx answered the resume with the whole new file (200).
        let last = try #require(net.requests.last)
        #expect(last.status == 200 && last.bytes == replacement.count, "\(net.requests)")
        // The user is told the stored bytes were thrown away, and progress starts over.
        #expect(cli.count("restarted") == 1, "\(cli.transcript)")
        let bytes = cli.events.compactMap { $0["bytes"] as? Int }
        #expect(zip(bytes, bytes.dropFirst()).contains { $1 < $0 }, "\(bytes)")
    }
}
