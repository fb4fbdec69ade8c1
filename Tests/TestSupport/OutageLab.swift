import Foundation
import Synchronization
import LinuxReachability
import Testing
import ResumableDownloads

/// A client namespace and a server namespace, for outages a download must survive.
///
/// The client has /32 addresses and an `onlink` default route, so deleting the route or the link
/// really cuts the path (no connected subnet route left to fall back on); rp_filter is off. The
/// server's address lives on a bridge kept up by a second veth pair whose both ends stay in the
/// server namespace, so the server sees no carrier change when the client's link drops (as a
/// real server behind a switch would not). nginx runs inside the server namespace with
/// `limit_rate`, so a transfer lasts seconds, and logs `$body_bytes_sent` per request, which is
/// how wasted (re-sent) bytes are measured.
public final class OutageLab: Sendable {
    /// The server's address on the bridge.
    public static let serverAddress = "10.88.0.1"
    /// How often a download checkpoints, for the waste bounds.
    public static let checkpointBytes = 1 << 20

    /// The namespaces.
    public let lab = NetworkLab()
    /// The client namespace.
    public let client: String
    /// The server namespace.
    public let server: String
    /// nginx's files, the served files and the client's downloads.
    public let directory: DownloadFixtures.Directory
    /// nginx's `limit_rate`.
    public let rate: String
    private let nginx = Mutex<Process?>(nil)

    /// Builds both namespaces, the bridge and one uplink, and starts nginx.
    public init(rate: String = "1m") throws {
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
    public func uplink(_ name: String, address: String, metric: Int? = nil, defaultRoute: Bool = true) throws {
        let peer = "p" + name
        try ip("link add \(name) netns \(client) type veth peer name \(peer) netns \(server)")
        try ip("-n \(server) link set \(peer) master br0")
        try ip("-n \(server) link set \(peer) up")
        try ip("-n \(client) addr add \(address)/32 dev \(name)")
        try ip("-n \(client) link set \(name) up")
        if defaultRoute { try addDefaultRoute(name, metric: metric) }
    }

    /// Adds an onlink default route through `interface`.
    public func addDefaultRoute(_ interface: String, metric: Int? = nil) throws {
        try ip("-n \(client) route add default via \(Self.serverAddress) dev \(interface) onlink" + (metric.map { " metric \($0)" } ?? ""))
    }

    // MARK: server

    /// nginx's access log (status, body bytes sent, range per request).
    public var accessLog: URL { directory.file("nginx/access.log") }

    /// Starts nginx in the server namespace and waits until it accepts (from inside the namespace).
    public func startServer() throws {
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
        let process = try ChildProcess.start("nginx", ["-c", prefix + "/nginx.conf", "-p", prefix + "/", "-e", prefix + "/error.log"],
                                             prefix: ["ip", "netns", "exec", server], input: FileHandle.standardInput)
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
    public func busyFlag(retryAfter: Bool) -> URL { directory.file(retryAfter ? "nginx/busy-retry-after" : "nginx/busy") }

    /// Runs iptables in the server namespace.
    @discardableResult
    public func serverIptables(_ arguments: [String]) throws -> String {
        try sh(["ip", "netns", "exec", server, "iptables"] + arguments)
    }

    /// Counts every SYN to port 80 from now on (first rule of INPUT, no target: the rules after
    /// it, such as a DROP, still apply), so connection attempts are counted on the server side.
    public func countConnectionAttempts() throws {
        try serverIptables(["-I", "INPUT", "1", "-p", "tcp", "--dport", "80", "--syn"])
    }

    /// Counts every new connection to port 80 from now on, once however often its SYN is sent:
    /// a rule (second in INPUT, no target) that matches only the first SYN of each client
    /// address and source port (hashlimit allows each pair one a day). A loaded client's
    /// retransmitted SYNs, which `connectionAttempts` counts, do not inflate it.
    public func countConnections() throws {
        try serverIptables(["-I", "INPUT", "2", "-p", "tcp", "--dport", "80", "--syn", "-m", "hashlimit",
                            "--hashlimit-mode", "srcip,srcport", "--hashlimit-upto", "1/day", "--hashlimit-burst", "1",
                            "--hashlimit-name", "rchconnections", "-m", "comment", "--comment", "rch-connections"])
    }

    /// Connections the client opened to port 80 since `countConnections()`: distinct source
    /// ports of SYNs, counted on the server side (before any DROP).
    public var connections: Int {
        let output = (try? serverIptables(["-L", "INPUT", "-v", "-x", "-n"])) ?? ""
        guard let line = output.split(separator: "\n").first(where: { $0.contains("rch-connections") }) else { return -1 }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).first ?? "") ?? -1
    }

    /// SYNs to port 80 since `countConnectionAttempts()` (retransmissions included).
    public var connectionAttempts: Int {
        let output = (try? serverIptables(["-L", "INPUT", "1", "-v", "-x", "-n"])) ?? ""
        return Int(output.split(separator: " ", omittingEmptySubsequences: true).first ?? "") ?? -1
    }

    /// Kills nginx (SIGKILL: with `master_process off` it ignores SIGTERM).
    public func stopServer() {
        guard let process = nginx.withLock({ $0 }), process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Serves `count` bytes of fresh random content (from `seed`) at `name`, and returns them.
    public func serveRandom(count: Int, seed: UInt64, at name: String = "file.bin") throws -> Data {
        let content = DownloadFixtures.randomData(count: count, seed: seed)
        try serve(content, at: name)
        return content
    }

    /// Serves `data` as `name`.
    public func serve(_ data: Data, at name: String) throws {
        try data.write(to: directory.file("www/\(name)"))
    }

    /// The server's base URL.
    public var url: String { "http://\(Self.serverAddress)" }

    /// `(remote address, status, body bytes)` per finished request.
    public var requests: [(address: String, status: Int, bytes: Int)] {
        let text = (try? String(contentsOf: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, let status = Int(fields[1]), let bytes = Int(fields[2]) else { return nil }
            return (String(fields[0]), status, bytes)
        }
    }

    /// The body bytes each finished request was sent, as the span of the file they cover: from
    /// the start of its `Range` (0 without one) for as many bytes as the server sent.
    public var servedSpans: [Range<Int>] {
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
    public func bytesSentWhenIdle(timeout: Duration = .seconds(15)) async -> Int {
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
    public func download(_ name: String, _ extra: [String] = [], usesNetnsOption: Bool = false) throws -> CLIProcess {
        try download(names: [name], extra, usesNetnsOption: usesNetnsOption)
    }

    /// `environment` adds to (or overrides) the test knobs.
    public func download(names: [String], _ extra: [String] = [], usesNetnsOption: Bool = false,
                  environment: [String: String] = [:]) throws -> CLIProcess {
        // --verbose: the monitor's and the agent's logs land in the transcript of a failed expectation.
        try CLIProcess(["download", "--json", "--verbose", "--state-dir", directory.file("state").path, "-d", directory.file("client").path]
                       + (usesNetnsOption ? ["--netns", client] : []) + extra + names.map { "\(url)/\($0)" },
                       namespace: usesNetnsOption ? nil : client, directory: directory.url,
                       environment: ["REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES": "\(Self.checkpointBytes)",
                                     "REACHABILITY_DOWNLOAD_STALL_TIMEOUT": "5"].merging(environment) { $1 })
    }

    /// Where the client's download of `name` goes.
    public func downloaded(_ name: String) -> URL { directory.file("client/\(name)") }

    /// Stops nginx and removes the namespaces.
    public func close() {
        stopServer()
        lab.close()
    }

    deinit { close() }
}
