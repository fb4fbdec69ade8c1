import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 34 item 1, ranges from several mirrors at once: `reachability download` against three
/// nginx servers on loopback, each capping a connection (`limit_rate`): a fast one, a slow one
/// and one serving different bytes of the same length. The file is right, the bad mirror is
/// dropped (a `sourceDropped` event), and the fast one carried most of the bytes, counted from
/// the servers' access logs.
@Suite("reachability download: ranges over three loopback mirrors", .serialized,
       .needsNginx)
struct MirrorSegmentsTests: DownloadScenarios {

    struct Mirrors {
        let fast: DownloadTestNginx, slow: DownloadTestNginx, bad: DownloadTestNginx
        let content: Data
        var fastURL: String { fast.url("slow/f.bin").absoluteString }
        var slowURL: String { slow.url("slow/f.bin").absoluteString }
        var badURL: String { bad.url("slow/f.bin").absoluteString }

        init(seed: UInt64, size: Int = 24 << 20) throws {
            fast = try DownloadTestNginx(slowRate: "4m", accessLog: true)
            slow = try DownloadTestNginx(slowRate: "1m", accessLog: true)
            bad = try DownloadTestNginx(slowRate: "2m", accessLog: true)
            content = F.randomData(count: size, seed: seed)
            var other = content
            for offset in stride(from: 0, to: other.count, by: 4096) { other[offset] ^= 0x5A }   // every block differs
            try fast.serve(content, at: "slow/f.bin")
            try slow.serve(content, at: "slow/f.bin")
            try bad.serve(other, at: "slow/f.bin")
        }

        func stop() { fast.stop(); slow.stop(); bad.stop() }

        /// Body bytes a server sent, from its access log (`status bytes range` lines).
        static func bytesSent(_ server: DownloadTestNginx) -> Int {
            server.loggedRequests.reduce(0) { $0 + (Int($1.split(separator: " ").dropFirst().first ?? "") ?? 0) }
        }
    }

    @Test func withSHA256TheFastMirrorCarriesMostAndTheBadOneIsDropped() async throws {
        let mirrors = try Mirrors(seed: 3421)
        defer { mirrors.stop() }
        let directory = try F.Directory("mirr34b")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-o", "f.bin",
                                  "--sha256", F.sha256(mirrors.content), mirrors.fastURL,
                                  "--mirror", mirrors.slowURL, "--mirror", mirrors.badURL], directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        try check(run, mirrors, directory)
    }

    @Test func withMetalinkPiecesTheBadMirrorIsDroppedWhereverItIsListed() async throws {
        let mirrors = try Mirrors(seed: 3422)
        defer { mirrors.stop() }
        let directory = try F.Directory("mirr34b")
        try Data(DownloadMetalinkTests.metalink(name: "f.bin", content: mirrors.content, wholeHash: false,
                                                urls: [(mirrors.badURL, 1), (mirrors.fastURL, 2), (mirrors.slowURL, 3)]).utf8)
            .write(to: directory.file("f.meta4"))
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--metalink", "f.meta4"],
                                 directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        try check(run, mirrors, directory, reason: "failed a piece hash", mustReachBad: true)
    }

    /// `download --metalink URL`: the document is fetched (at most 1 MiB), then used as a file is.
    @Test func aMetalinkByURLIsFetchedThenUsed() async throws {
        let mirrors = try Mirrors(seed: 3423, size: 4 << 20)
        defer { mirrors.stop() }
        let directory = try F.Directory("mirr34b")
        try mirrors.fast.serve(Data(DownloadMetalinkTests.metalink(name: "f.bin", content: mirrors.content, wholeHash: true,
                                                                   urls: [(mirrors.fastURL, 1), (mirrors.slowURL, 2)]).utf8), at: "f.meta4")
        try mirrors.fast.serve(Data(repeating: 0x20, count: (1 << 20) + 1), at: "huge.meta4")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--metalink",
                                  mirrors.fast.url("f.meta4").absoluteString], directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content))
        let huge = try CLIProcess(["download", "--state-dir", directory.file("state").path, "--metalink",
                                   mirrors.fast.url("huge.meta4").absoluteString], directory: directory.url)
        #expect(await huge.waitForExit() == 65, "\(huge.transcript)")
        #expect(huge.standardError.contains("larger than 1048576 bytes"), "\(huge.transcript)")
        let missing = try CLIProcess(["download", "--state-dir", directory.file("state").path, "--metalink",
                                      mirrors.fast.url("missing.meta4").absoluteString], directory: directory.url)
        #expect(await missing.waitForExit() == 1, "\(missing.transcript)")
        #expect(missing.standardError.contains("HTTP 404"), "\(missing.transcript)")
    }

    /// `queue add --mirror URL`: the agent spreads the job over its sources and drops the bad one.
    @Test(.needsRoot) func theAgentTakesMirrors() throws {
        let mirrors = try Mirrors(seed: 3424)
        defer { mirrors.stop() }
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("mirr34b")
        try AgentTests.allowDownloads(into: directory)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name])
        defer { agent.stop() }
        let added = try agent.control(["queue", "add", mirrors.fastURL, "-o", directory.file("f.bin").path,
                                       "--sha256", F.sha256(mirrors.content), "--mirror", mirrors.slowURL, "--mirror", mirrors.badURL])
        #expect(added.status == 0, "\(added)")
        #expect(agent.waitForLine(timeout: .seconds(60)) { $0.contains(#""event":"completed""#) } != nil, "\(agent.output)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content))
        // Whether the planner reaches the bad mirror before the end depends on its rounds: when
        // the bad mirror sent bytes, it is dropped, and never another.
        let dropped = AgentSetURLTests.events(agent, "sourceDropped")
        let badSent = Mirrors.bytesSent(mirrors.bad)
        #expect(dropped.allSatisfy { $0["source"] as? String == mirrors.badURL }, "\(agent.output)")
        #expect(badSent == 0 || dropped.count == 1, "bad mirror sent \(badSent) bytes, \(dropped.count) dropped: \(agent.output)")
        let refused = try agent.control(["queue", "add", mirrors.fastURL, "--mirror", "ftp://x/f"])
        #expect(refused.status == 64, "\(refused)")
        _ = agent.terminate()
    }

    /// The same three mirrors, each an nginx in its own namespace behind a veth pair to the
    /// client's namespace (10.34.N.1 mirror, 10.34.N.2 client), the slow one shaped on its link
    /// with `tc tbf` instead of `limit_rate`: the bytes cross real links, not loopback.
    final class NamespacedMirrors: Sendable {
        let lab = NetworkLab()
        let client: String
        let content: Data
        let directory: F.Directory
        /// (name, subnet, nginx `limit_rate`, tbf rate on the mirror's end of its link)
        static let layout = [("fast", 1, "4m", nil), ("slow", 2, "0", "8mbit"), ("bad", 3, "2m", nil)] as [(String, Int, String, String?)]

        init(seed: UInt64, size: Int = 24 << 20) throws {
            content = F.randomData(count: size, seed: seed)
            directory = try F.Directory("mirr34n")
            client = try lab.namespace("c")
            do {
                // Every byte differs: with one byte in 4096 changed, a seam's overlap that misses
                // the changed bytes "agrees", corroborating the bad mirror (seen: then a later
                // mismatch blames no one and the whole file restarts from zero).
                let other = Data(content.map { $0 ^ 0x5A })
                for (name, subnet, rate, shaped) in Self.layout {
                    let namespace = try lab.namespace(name)
                    try ip("link add m\(subnet) netns \(client) type veth peer name eth0 netns \(namespace)")
                    try ip("-n \(namespace) addr add 10.34.\(subnet).1/24 dev eth0")
                    try ip("-n \(namespace) link set eth0 up")
                    try ip("-n \(client) addr add 10.34.\(subnet).2/24 dev m\(subnet)")
                    try ip("-n \(client) link set m\(subnet) up")
                    if let shaped {
                        try sh(["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                                "rate", shaped, "burst", "32kb", "latency", "50ms"])
                    }
                    try startNginx(name, in: namespace, subnet: subnet, rate: rate, serving: name == "bad" ? other : content)
                }
                // A default route, so the client's path monitor sees the network up.
                try ip("-n \(client) route add default via 10.34.1.1 dev m1")
            } catch { lab.close(); throw error }
        }

        private func startNginx(_ name: String, in namespace: String, subnet: Int, rate: String, serving data: Data) throws {
            let prefix = directory.file(name).path
            try FileManager.default.createDirectory(atPath: prefix + "/tmp", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: prefix + "/www", withIntermediateDirectories: true)
            try data.write(to: directory.file("\(name)/www/f.bin"))
            // Another modification time on every copy, as on mirrors that copied the file at
            // different times: nginx's ETag is mtime-length, so each mirror has its own ETag (the
            // SHA-256 proves the bytes; each mirror is held to its own validator).
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 1_790_000_000 + Double(subnet) * 7)],
                                                  ofItemAtPath: directory.file("\(name)/www/f.bin").path)
            try """
            \(DownloadFixtures.nginxPrelude(prefix: prefix, workerConnections: 256))
            http {
                log_format requests '$status $body_bytes_sent $http_range';
                access_log \(prefix)/access.log requests;
            \(DownloadFixtures.nginxTemporaryPaths(prefix: prefix))
                default_type application/octet-stream;
                sendfile on;
                server {
                    listen 10.34.\(subnet).1:80;
                    root \(prefix)/www;
                    limit_rate \(rate);
                }
            }
            """.write(toFile: prefix + "/nginx.conf", atomically: true, encoding: .utf8)
            // `ip netns exec` execs nginx, so the lab's SIGKILL at close reaches nginx itself.
            let process = try lab.spawn(["ip", "netns", "exec", namespace, "/usr/sbin/nginx", "-c", prefix + "/nginx.conf",
                                         "-p", prefix + "/", "-e", prefix + "/error.log"])
            let listening = { !((try? sh(["ip", "netns", "exec", namespace, "ss", "-Hltn", "sport = :80"]))?.isEmpty ?? true) }
            _ = DownloadFixtures.waitSync(timeout: .seconds(10)) { !process.isRunning || listening() }
            guard process.isRunning, listening() else {
                let log = (try? String(contentsOfFile: prefix + "/error.log", encoding: .utf8)) ?? ""
                throw LabCommandFailure(description: "nginx did not start in \(namespace): \(log)")
            }
        }

        func url(_ name: String) -> String {
            "http://10.34.\(Self.layout.first { $0.0 == name }!.1).1/f.bin"
        }

        /// Body bytes mirror `name` sent, from its access log (`status bytes range` lines).
        func bytesSent(_ name: String) -> Int {
            let text = (try? String(contentsOf: directory.file("\(name)/access.log"), encoding: .utf8)) ?? ""
            return text.split(separator: "\n").reduce(0) { $0 + (Int($1.split(separator: " ").dropFirst().first ?? "") ?? 0) }
        }

        func close() { lab.close() }
    }

    @Test(.needsRoot) func inNamespacesTheFastMirrorCarriesMostAndTheBadOneIsDropped() async throws {
        let mirrors = try NamespacedMirrors(seed: 3425)
        defer { mirrors.close() }
        let directory = mirrors.directory
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-o", "f.bin",
                                  "--sha256", F.sha256(mirrors.content), mirrors.url("fast"),
                                  "--mirror", mirrors.url("slow"), "--mirror", mirrors.url("bad")],
                                 namespace: mirrors.client, directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(60)) == 0, "\(run.transcript)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content), "the bad mirror's bytes never stay in the file")
        let dropped = run.events.filter { $0["event"] as? String == "sourceDropped" }
        let (fast, slow, bad) = (mirrors.bytesSent("fast"), mirrors.bytesSent("slow"), mirrors.bytesSent("bad"))
        #expect(dropped.allSatisfy { $0["source"] as? String == mirrors.url("bad") }, "only the bad mirror is dropped: \(run.transcript)")
        #expect(dropped.count == 1, "bad mirror sent \(bad) bytes, \(dropped.count) dropped: \(run.transcript)")
        #expect(run.count("completed") == 1 && run.count("failed") == 0 && run.count("sourceChanged") == 0, "\(run.transcript)")
        #expect(fast > slow && fast > bad && fast > mirrors.content.count / 2,
                "fast \(fast), slow \(slow), bad \(bad) bytes sent of \(mirrors.content.count)")
        let problems = run.lines.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
    }

    private func check(_ run: CLIProcess, _ mirrors: Mirrors, _ directory: F.Directory, reason: String? = nil,
                       mustReachBad: Bool = false) throws {
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(mirrors.content), "the bad mirror's bytes never stay in the file")
        let dropped = run.events.filter { $0["event"] as? String == "sourceDropped" }
        let badSent = Mirrors.bytesSent(mirrors.bad)
        #expect(dropped.allSatisfy { $0["source"] as? String == mirrors.badURL }, "only the bad mirror is dropped: \(run.transcript)")
        if mustReachBad {
            #expect(dropped.count == 1, "\(run.transcript)")
        } else {
            // Listed last, the bad mirror is reached only if the ramp's rounds come to it before
            // the end (under load they may not: its bytes are then never fetched).
            #expect(badSent == 0 || dropped.count == 1, "bad mirror sent \(badSent) bytes, \(dropped.count) dropped: \(run.transcript)")
        }
        if let reason { #expect((dropped.first?["reason"] as? String ?? "").contains(reason), "\(dropped)") }
        #expect(run.count("completed") == 1 && run.count("failed") == 0 && run.count("sourceChanged") == 0, "\(run.transcript)")
        let fast = Mirrors.bytesSent(mirrors.fast), slow = Mirrors.bytesSent(mirrors.slow), bad = badSent
        #expect(fast > slow && fast > bad && fast > mirrors.content.count / 2,
                "fast \(fast), slow \(slow), bad \(bad) bytes sent of \(mirrors.content.count)")
        let problems = run.lines.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
    }
}
