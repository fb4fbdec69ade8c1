import Foundation
import Synchronization
import LinuxReachability
import Testing
@testable import ResumableDownloads
import TestSupport

/// A client namespace and a server namespace, for outages a download must survive.
///
/// The client has /32 addresses and an `onlink` default route, so deleting the route or the link
/// really cuts the path (no connected subnet route left to fall back on); rp_filter is off. The
/// server's address lives on a bridge kept up by a second veth pair whose both ends stay in the
/// server namespace, so the server sees no carrier change when the client's link drops (as a
/// real server behind a switch would not). nginx runs inside the server namespace with
/// `limit_rate`, so a transfer lasts seconds, and logs `$body_bytes_sent` per request, which is
/// how wasted (re-sent) bytes are measured.
final class OutageLab: Sendable {
    static let serverAddress = "10.88.0.1"
    static let checkpointBytes = 1 << 20

    let lab = NetworkLab()
    let client: String
    let server: String
    let directory: DownloadFixtures.Directory
    let rate: String
    private let nginx = Mutex<Process?>(nil)

    init(rate: String = "1m") throws {
        client = try lab.namespace("c")
        server = try lab.namespace("s")
        directory = try DownloadFixtures.Directory("outage")
        self.rate = rate
        try ip("-n \(server) link add br0 type bridge")
        try ip("-n \(server) addr add \(Self.serverAddress)/24 dev br0")
        try ip("-n \(server) link add keep0 type veth peer name keep1")
        try ip("-n \(server) link set keep0 master br0")
        for name in ["keep0", "keep1", "br0"] { try ip("-n \(server) link set \(name) up") }
        try uplink("eth1", address: "10.88.0.2")
        try FileManager.default.createDirectory(at: directory.file("www"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: directory.file("nginx/tmp"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: directory.file("client"), withIntermediateDirectories: true)
        try startServer()
    }

    /// Adds client interface `name` with `address`/32 (peer bridged in the server namespace),
    /// with an onlink default route unless `defaultRoute` is false.
    func uplink(_ name: String, address: String, metric: Int? = nil, defaultRoute: Bool = true) throws {
        let peer = "p" + name
        try ip("link add \(name) netns \(client) type veth peer name \(peer) netns \(server)")
        try ip("-n \(server) link set \(peer) master br0")
        try ip("-n \(server) link set \(peer) up")
        try ip("-n \(client) addr add \(address)/32 dev \(name)")
        try ip("-n \(client) link set \(name) up")
        if defaultRoute { try addDefaultRoute(name, metric: metric) }
    }

    func addDefaultRoute(_ interface: String, metric: Int? = nil) throws {
        try ip("-n \(client) route add default via \(Self.serverAddress) dev \(interface) onlink" + (metric.map { " metric \($0)" } ?? ""))
    }

    // MARK: server

    var accessLog: URL { directory.file("nginx/access.log") }

    /// Starts nginx in the server namespace and waits until it accepts (from inside the namespace).
    func startServer() throws {
        let prefix = directory.file("nginx").path
        let configuration = """
        \(DownloadFixtures.nginxPrelude(prefix: prefix, workerConnections: 64))
        http {
            log_format bytes '$remote_addr $status $body_bytes_sent $http_range';
            access_log \(prefix)/access.log bytes;
        \(DownloadFixtures.nginxTemporaryPaths(prefix: prefix))
            default_type application/octet-stream;
            # A client that vanished (link down) is given up on quickly, so its request is logged.
            send_timeout 2s;
            server {
                listen \(Self.serverAddress):80;
                root \(directory.file("www").path);
                limit_rate \(rate);
                # Uploads (StormWatch's photo): PUT stores the body under www/uploads/.
                location /uploads/ {
                    dav_methods PUT;
                    create_full_put_path on;
                    client_max_body_size 64m;
                }
                location / {
                    # Flag files make the server answer 503 (with or without Retry-After: 1).
                    if (-f \(busyFlag(retryAfter: true).path)) { add_header Retry-After 1 always; return 503; }
                    if (-f \(busyFlag(retryAfter: false).path)) { return 503; }
                }
            }
        }
        """
        try configuration.write(to: directory.file("nginx/nginx.conf"), atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["ip", "netns", "exec", server, "nginx", "-c", prefix + "/nginx.conf", "-p", prefix + "/",
                             "-e", prefix + "/error.log"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        nginx.withLock { $0 = process }
        let server = self.server
        let listening = { !((try? sh(["ip", "netns", "exec", server, "ss", "-Hltn", "sport = :80"]))?.isEmpty ?? true) }
        _ = DownloadFixtures.waitSync(timeout: .seconds(10)) { !process.isRunning || listening() }
        guard process.isRunning, listening() else {
            throw LabCommandFailure(description: "nginx did not start in \(server)")
        }
    }

    /// While this file exists, nginx answers every request with 503 (with `Retry-After: 1` for
    /// the `retryAfter` flag).
    func busyFlag(retryAfter: Bool) -> URL { directory.file(retryAfter ? "nginx/busy-retry-after" : "nginx/busy") }

    /// Runs iptables in the server namespace.
    @discardableResult
    func serverIptables(_ arguments: [String]) throws -> String {
        try sh(["ip", "netns", "exec", server, "iptables"] + arguments)
    }

    /// Counts every SYN to port 80 from now on (first rule of INPUT, no target: the rules after
    /// it, such as a DROP, still apply), so connection attempts are counted on the server side.
    func countConnectionAttempts() throws {
        try serverIptables(["-I", "INPUT", "1", "-p", "tcp", "--dport", "80", "--syn"])
    }

    /// SYNs to port 80 since `countConnectionAttempts()` (retransmissions included).
    var connectionAttempts: Int {
        let output = (try? serverIptables(["-L", "INPUT", "1", "-v", "-x", "-n"])) ?? ""
        return Int(output.split(separator: " ", omittingEmptySubsequences: true).first ?? "") ?? -1
    }

    /// Kills nginx (SIGKILL: with `master_process off` it ignores SIGTERM).
    func stopServer() {
        guard let process = nginx.withLock({ $0 }), process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    func serve(_ data: Data, at name: String) throws {
        try data.write(to: directory.file("www/\(name)"))
    }

    var url: String { "http://\(Self.serverAddress)" }

    /// `(remote address, status, body bytes)` per finished request.
    var requests: [(address: String, status: Int, bytes: Int)] {
        let text = (try? String(contentsOf: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, let status = Int(fields[1]), let bytes = Int(fields[2]) else { return nil }
            return (String(fields[0]), status, bytes)
        }
    }

    /// The body bytes each finished request was sent, as the span of the file they cover: from
    /// the start of its `Range` (0 without one) for as many bytes as the server sent.
    var servedSpans: [Range<Int>] {
        let text = (try? String(contentsOf: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, let bytes = Int(fields[2]) else { return nil }
            let range = fields[3].hasPrefix("bytes=") ? fields[3].dropFirst(6).prefix(while: { $0 != "-" }) : "0"
            guard let start = Int(range) else { return nil }
            return start..<(start + bytes)
        }
    }

    /// Waits until nginx has no connection left that could still be sending (each request is
    /// logged when it ends), then returns the body bytes it sent in total.
    func bytesSentWhenIdle(timeout: Duration = .seconds(15)) async -> Int {
        _ = await DownloadFixtures.wait(timeout: timeout) {
            let output = (try? sh(["ip", "netns", "exec", self.server, "ss", "-Htn", "state", "established",
                                   "state", "close-wait", "sport = :80"])) ?? "x"
            return output.isEmpty
        }
        return requests.reduce(0) { $0 + $1.bytes }
    }

    // MARK: client

    /// Starts `reachability download --json` inside the client namespace.
    /// With `usesNetnsOption` the binary starts in the test's namespace with `--netns CLIENT` and
    /// must move itself (transfers included) into the client namespace.
    func download(_ name: String, _ extra: [String] = [], usesNetnsOption: Bool = false) throws -> CLIProcess {
        try download(names: [name], extra, usesNetnsOption: usesNetnsOption)
    }

    /// `environment` adds to (or overrides) the test knobs.
    func download(names: [String], _ extra: [String] = [], usesNetnsOption: Bool = false,
                  environment: [String: String] = [:]) throws -> CLIProcess {
        // --verbose: the monitor's and the agent's logs land in the transcript of a failed expectation.
        try CLIProcess(["download", "--json", "--verbose", "--state-dir", directory.file("state").path, "-d", directory.file("client").path]
                       + (usesNetnsOption ? ["--netns", client] : []) + extra + names.map { "\(url)/\($0)" },
                       namespace: usesNetnsOption ? nil : client, directory: directory.url,
                       environment: ["REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES": "\(Self.checkpointBytes)",
                                     "REACHABILITY_DOWNLOAD_STALL_TIMEOUT": "5"].merging(environment) { $1 })
    }

    func downloaded(_ name: String) -> URL { directory.file("client/\(name)") }

    func close() {
        stopServer()
        lab.close()
    }

    deinit { close() }
}

@Suite("Download outages in network namespaces", .serialized, .enabled(if: isRoot, rootReason),
       .enabled(if: DownloadTestNginx.isAvailable, "nginx is not installed at /usr/sbin/nginx"))
struct DownloadOutageTests {
    typealias F = DownloadFixtures
    static let size = 5 << 20

    /// Starts a download of fresh random content and waits until `atBytes` arrived.
    /// These tests account for the bytes and requests of one connection (re-sent bytes within a
    /// checkpoint window, one request after the outage, the connection's source address): the
    /// downloads use one (`SegmentedDownloadTests` covers outages with several).
    static let oneConnection = ["--connections", "1"]

    static func begin(_ net: OutageLab, seed: UInt64, atBytes: Int = 1 << 20, _ extra: [String] = []) async throws -> (CLIProcess, Data) {
        let content = F.randomData(count: size, seed: seed)
        try net.serve(content, at: "file.bin")
        let cli = try net.download("file.bin", Self.oneConnection + extra)
        #expect(await cli.waitForBytes(atBytes), "\(cli.transcript)")
        return (cli, content)
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
        let net = try OutageLab()
        defer { net.close() }
        let (cli, content) = try await Self.begin(net, seed: 1)
        try ip("-n \(net.client) link set eth1 down")
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)")
        try ip("-n \(net.client) link set eth1 up")
        try net.addDefaultRoute("eth1")
        #expect(await cli.waitFor("resumed"), "\(cli.transcript)")
        await Self.expectRecovered(net, cli, content)
    }

    @Test("--netns from outside: the transfers run in the client namespace, outages included")
    func netnsOption() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let content = F.randomData(count: Self.size, seed: 8)
        try net.serve(content, at: "file.bin")
        // 10.88.0.1 is only reachable from the client namespace, so any byte proves where curl runs.
        let cli = try net.download("file.bin", Self.oneConnection, usesNetnsOption: true)
        #expect(await cli.waitForBytes(1 << 20), "\(cli.transcript)")
        try ip("-n \(net.client) route del default")
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)")
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
        let content = F.randomData(count: 2 << 20, seed: 9)
        try net.serve(content, at: "file.bin")
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
        let net = try OutageLab()
        defer { net.close() }
        let (cli, content) = try await Self.begin(net, seed: 2)
        try ip("-n \(net.client) route del default")
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)")
        try net.addDefaultRoute("eth1")
        await Self.expectRecovered(net, cli, content)
        #expect(cli.count("resumed") >= 1)
    }

    @Test("TCP reset (iptables REJECT with tcp-reset), then the rule removed")
    func tcpReset() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let (cli, content) = try await Self.begin(net, seed: 3)
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
        let net = try OutageLab()
        defer { net.close() }
        let (cli, content) = try await Self.begin(net, seed: 4)
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
        let addresses = net.requests.map(\.address)
        #expect(addresses.first == "10.88.0.2")
        #expect(addresses.last == "10.88.0.3", "\(net.requests)\n\(cli.transcript)")
    }

    @Test("outage longer than --max-outage fails cleanly, keeps the resume data, and a rerun finishes")
    func outageLongerThanTheLimit() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let (cli, content) = try await Self.begin(net, seed: 6, ["--max-outage", "1"])
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
        let net = try OutageLab()
        defer { net.close() }
        let (cli, _) = try await Self.begin(net, seed: 7)
        try ip("-n \(net.client) route del default")
        #expect(await cli.waitFor("waiting"), "\(cli.transcript)")
        // Another length, so nginx's ETag (mtime-length) changes even within the same second.
        let replacement = F.randomData(count: Self.size + 4096, seed: 77)
        try net.serve(replacement, at: "file.bin")
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
