import Foundation
import Glibc

/// A site cache between a client namespace and an origin namespace (issue 34 item 3):
/// `ori` (origin nginx on 10.77.1.2:80) -- `cch` (the cache on 10.77.2.1:3128, no forwarding)
/// -- `cli` (10.77.2.2, default route to the cache). The client reaches the origin only through
/// the cache, as a proxy: `--proxy http://10.77.2.1:3128 http://10.77.1.2/f.bin`.
public final class SiteCacheLab: Sendable {
    /// Which cache sits in the middle.
    public enum Cache: String, Sendable {
        /// nginx `proxy_cache` with `slice 1m` (the key and Range header the slice module needs).
        case nginxSlice
        /// squid with `range_offset_limit -1` (a range fetches and caches the whole object).
        case squid
    }

    /// The namespaces and their processes.
    public let lab = NetworkLab()
    /// The client's namespace.
    public let client: String
    /// The origin's namespace.
    public let origin: String
    /// The cache's namespace.
    public let cacheNamespace: String
    /// Files of the origin, the cache and their logs; removed by `close()`.
    public let directory: URL
    /// The origin's document root.
    public var root: URL { directory.appendingPathComponent("www") }
    /// The proxy URL clients are given.
    public static let proxyURL = "http://10.77.2.1:3128"

    /// Builds the three namespaces and starts the origin (`originRate` per connection, nginx
    /// `limit_rate`; "0" for none) and `cache`; waits (with deadlines) until both accept.
    public init(cache: Cache, originRate: String = "0") throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("cach-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("www"), withIntermediateDirectories: true)
        origin = try lab.namespace("ori")
        cacheNamespace = try lab.namespace("cch")
        client = try lab.namespace("cli")
        try ip("-n \(origin) link add up0 type veth peer name down0 netns \(cacheNamespace)")
        try ip("-n \(cacheNamespace) link add down1 type veth peer name up1 netns \(client)")
        try ip("-n \(origin) addr add 10.77.1.2/24 dev up0")
        try ip("-n \(origin) link set up0 up")
        try ip("-n \(cacheNamespace) addr add 10.77.1.1/24 dev down0")
        try ip("-n \(cacheNamespace) link set down0 up")
        try ip("-n \(cacheNamespace) addr add 10.77.2.1/24 dev down1")
        try ip("-n \(cacheNamespace) link set down1 up")
        try ip("-n \(client) addr add 10.77.2.2/24 dev up1")
        try ip("-n \(client) link set up1 up")
        try ip("-n \(client) route add default via 10.77.2.1")
        try startOrigin(rate: originRate)
        switch cache {
        case .nginxSlice: try startNginxCache()
        case .squid: try startSquid()
        }
    }

    /// Whether the tools are installed (squid only for `.squid`).
    public static func isAvailable(_ cache: Cache) -> Bool {
        let nginx = FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx")
        return cache == .squid ? nginx && FileManager.default.isExecutableFile(atPath: "/usr/sbin/squid") : nginx
    }

    /// The origin URL of `name`.
    public func url(_ name: String) -> String { "http://10.77.1.2/\(name)" }

    /// Places `data` at `name` on the origin, atomically (a rename), stamped `modified`: two
    /// versions of one length differ in Last-Modified and so in nginx's ETag.
    public func serve(_ data: Data, at name: String, modified: Date) throws {
        let temporary = root.appendingPathComponent(".\(name).new")
        try data.write(to: temporary)
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: temporary.path)
        guard rename(temporary.path, root.appendingPathComponent(name).path) == 0 else { throw POSIXError(.EIO) }
    }

    /// Body bytes the origin sent, from its access log (finished requests).
    public var originBytesSent: Int {
        let text = (try? String(contentsOf: directory.appendingPathComponent("origin.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { $0.split(separator: " ").dropFirst().first.flatMap { Int($0) } }.reduce(0, +)
    }

    /// One request squid logged (`.squid` only): its result (`TCP_MISS/206`, `TCP_MISS_ABORTED/206`,
    /// ...), bytes sent to the client with the head, and its `Range` header.
    public struct SquidRequest: Sendable, CustomStringConvertible {
        public var result: String
        public var bytes: Int
        public var range: String
        public var description: String { "\(result) \(bytes) \(range)" }
    }

    /// The requests squid logged so far (finished or aborted ones; squid logs a request when it ends).
    public var squidRequests: [SquidRequest] {
        let text = (try? String(contentsOf: directory.appendingPathComponent("squid/access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 7, let bytes = Int(fields[4]) else { return nil }
            return SquidRequest(result: String(fields[3]), bytes: bytes, range: fields[6...].joined(separator: " "))
        }
    }

    /// Kills the servers and removes the namespaces and files.
    public func close() {
        lab.close()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { close() }

    private func startOrigin(rate: String) throws {
        let p = directory.path + "/origin"
        try FileManager.default.createDirectory(atPath: p + "/tmp", withIntermediateDirectories: true)
        let configuration = """
        \(DownloadFixtures.nginxPrelude(prefix: p, workerConnections: 512))
        http {
            log_format bytes '$status $body_bytes_sent $http_range';
            access_log \(directory.path)/origin.log bytes;
        \(DownloadFixtures.nginxTemporaryPaths(prefix: p))
            default_type application/octet-stream;
            server {
                listen 10.77.1.2:80;
                root \(root.path);
                limit_rate \(rate);
            }
        }
        """
        try configuration.write(toFile: p + "/nginx.conf", atomically: true, encoding: .utf8)
        _ = try lab.spawn(["ip", "netns", "exec", origin, "/usr/sbin/nginx", "-c", p + "/nginx.conf", "-p", p + "/", "-e", p + "/error.log"])
        try waitForListener(in: origin, address: "10.77.1.2", port: 80, log: p + "/error.log")
    }

    /// The nginx slice cache of docs/downloads.md ("Through a site cache").
    private func startNginxCache() throws {
        let p = directory.path + "/cache"
        try FileManager.default.createDirectory(atPath: p + "/tmp", withIntermediateDirectories: true)
        let configuration = """
        \(DownloadFixtures.nginxPrelude(prefix: p, workerConnections: 1024))
        http {
            access_log off;
        \(DownloadFixtures.nginxTemporaryPaths(prefix: p))
        \(try Self.sliceCacheTemplate(store: p + "/store"))
        }
        """
        try configuration.write(toFile: p + "/nginx.conf", atomically: true, encoding: .utf8)
        _ = try lab.spawn(["ip", "netns", "exec", cacheNamespace, "/usr/sbin/nginx", "-c", p + "/nginx.conf", "-p", p + "/",
                           "-e", p + "/error.log"])
        try waitForListener(in: cacheNamespace, address: "10.77.2.1", port: 3128, log: p + "/error.log")
    }

    /// Tests/Servers/nginx-slice-cache.conf.in (bench/fleet_bench.py reads it too), its store at `store`.
    static func sliceCacheTemplate(store: String) throws -> String {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Servers/nginx-slice-cache.conf.in")
        return try String(contentsOf: file, encoding: .utf8).replacingOccurrences(of: "@STORE@", with: store)
    }

    /// squid of docs/downloads.md: memory cache only, ranges widened to the whole object.
    private func startSquid() throws {
        let p = directory.path + "/squid"
        try FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true)
        let configuration = """
        http_port 10.77.2.1:3128
        http_access allow all
        visible_hostname sitecache
        cache_mem 512 MB
        maximum_object_size 4 GB
        maximum_object_size_in_memory 256 MB
        range_offset_limit -1
        quick_abort_min -1 KB
        collapsed_forwarding on
        refresh_pattern . 60 20% 4320
        pid_filename none
        logformat ranges %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm "%{Range}>h"
        access_log stdio:\(p)/access.log ranges
        cache_log \(p)/cache.log
        cache_store_log none
        coredump_dir \(p)
        shutdown_lifetime 0 seconds
        """
        try configuration.write(toFile: p + "/squid.conf", atomically: true, encoding: .utf8)
        // Run as root, squid drops to its cache_effective_user (Debian's `proxy`): its files must be that user's.
        try sh(["chown", "-R", "proxy:proxy", p])
        _ = try lab.spawn(["ip", "netns", "exec", cacheNamespace, "/usr/sbin/squid", "-N", "-f", p + "/squid.conf"])
        try waitForListener(in: cacheNamespace, address: "10.77.2.1", port: 3128, log: p + "/cache.log")
    }

    private func waitForListener(in namespace: String, address: String, port: Int, log: String) throws {
        let listening = DownloadFixtures.waitSync(timeout: .seconds(20)) {
            ((try? sh(["ip", "netns", "exec", namespace, "ss", "-Hltn", "src", "\(address):\(port)"])) ?? "").contains(":\(port)")
        }
        guard listening else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw LabCommandFailure(description: "no server on \(address):\(port) in \(namespace): \(text.suffix(2000))")
        }
    }
}
