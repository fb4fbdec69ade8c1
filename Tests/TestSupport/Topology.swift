import Foundation
import LinuxReachability
import Synchronization

/// A client namespace with uplinks to a router namespace, like a laptop with several NICs.
public struct Topology: Sendable {
    /// The namespaces.
    public let lab = NetworkLab()
    /// The client namespace.
    public let client: String
    /// The router namespace.
    public let router: String

    /// Creates the two namespaces, without links.
    public init() throws {
        client = try lab.namespace("c")
        router = try lab.namespace("r")
    }

    /// Creates the two namespaces with one uplink (see `uplink`): how most scenarios start.
    public init(uplink name: String, subnet: Int = 1, metric: Int? = nil, defaultRoute: Bool = true) throws {
        try self.init()
        do { try uplink(name, subnet: subnet, metric: metric, defaultRoute: defaultRoute) } catch { close(); throw error }
    }

    /// Adds uplink `name` (10.77.SUBNET.2/24, router side .1), optionally with a default route.
    public func uplink(_ name: String, subnet: Int, metric: Int? = nil, defaultRoute: Bool = true) throws {
        try ip("link add \(name) netns \(client) type veth peer name up\(subnet) netns \(router)")
        try ip("-n \(router) addr add 10.77.\(subnet).1/24 dev up\(subnet)")
        try ip("-n \(router) link set up\(subnet) up")
        try ip("-n \(client) addr add 10.77.\(subnet).2/24 dev \(name)")
        try ip("-n \(client) link set \(name) up")
        if defaultRoute {
            try ip("-n \(client) route add default via 10.77.\(subnet).1 dev \(name)" + (metric.map { " metric \($0)" } ?? ""))
        }
    }

    /// Removes the namespaces.
    public func close() { lab.close() }
}

/// Lets child tasks advance one stream iterator in turn.
public actor EventQueue {
    private var iterator: AsyncStream<String>.Iterator
    /// Reads `stream`.
    public init(_ stream: AsyncStream<String>) { iterator = stream.makeAsyncIterator() }
    /// The next element, or nil at the end.
    public func next() async -> String? {
        var copy = iterator
        let value = await copy.next(isolation: self)
        iterator = copy
        return value
    }

    /// The next event, or nil once `timeout` has passed.
    public nonisolated func next(within timeout: Duration) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            group.addTask { await self.next() }
            group.addTask { await deadline(timeout); return nil }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}

/// An HTTP probe server in the router namespace at 10.77.9.1:80 whose answer the test switches:
/// `full` (204), `online` (200 with NetworkManager's text), `redirect` (302 to a login page),
/// `login` (200 with a login page), `flood` (200 with an endless body), `silent` (accepts, never
/// answers), `ubuntu` (204 with `X-NetworkManager-Status: online`, as connectivity-check.ubuntu.com
/// answers), `fedora` (200 `OK`, as fedoraproject.org/static/hotspot.txt), `error` (503 with a
/// page). Every request is counted on the server.
public struct ProbeServer: Sendable {
    /// The server's address (on the router's loopback).
    public static let address = "10.77.9.1"
    /// The check URL.
    public static let url = "http://10.77.9.1/check"
    /// Where the mode and the request log live.
    public let directory: URL

    /// Starts the server in `topology`'s router namespace, answering `full`.
    public init(in topology: Topology) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(topology.lab.prefix)-probe")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try mode("full")
        try ip("-n \(topology.router) addr add \(Self.address)/32 dev lo")
        let script = """
        import http.server, os, sys, time
        directory = sys.argv[1]
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def reply(self, status, body=b"", headers=()):
                self.send_response(status)
                for name, value in headers: self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def do_GET(self):
                with open(os.path.join(directory, "requests"), "a") as f: f.write(self.path + "\\n")
                mode = open(os.path.join(directory, "mode")).read().strip()
                if self.path == "/file" and mode in ("full", "online"): self.reply(200, bytes(range(256)) * 1024)
                elif mode == "full": self.reply(204)
                elif mode == "ubuntu": self.reply(204, headers=[("X-NetworkManager-Status", "online")])
                elif mode == "fedora": self.reply(200, b"OK\\n")
                elif mode == "error": self.reply(503, b"<html>Service Unavailable</html>")
                elif mode == "online": self.reply(200, b"NetworkManager is online\\n")
                elif mode == "redirect": self.reply(302, headers=[("Location", "http://10.77.9.1/login?from=check")])
                elif mode == "login": self.reply(200, b"<html><form action=/login>Log in</form></html>")
                elif mode == "flood":
                    self.send_response(200); self.end_headers()
                    try:
                        for _ in range(4096): self.wfile.write(b"x" * 65536)
                    except OSError: pass
                elif mode == "silent": time.sleep(30)
        server = http.server.ThreadingHTTPServer(("\(Self.address)", 80), Handler)
        open(os.path.join(directory, "ready"), "w").close()
        server.serve_forever()
        """
        _ = try topology.lab.spawn(["ip", "netns", "exec", topology.router, "python3", "-c", script, directory.path])
        let ready = directory.appendingPathComponent("ready")
        guard waitUntilBlocking(deadline: .now + .seconds(10), every: .milliseconds(10), { FileManager.default.fileExists(atPath: ready.path) }) else {
            throw LabCommandFailure(description: "probe server did not start")
        }
    }

    /// Switches the answer to `mode`.
    public func mode(_ mode: String) throws {
        try Data(mode.utf8).write(to: directory.appendingPathComponent("mode"))
    }

    /// Requests counted on the server; `path` counts only those for it.
    public func requests(for path: String? = nil) -> Int {
        ((try? String(contentsOf: directory.appendingPathComponent("requests"), encoding: .utf8)) ?? "")
            .split(separator: "\n").filter { path == nil || $0 == path! }.count
    }

    /// Every request counted so far.
    public var requests: Int { requests() }

    /// A topology with one uplink (`enp3s0`, subnet 1, the default route) and the server in its
    /// router namespace, answering `full`: the connectivity suites' common start. The caller
    /// removes the server, then closes the topology.
    public static func behindOneUplink() throws -> (Topology, ProbeServer) {
        let net = try Topology()
        do {
            try net.uplink("enp3s0", subnet: 1)
            return (net, try ProbeServer(in: net))
        } catch {
            net.close()
            throw error
        }
    }

    /// Removes its directory (the lab stops the server).
    public func remove() { try? FileManager.default.removeItem(at: directory) }
}

/// A started monitor of `namespace` with a connectivity check of `url`.
public func startCheckedMonitor(in namespace: String, url: String = ProbeServer.url, expected: String? = nil,
                         interval: Duration = .seconds(300), timeout: Duration = .seconds(2)) throws -> PathMonitor {
    let check = try ConnectivityCheck(url: url, expectedResponse: expected, interval: interval, timeout: timeout)
    let monitor = PathMonitor(configuration: .init(networkNamespace: namespace, connectivityCheck: check))
    try monitor.start()
    return monitor
}

/// An HTTP server on 127.0.0.1 inside a namespace (python3's http.server), serving `directory`;
/// `ready` answers once it listens. Stopped with the lab.
public func loopbackServer(in namespace: String, lab: NetworkLab, serving directory: URL) async throws -> UInt16 {
    let script = """
    import functools, http.server, os, sys
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
    handler.func.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    open(sys.argv[1] + "/.port.tmp", "w").write(str(server.server_address[1]))
    os.rename(sys.argv[1] + "/.port.tmp", sys.argv[1] + "/.port")
    server.serve_forever()
    """
    _ = try lab.spawn(["ip", "netns", "exec", namespace, "python3", "-c", script, directory.path])
    let portFile = directory.appendingPathComponent(".port")
    guard await DownloadFixtures.wait(timeout: .seconds(10), { FileManager.default.fileExists(atPath: portFile.path) }),
          let port = UInt16(try String(contentsOf: portFile, encoding: .utf8)) else {
        throw LabCommandFailure(description: "loopback server did not start in \(namespace)")
    }
    return port
}
