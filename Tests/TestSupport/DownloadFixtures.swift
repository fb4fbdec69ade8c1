import Foundation
import LinuxReachability
import Synchronization
import Testing
@testable import ResumableDownloads  // DownloadError.with(description:), internal to the engine

/// Fixtures for the download integration tests: a real nginx, a scriptable hostile HTTP server,
/// temporary directories and deadline-based waits. Everything binds to 127.0.0.1 only.
public enum DownloadFixtures {
    /// Whether the tests run as root (namespaces, other users).
    public static var isRoot: Bool { geteuid() == 0 }

    /// A temporary directory removed on deinit.
    public typealias Directory = ScratchDirectory

    /// Deterministic pseudo-random bytes (fast enough for tens of MiB).
    public static func randomData(count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> Data {
        var state = seed
        var data = Data(count: count)
        data.withUnsafeMutableBytes { buffer in
            let words = buffer.bindMemory(to: UInt64.self)
            for index in words.indices {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                words[index] = state
            }
            for index in (words.count * 8)..<count { buffer[index] = UInt8(truncatingIfNeeded: index) }
        }
        return data
    }

    /// The SHA-256 of `data`, in hex.
    public static func sha256(_ data: Data) -> String { SHA256.hex(data) }

    /// The SHA-256 of the file at `url`, in hex; nil when it cannot be read.
    public static func sha256(fileAt url: URL) -> String? {
        FileManager.default.contents(atPath: url.path).map(sha256)
    }

    /// Waits for `condition` with a deadline, polling (`Polling.wait`, shared with the CLI tests).
    public static func wait(timeout: Duration = .seconds(20), _ condition: @Sendable () async -> Bool) async -> Bool {
        await Polling.wait(timeout: timeout, condition)
    }

    /// `wait` for synchronous conditions (process, file and socket checks): polls every 5 ms
    /// until the condition holds or the deadline passes; returns whether it held.
    public static func waitSync(timeout: Duration = .seconds(30), _ condition: () -> Bool) -> Bool {
        waitUntilBlocking(deadline: .now + timeout, condition)
    }

    /// The nginx directives every test server shares: foreground, one process, files under
    /// `prefix` (a server run by tests must not touch /var).
    public static func nginxPrelude(prefix: String, workerConnections: Int) -> String {
        """
        daemon off;
        master_process off;
        worker_processes 1;
        error_log \(prefix)/error.log warn;
        pid \(prefix)/nginx.pid;
        events { worker_connections \(workerConnections); }
        """
    }

    /// Temporary-file paths inside `prefix`, for the `http` block.
    public static func nginxTemporaryPaths(prefix: String) -> String {
        """
            client_body_temp_path \(prefix)/tmp/body;
            proxy_temp_path \(prefix)/tmp/proxy;
            fastcgi_temp_path \(prefix)/tmp/fastcgi;
            uwsgi_temp_path \(prefix)/tmp/uwsgi;
            scgi_temp_path \(prefix)/tmp/scgi;
        """
    }

    /// A free TCP port on 127.0.0.1 (bound then released; the tiny race is acceptable in tests).
    public static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        return UInt16(bigEndian: address.sin_port)
    }

    /// Whether something accepts on 127.0.0.1:`port`.
    public static func canConnect(port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// Collects a download's events for deadline-based waits.
    public typealias EventLog = TestSupport.EventLog

    /// Runs `finished()` with a deadline so a hung download fails the test instead of CI; with
    /// `log`, also waits until the log has recorded the outcome, so it can be inspected.
    public static func finish(_ download: Download, log: EventLog? = nil, timeout: Duration = .seconds(60)) async throws -> URL {
        do {
            let url = try await finishing(download, timeout: timeout)
            await log?.settled()
            return url
        } catch {
            await log?.settled()
            throw error
        }
    }

    private static func finishing(_ download: Download, timeout: Duration) async throws -> URL {
        try await withThrowingTaskGroup(of: URL?.self) { group in
            group.addTask { try await download.finished() }
            group.addTask { try? await Task.sleep(for: timeout); return nil }
            guard let first = try await group.next(), let url = first else {
                group.cancelAll()
                throw DownloadError.timedOut.with(description: "download did not finish within \(timeout)")
            }
            group.cancelAll()
            return url
        }
    }

    /// An agent configuration with short waits for tests, edited by `edit`.
    public static func configuration(state: URL, _ edit: (inout DownloadAgent.Configuration) -> Void = { _ in }) -> DownloadAgent.Configuration {
        var configuration = DownloadAgent.Configuration(stateDirectory: state, maximumOutageWait: .seconds(30),
                                                        stallTimeout: .seconds(2), connectTimeout: .seconds(5),
                                                        initialBackoff: .milliseconds(20), maximumBackoff: .milliseconds(200),
                                                        maximumRetryAfter: .seconds(2), checkpointInterval: 1 << 20)
        if ProcessInfo.processInfo.environment["DOWNLOAD_TEST_LOG"] != nil {
            configuration.logger = Logger(label: "download-test", minimumLevel: .debug)
        }
        edit(&configuration)
        return configuration
    }
}

/// nginx on 127.0.0.1 with its own generated config, serving `root`; `/slow/` is rate limited.
public final class DownloadTestNginx: Sendable {
    /// The plain-HTTP port.
    public let port: UInt16
    /// HTTPS port when started with `tls: true` (self-signed certificate for IP 127.0.0.1).
    public let tlsPort: UInt16?
    /// nginx's prefix directory (config, logs, temporary files).
    public let prefix: URL
    /// The directory it serves.
    public let root: URL
    private let process: Process

    /// The self-signed certificate to trust for `tlsPort`.
    public var certificate: URL { prefix.appendingPathComponent("cert.pem") }

    /// Starts nginx in the foreground as a child; waits (with a deadline) until it accepts.
    /// `accessLog`: requests are logged (`loggedRequests`).
    /// `locations`: more `location` blocks for the server (e.g. one that starts answering 403).
    public init(slowRate: String = "2m", tls: Bool = false, accessLog: Bool = false, locations: String = "") throws {
        prefix = FileManager.default.temporaryDirectory.appendingPathComponent("nginx-\(UUID().uuidString)")
        root = prefix.appendingPathComponent("www")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("slow"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: prefix.appendingPathComponent("tmp"), withIntermediateDirectories: true)
        port = try DownloadFixtures.freePort()
        let p = prefix.path
        var tlsServer = ""
        if tls {
            let tlsPort = try DownloadFixtures.freePort()
            self.tlsPort = tlsPort
            let openssl = try ChildProcess.run("/usr/bin/openssl", [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", p + "/key.pem", "-out", p + "/cert.pem"], environment: nil)
            guard openssl.status == 0 else { throw POSIXError(.EIO) }
            tlsServer = """
                server {
                    listen 127.0.0.1:\(tlsPort) ssl;
                    ssl_certificate \(p)/cert.pem;
                    ssl_certificate_key \(p)/key.pem;
                    root \(root.path);
                }
            """
        } else {
            tlsPort = nil
        }
        let configuration = """
        \(DownloadFixtures.nginxPrelude(prefix: p, workerConnections: 256))
        http {
            log_format requests '$status $body_bytes_sent $http_range';
            \(accessLog ? "access_log \(p)/access.log requests;" : "access_log off;")
        \(DownloadFixtures.nginxTemporaryPaths(prefix: p))
            default_type application/octet-stream;
            sendfile on;
            server {
                listen 127.0.0.1:\(port);
                root \(root.path);
                location /slow/ { limit_rate \(slowRate); }
                \(locations)
            }
        \(tlsServer)
        }
        """
        let configPath = prefix.appendingPathComponent("nginx.conf")
        try configuration.write(to: configPath, atomically: true, encoding: .utf8)
        process = try ChildProcess.start("/usr/sbin/nginx", ["-c", configPath.path, "-p", p + "/", "-e", p + "/error.log"],
                                         input: FileHandle.standardInput)
        let process = self.process
        _ = DownloadFixtures.waitSync(timeout: .seconds(10)) { !process.isRunning || DownloadFixtures.canConnect(port: port) }
        guard process.isRunning, DownloadFixtures.canConnect(port: port) else {
            let log = (try? String(contentsOf: prefix.appendingPathComponent("error.log"), encoding: .utf8)) ?? ""
            stop()
            throw DownloadError.cannotConnectToHost.with(description: "nginx did not start: \(log)")
        }
    }

    /// Whether nginx is installed.
    public static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx") }

    /// `status bytes range` per finished request (with `accessLog`).
    public var loggedRequests: [String] {
        let text = (try? String(contentsOf: prefix.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }
    /// Whether nginx and openssl (for the test certificate) are installed.
    public static var isTLSAvailable: Bool { isAvailable && FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") }

    /// The HTTPS URL of `path`.
    public func tlsURL(_ path: String) -> URL { URL(string: "https://127.0.0.1:\(tlsPort ?? 0)/\(path)")! }

    /// Places `data` at `path` under the document root.
    public func serve(_ data: Data, at path: String) throws {
        let url = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: url)
    }

    /// The HTTP URL of `path`.
    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)/\(path)")! }

    /// Stops nginx (nothing when already stopped).
    public func stop() {
        if process.isRunning {
            // With `master_process off` nginx ignores SIGTERM (seen with nginx 1.22), so kill it.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: prefix)
    }

    deinit { stop() }
}

/// A tiny HTTP/1.1 server on 127.0.0.1 whose every answer is scripted, to misbehave on purpose.
public final class DownloadTestHTTPServer: Sendable {
    /// One request as the server read it.
    public struct Request: Sendable {
        /// The request target.
        public var path: String
        /// Header fields, names in lower case.
        public var headers: [String: String]
        /// N from `Range: bytes=N-` or `bytes=N-M`.
        public var rangeStart: Int64? {
            guard let value = headers["range"], value.hasPrefix("bytes="), let dash = value.firstIndex(of: "-") else { return nil }
            return Int64(value[value.index(value.startIndex, offsetBy: 6)..<dash])
        }
        /// M from `Range: bytes=N-M` (the last byte asked for), nil for `bytes=N-`.
        public var rangeLast: Int64? {
            guard let value = headers["range"], let dash = value.firstIndex(of: "-") else { return nil }
            return Int64(value[value.index(after: dash)...])
        }
        /// The `If-Range` validator.
        public var ifRange: String? { headers["if-range"] }
    }

    /// What the server answers, and how it misbehaves.
    public struct Reply: Sendable {
        /// The status code.
        public var status: Int
        /// Header fields, in order.
        public var headers: [(String, String)]
        /// The body.
        public var body: Data
        /// Close the connection after this many body bytes (short body).
        public var closeAfter: Int?
        /// Send this many body bytes, then stall (keep the socket open) until the client leaves.
        public var stallAfter: Int?
        /// Send this many body bytes, then reset the connection (SO_LINGER 0 + close sends RST).
        public var resetAfter: Int?
        /// Add Content-Length automatically from `body` (false for close-delimited bodies).
        public var sendsContentLength = true
        /// Send this many body bytes, then pause for `pause` before sending the rest.
        public var pauseAfter: Int?
        /// How long the pause after `pauseAfter` lasts.
        public var pause: Duration = .zero
        /// Wait this long before sending the head.
        public var headDelay: Duration?
        /// Send nothing at all (a tarpit): hold the connection until the client leaves.
        public var neverAnswers = false
        /// Send exactly these bytes as the whole answer (a broken reply), then close.
        public var raw: Data?
        /// Send the head one byte at a time, this far apart (a server dripping its headers).
        public var headByteInterval: Duration?
        /// Send the body in bursts of this many bytes, `burstInterval` apart (a per-second rate
        /// limiter: a second's quota at once, then silence).
        public var burstSize: Int?
        /// The time between bursts.
        public var burstInterval: Duration = .seconds(1)
        /// Send the body at about this rate (a server capping each connection).
        public var bytesPerSecond: Int?

        /// An answer with the commonest knobs; the others are set as properties.
        public init(status: Int, headers: [(String, String)] = [], body: Data = Data(), closeAfter: Int? = nil,
             stallAfter: Int? = nil, sendsContentLength: Bool = true) {
            self.status = status
            self.headers = headers
            self.body = body
            self.closeAfter = closeAfter
            self.stallAfter = stallAfter
            self.sendsContentLength = sendsContentLength
        }

        /// A well-behaved answer for `content` honouring `Range: bytes=N-` when `etag` matches If-Range.
        public static func honest(_ request: Request, content: Data, etag: String, closeAfter: Int? = nil) -> Reply {
            if let start = request.rangeStart, request.ifRange == nil || request.ifRange == etag {
                if start >= content.count {
                    return Reply(status: 416, headers: [("Content-Range", "bytes */\(content.count)")])
                }
                let last = min(Int64(content.count - 1), request.rangeLast ?? Int64(content.count - 1))
                return Reply(status: 206, headers: [("ETag", etag),
                                                    ("Content-Range", "bytes \(start)-\(last)/\(content.count)")],
                             body: content.subdata(in: Int(start)..<Int(last + 1)), closeAfter: closeAfter)
            }
            return Reply(status: 200, headers: [("ETag", etag)], body: content, closeAfter: closeAfter)
        }
    }

    /// The port it listens on.
    public let port: UInt16
    private let listener: Int32
    private let log = Mutex<[Request]>([])
    private let isStopped = Atomic<Bool>(false)
    private let accepted = Atomic<Int>(0)
    private let acceptTimes = Mutex<[ContinuousClock.Instant]>([])
    /// Requests being answered now, and the most at once.
    private let answering = Mutex<(now: Int, most: Int)>((0, 0))

    /// `handler` gets each request and its zero-based index.
    public init(handler: @escaping @Sendable (Request, Int) -> Reply) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 64) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ok else { close(fd); throw POSIXError(.EADDRINUSE) }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in acceptLoop(handler) }
        thread.start()
    }

    /// The requests so far.
    public var requests: [Request] { log.withLock { $0 } }
    /// Connections accepted, with or without a request.
    public var connections: Int { accepted.load(ordering: .relaxed) }
    /// When each connection was accepted.
    public var connectionTimes: [ContinuousClock.Instant] { acceptTimes.withLock { $0 } }

    /// The most requests answered at once.
    public var mostAtOnce: Int { answering.withLock { $0.most } }

    /// Body and head bytes handed to the kernel so far (bytes a killed client never read included).
    public var bytesSent: Int { sent.load(ordering: .relaxed) }
    private let sent = Atomic<Int>(0)

    /// The URL of `path`.
    public func url(_ path: String = "file") -> URL { URL(string: "http://127.0.0.1:\(port)/\(path)")! }

    /// Stops listening.
    public func stop() {
        guard !isStopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    deinit { stop() }

    private func acceptLoop(_ handler: @escaping @Sendable (Request, Int) -> Reply) {
        while !isStopped.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            accepted.add(1, ordering: .relaxed)
            acceptTimes.withLock { $0.append(.now) }
            let thread = Thread { [self] in serve(client, handler) }
            thread.start()
        }
    }

    private func serve(_ client: Int32, _ handler: @Sendable (Request, Int) -> Reply) {
        defer { close(client) }
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !buffer.ends(with: [13, 10, 13, 10]) {
            let count = recv(client, &chunk, chunk.count, 0)
            guard count > 0 else { return }
            buffer += chunk[0..<count]
            if buffer.count > 65536 { return }
        }
        let lines = String(decoding: buffer, as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = lines.first?.split(separator: " ") ?? []
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let request = Request(path: requestLine.count > 1 ? String(requestLine[1]) : "/", headers: headers)
        answering.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
        defer { answering.withLock { $0.now -= 1 } }
        let index = log.withLock { log -> Int in log.append(request); return log.count - 1 }
        let reply = handler(request, index)

        if reply.neverAnswers {
            holdUntilTheClientLeaves(client)
            return
        }
        if let raw = reply.raw {
            _ = sendAll(client, raw)
            return
        }
        if let delay = reply.headDelay { Self.pace(delay) }
        var head = "HTTP/1.1 \(reply.status) Scripted\r\nConnection: close\r\n"
        for (name, value) in reply.headers { head += "\(name): \(value)\r\n" }
        if reply.sendsContentLength { head += "Content-Length: \(reply.body.count)\r\n" }
        head += "\r\n"
        if let interval = reply.headByteInterval {
            for byte in head.utf8 {
                guard !isStopped.load(ordering: .relaxed), sendAll(client, Data([byte])) else { return }
                Self.pace(interval)
            }
        } else {
            guard sendAll(client, Data(head.utf8)) else { return }
        }
        let limit = min(reply.body.count, reply.closeAfter ?? Int.max, reply.stallAfter ?? Int.max,
                        reply.resetAfter ?? Int.max)
        if let burst = reply.burstSize {
            var sent = 0
            while sent < limit {
                let end = min(limit, sent + burst)
                guard !isStopped.load(ordering: .relaxed), sendAll(client, reply.body.subdata(in: sent..<end)) else { return }
                sent = end
                if sent < limit { Self.pace(reply.burstInterval) }
            }
        } else if let pauseAfter = reply.pauseAfter, pauseAfter < limit {
            guard sendAll(client, reply.body.prefix(pauseAfter)) else { return }
            Self.pace(reply.pause)
            guard sendAll(client, reply.body.subdata(in: pauseAfter..<limit)) else { return }
        } else if let rate = reply.bytesPerSecond, rate > 0 {
            // 16 KiB at a time, each after its share of time since the start.
            let started = ContinuousClock.now
            var sent = 0
            while sent < limit {
                let count = min(16 << 10, limit - sent)
                guard sendAll(client, reply.body.subdata(in: sent..<sent + count)) else { return }
                sent += count
                let due = started + .milliseconds(Int64(sent) * 1000 / Int64(rate))
                let now = ContinuousClock.now
                if due > now { Self.pace(due - now) }
            }
        } else {
            guard sendAll(client, reply.body.prefix(limit)) else { return }
        }
        if reply.resetAfter != nil {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(client, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            return   // the deferred close now sends RST
        }
        if reply.stallAfter != nil { holdUntilTheClientLeaves(client) }
    }

    /// Holds the connection silently until the client gives up (its stall timeout) or we stop.
    /// The scripted server's pacing (a slow head, a drip, a burst's gap, a stall): how this
    /// server behaves on its own thread, not a test waiting for something.
    private static func pace(_ duration: Duration) {
        usleep(useconds_t(duration.milliseconds * 1000))
    }

    private func holdUntilTheClientLeaves(_ client: Int32) {
        var chunk = [UInt8](repeating: 0, count: 4096)
        var pollDescriptor = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
        while !isStopped.load(ordering: .relaxed) {
            if poll(&pollDescriptor, 1, 100) > 0 {
                if recv(client, &chunk, chunk.count, 0) <= 0 { return }
            }
        }
    }

    private func sendAll(_ fd: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { bytes in
            var sent = 0
            while sent < bytes.count {
                let result = send(fd, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
                if result < 0 { if errno == EINTR { continue }; return false }
                sent += result
                self.sent.add(result, ordering: .relaxed)
            }
            return true
        }
    }
}

fileprivate extension Array where Element == UInt8 {
    /// Whether the bytes end with `suffix`.
    public func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}

extension ScratchDirectory {
    /// `name` inside the directory (a download's destination, its state directory).
    public func file(_ name: String) -> URL { url(name) }
}

extension DownloadFixtures {
    /// nginx on loopback serving `count` bytes of fresh random content (from `seed`) at `path`,
    /// and a scratch directory for the client's side: the start most nginx scenarios share.
    /// `slowRate`, `tls` and `accessLog` are `DownloadTestNginx`'s; `label` names the directory.
    public static func nginxServing(count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15, at path: String,
                                    slowRate: String = "2m", tls: Bool = false, accessLog: Bool = false,
                                    label: String = "t") throws -> (nginx: DownloadTestNginx, directory: Directory, content: Data) {
        let nginx = try DownloadTestNginx(slowRate: slowRate, tls: tls, accessLog: accessLog)
        let directory = try Directory(label)
        let content = randomData(count: count, seed: seed)
        try nginx.serve(content, at: path)
        return (nginx, directory, content)
    }
}

extension DownloadFixtures {
    /// An agent on `configuration` whose paths the test scripts through the returned
    /// continuation, starting at `first` (`Paths.offline`, a scripted wifi, ...).
    public static func scriptedAgent(_ configuration: DownloadAgent.Configuration, startingAt first: NetworkPath)
        throws -> (agent: DownloadAgent, paths: AsyncStream<NetworkPath>.Continuation) {
        let (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        continuation.yield(first)
        return (try DownloadAgent(configuration: configuration, paths: paths), continuation)
    }
}
