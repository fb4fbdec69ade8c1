import Foundation
import Glibc
import Testing
import TestSupport

/// Issue 28's four outages at a random point of an upload, against both servers: the IETF draft
/// test server (upload_server.py) and a real tus server (aiohttp-tus, tus_server.py).
///
/// A client namespace reaches a server namespace (its address on loopback) over one or two veth
/// uplinks shaped with `tc tbf` at 64 Mbit/s; the file is 24 MiB (about 3 s on the wire, so the
/// suite stays fast; `RCH_UPLOAD_TEST_MIB=256` runs issue 28's 256 MiB, at 256 Mbit/s). The
/// outage begins once a random 2 MiB to two thirds of the file have been handed to the socket:
/// - link down: the only uplink goes down for 1 s;
/// - path switch: the primary goes down, the second uplink stays;
/// - upstream blackhole: the server namespace DROPs everything from the client (path up);
/// - server reset: the client namespace REJECTs its own segments to the server with tcp-reset.
/// Each time the server's file is byte-identical, the server read at most 1 MiB twice (its own
/// count of body bytes, a cut-off append included), and bytes flow again (the `resumed` event,
/// after the server answered its offset) within the outage's bound of its restore.
@Suite("Uploads through the four outages", .serialized,
       .enabled(if: getuid() == 0, "network namespaces need root"),
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct UploadFourOutagesTests {
    typealias F = DownloadFixtures
    static let serverAddress = "10.86.0.1"
    /// The file's size: 24 MiB, or `RCH_UPLOAD_TEST_MIB` MiB (issue 28's 256 MiB runs).
    static let mebibytes = ProcessInfo.processInfo.environment["RCH_UPLOAD_TEST_MIB"].flatMap { Int($0) }
        .map { min(max($0, 4), 4096) } ?? 24
    static let length = mebibytes << 20
    /// The uplinks' rate: 64 Mbit/s (24 MiB in about 3 s), raised with the size so a 256 MiB
    /// case stays near 10 s on the wire.
    static let rateMbit = max(64, mebibytes)
    static let port = 8080
    static let hasTus = (try? sh(["python3", "-c", "import aiohttp_tus"])) != nil

    enum Outage: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case linkDown, pathSwitch, blackhole, reset
        var testDescription: String { rawValue }

        /// Restore -> bytes flowing, as a test can hold it on a shared machine. Issue 28 asks
        /// 0.1 s when the kernel shows the restore (the link's return) and 0.3 s otherwise (the
        /// other path taking over; a removed DROP or REJECT, found by the host's first probe
        /// 100 ms after the failure, since the rule goes as soon as the attempt ended): the runs print
        /// their figures for docs/uploads.md. 20 runs in a row at load 2-7 stayed under 0.2 s,
        /// 3 runs of 256 MiB under 0.25 s, and a starved run (load 11-20, before the path switch
        /// resumed at once) took 0.52 s on a link down and 0.61 s on a switch: 0.6 s still
        /// catches an offset question waiting on the dead connection's reader (0.67-5 s before
        /// upload_server.py released it), a backoff after a switch, or a lost restore.
        var flowingBound: Duration { .milliseconds(600) }
    }

    enum Server: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case ietf, tus
        var testDescription: String { rawValue }
        var script: String { self == .ietf ? "upload_server.py" : "tus_server.py" }
        var path: String { self == .ietf ? "ietf/" : "uploads" }
    }

    /// The two namespaces; `uplinks` veth pairs, the first preferred (metric 100, 200 ...).
    final class Lab: Sendable {
        let lab = NetworkLab()
        let client: String
        let server: String
        let directory: ScratchDirectory
        let clientDirectory: ScratchDirectory

        init(uplinks: Int) throws {
            client = try lab.namespace("4c")
            server = try lab.namespace("4s")
            directory = try ScratchDirectory("upload-four")
            clientDirectory = try ScratchDirectory("upload-four-client")
            try ip("-n \(server) addr add \(UploadFourOutagesTests.serverAddress)/32 dev lo")
            for index in 1...uplinks {
                try ip("link add eth\(index) netns \(client) type veth peer name peth\(index) netns \(server)")
                try ip("-n \(server) addr add 10.86.\(index).1/24 dev peth\(index)")
                try ip("-n \(server) link set peth\(index) up")
                try ip("-n \(client) addr add 10.86.\(index).2/24 dev eth\(index)")
                try linkUp(index)
                _ = try sh(["ip", "netns", "exec", client, "tc", "qdisc", "add", "dev", "eth\(index)", "root", "tbf",
                            "rate", "\(UploadFourOutagesTests.rateMbit)mbit", "burst", "64kb", "latency", "50ms"])
            }
        }

        func linkUp(_ index: Int) throws {
            try ip("-n \(client) link set eth\(index) up")
            // The default route goes with the link.
            try ip("-n \(client) route replace default via 10.86.\(index).1 dev eth\(index) metric \(index * 100)")
        }

        func linkDown(_ index: Int) throws { try ip("-n \(client) link set eth\(index) down") }

        /// Uplink `index` up with a route to the server alone and no default route (a LAN, a
        /// lab): the primary path is unsatisfied, the route to the server is not.
        func routeOnlyToTheServer(over index: Int) throws {
            try ip("-n \(client) link set eth\(index) up")
            _ = try? ip("-n \(client) route del default")
            try ip("-n \(client) route replace \(UploadFourOutagesTests.serverAddress)/32 via 10.86.\(index).1 dev eth\(index)")
        }

        func startServer(_ kind: Server) throws {
            let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Servers/\(kind.script)").path
            _ = try lab.spawn(["ip", "netns", "exec", server, "python3", path, "--directory", directory.url.path,
                               "--address", UploadFourOutagesTests.serverAddress, "--port", String(UploadFourOutagesTests.port)])
            let server = server
            let accepts = F.waitSync(timeout: .seconds(15)) {
                (try? sh(["ip", "netns", "exec", server, "bash", "-c",
                          "exec 3<>/dev/tcp/\(UploadFourOutagesTests.serverAddress)/\(UploadFourOutagesTests.port)"])) != nil
            }
            guard accepts else { throw LabCommandFailure(description: "\(kind.script) did not start in \(server)") }
        }

        /// Body bytes the server has read over every request (its _stats.json).
        var bodyBytesRead: Int {
            let stats = (try? Data(contentsOf: directory.url("_stats.json")))
                .flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
            return stats?["body_bytes"] as? Int ?? -1
        }

        deinit { lab.close() }
    }

    static func sent(_ line: String) -> Int? {
        guard line.contains("\"progress\""), let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else { return nil }
        return object["sent"] as? Int
    }

    @Test(arguments: Outage.allCases, Server.allCases)
    func theFileArrivesOnce(outage: Outage, server: Server) async throws {
        if server == .tus && !Self.hasTus {
            print("skipped: aiohttp-tus is not installed (scripts/setup.sh)")
            return
        }
        let lab = try Lab(uplinks: outage == .pathSwitch ? 2 : 1)
        try lab.startServer(server)
        let (content, file, upload, cutAt) = try await Self.uploadUntilTheCut(lab, server, name: "four-\(outage.rawValue).bin",
                                                                                traced: true)
        defer { upload.kill() }
        let resetRule = ["OUTPUT", "-p", "tcp", "--dport", String(Self.port), "!", "--tcp-flags", "RST", "RST",
                         "-j", "REJECT", "--reject-with", "tcp-reset"]
        let dropRule = ["INPUT", "-s", "10.86.1.2", "-j", "DROP"]
        let restoredAt: ContinuousClock.Instant
        var restoredWall = Date()
        // The path's loss is seen by the kernel: the attempt ends at once with -1005.
        var cutToInterrupted: Duration?
        switch outage {
        case .linkDown:
            let cut = ContinuousClock.now
            try lab.linkDown(1)
            let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
            #expect(interrupted?.text.contains("-1005") == true, "\(upload.transcript)")
            cutToInterrupted = (interrupted?.arrival ?? .now) - cut
            try await holdOutage(for: .seconds(1))
            restoredAt = .now
            restoredWall = Date()
            try lab.linkUp(1)
        case .pathSwitch:
            // Taken before the command: its own run time counts against the upload.
            restoredAt = .now
            restoredWall = Date()
            try lab.linkDown(1)
            let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
            #expect(interrupted?.text.contains("-1005") == true, "the path moved: \(upload.transcript)")
            cutToInterrupted = (interrupted?.arrival ?? .now) - restoredAt
        case .blackhole:
            _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-A"] + dropRule)
            let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
            #expect(interrupted?.text.contains("-1001") == true, "\(upload.transcript)")
            restoredAt = .now
            restoredWall = Date()
            _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-D"] + dropRule)
        case .reset:
            _ = try sh(["ip", "netns", "exec", lab.client, "iptables", "-A"] + resetRule)
            let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
            // -1004 when the reset met libcurl's fresh connection: a reused connection found
            // dead before its answer (between tus pieces) is retried once on a new one, refused.
            #expect(["-1005", "-1004"].contains { interrupted?.text.contains($0) == true }, "\(upload.transcript)")
            restoredAt = .now
            restoredWall = Date()
            _ = try sh(["ip", "netns", "exec", lab.client, "iptables", "-D"] + resetRule)
        }
        let resumed = await upload.waitForLine(timeout: .seconds(30)) { $0.contains("\"resumed\"") }
        #expect(resumed != nil, "no resumed event: \(upload.transcript)")
        let status = await upload.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(upload.transcript)")
        let flowing = (resumed?.arrival ?? .now) - restoredAt
        #expect((try? Data(contentsOf: Self.storedFile(lab, server, upload, file))) == content, "the server's file differs: \(upload.transcript)")
        let readTwice = lab.bodyBytesRead - content.count
        let completed = upload.texts.last { $0.contains("\"completed\"") }
            .flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let handedTwice = completed?["bytes_resent"] as? Int ?? -1
        let interruptedText = cutToInterrupted.map { "interrupted \($0) after the cut; " } ?? ""
        if flowing > .milliseconds(100) { print("upload four outages: slow restore, trace:\n\(Self.trace(upload, restoredAt: restoredWall))") }
        print("upload four outages: \(outage) \(server) cut at \(cutAt >> 10) KiB: \(interruptedText)flowing \(flowing) after the restore; the server read \(readTwice) bytes twice, \(handedTwice) handed to the socket twice")
        #expect(readTwice >= 0 && readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
        // Socket buffers and a tus piece cut off: never the file again.
        // At 256 Mbit/s (RCH_UPLOAD_TEST_MIB=256) the kernel grows the send buffer towards its
        // tcp_wmem maximum (4 MiB): a blackhole strands up to that much in it (2.4-2.8 MiB seen,
        // with 0 bytes read twice by the server).
        let handedBound = Self.rateMbit > 64 ? 4 << 20 : 2 << 20
        #expect(handedTwice >= 0 && handedTwice <= handedBound, "\(handedTwice) bytes handed to the socket twice: \(upload.transcript)")
        #expect(upload.texts.contains { $0.contains("\"protocol\":\"\(server.rawValue)\"") }, "chose \(server): \(upload.transcript)")
        if let cutToInterrupted { #expect(cutToInterrupted < .seconds(1), "-1005 \(cutToInterrupted) after the cut") }
        #expect(flowing <= outage.flowingBound, "bytes flowed again \(flowing) after the restore: \(upload.transcript)")
    }

    /// Starts uploading a new random file to `server` and returns once a random 2 MiB to two
    /// thirds of it have been handed to the socket: the outage's moment.
    static func uploadUntilTheCut(_ lab: Lab, _ server: Server, name: String, idleTimeout: String? = "1",
                                  traced: Bool = false) async throws -> (Data, URL, LineProcess, cutAt: Int) {
        let cutAt = Int.random(in: (2 << 20)...(length * 2 / 3))
        let (file, content) = try lab.clientDirectory.randomFile(name, count: length, seed: UInt64(cutAt))
        // The blackhole is noticed by the idle timeout: 1 s keeps the test short.
        let upload = try LineProcess("reachability", ["upload", "--json"] + (idleTimeout.map { ["--idle-timeout", $0] } ?? [])
                                         + (traced ? ["--verbose"] : [])
                                         + [file.path, "http://\(serverAddress):\(port)/\(server.path)"],
                                     namespace: lab.client)
        let started = await upload.waitForLine(timeout: .seconds(30)) { (sent($0) ?? 0) >= cutAt }
        #expect(started != nil, "the upload did not start at \(cutAt >> 10) KiB: \(upload.transcript)")
        return (content, file, upload, cutAt)
    }

    /// A server reached by a route of its own, with no default route (issue 28, as issue 34 did
    /// for the download's own exchanges): the upload starts at once, and after an outage
    /// mid-upload (a server reset with the route up; the link, and with it the route, going for
    /// 1 s) it probes the server or waits for its route and resumes from the server's offset,
    /// instead of waiting for a default route that never comes (before: the command waited
    /// from the start; with the route followed only by each request, from the outage on).
    @Test(arguments: [Outage.reset, Outage.linkDown])
    func anUploadFollowsTheRouteToItsServer(outage: Outage) async throws {
        let lab = try Lab(uplinks: 1)
        try lab.routeOnlyToTheServer(over: 1)
        try lab.startServer(.ietf)
        let (content, file, upload, cutAt) = try await Self.uploadUntilTheCut(lab, .ietf, name: "route-\(outage.rawValue).bin")
        defer { upload.kill() }
        let resetRule = ["OUTPUT", "-p", "tcp", "--dport", String(Self.port), "!", "--tcp-flags", "RST", "RST",
                         "-j", "REJECT", "--reject-with", "tcp-reset"]
        let restoredAt: ContinuousClock.Instant
        switch outage {
        case .reset:
            _ = try sh(["ip", "netns", "exec", lab.client, "iptables", "-A"] + resetRule)
            let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
            #expect(interrupted != nil, "\(upload.transcript)")
            restoredAt = .now
            _ = try sh(["ip", "netns", "exec", lab.client, "iptables", "-D"] + resetRule)
        default:
            try lab.linkDown(1)
            let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
            #expect(interrupted?.text.contains("-1005") == true, "\(upload.transcript)")
            try await holdOutage(for: .seconds(1))
            restoredAt = .now
            try lab.routeOnlyToTheServer(over: 1)
        }
        let resumed = await upload.waitForLine(timeout: .seconds(20)) { $0.contains("\"resumed\"") }
        #expect(resumed != nil, "no resumed event: \(upload.transcript)")
        let status = await upload.waitForExit(timeout: .seconds(30))
        #expect(status == 0, "\(upload.transcript)")
        let flowing = (resumed?.arrival ?? .now) - restoredAt
        let readTwice = lab.bodyBytesRead - content.count
        print("upload by the server's route: \(outage) cut at \(cutAt >> 10) KiB: flowing \(flowing) after the restore; the server read \(readTwice) bytes twice")
        #expect((try? Data(contentsOf: Self.storedFile(lab, .ietf, upload, file))) == content, "the server's file differs: \(upload.transcript)")
        #expect(readTwice >= 0 && readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
        #expect(flowing <= outage.flowingBound, "bytes flowed again \(flowing) after the restore: \(upload.transcript)")
        if outage == .reset {
            // The route to the server never went: nothing waited for a path.
            #expect(!upload.texts.contains { $0.contains("\"waiting\"") }, "\(upload.transcript)")
        }
    }

    /// A blackhole mid-append (the server namespace drops everything from the client, whose path
    /// stays up) with the default 5 s idle timeout: the silent append is raced by a fresh
    /// connection asking the server's offset (as downloads race a silent transfer); it cannot
    /// connect, so the upload is interrupted after the silence's suspicion (2 s while its pace
    /// is being learned) and the racer's connect timeout (1 s), not at the idle timeout, then
    /// waits for the host's probes and resumes from the server's offset.
    @Test(arguments: Server.allCases)
    func aSilentAppendIsRacedByAFreshConnection(server: Server) async throws {
        if server == .tus && !Self.hasTus {
            print("skipped: aiohttp-tus is not installed (scripts/setup.sh)")
            return
        }
        let lab = try Lab(uplinks: 1)
        try lab.startServer(server)
        let (content, file, upload, cutAt) = try await Self.uploadUntilTheCut(lab, server, name: "silent.bin", idleTimeout: nil,
                                                                                traced: true)
        defer { upload.kill() }
        let dropRule = ["INPUT", "-s", "10.86.1.2", "-j", "DROP"]
        let cut = ContinuousClock.now
        _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-A"] + dropRule)
        let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
        let noticed = (interrupted?.arrival ?? .now) - cut
        let restoredAt = ContinuousClock.now
        let restoredWall = Date()
        _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-D"] + dropRule)
        let resumed = await upload.waitForLine(timeout: .seconds(30)) { $0.contains("\"resumed\"") }
        let status = await upload.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(upload.transcript)")
        let flowing = (resumed?.arrival ?? .now) - restoredAt
        let readTwice = lab.bodyBytesRead - content.count
        print("upload silent append: \(server) cut at \(cutAt >> 10) KiB: interrupted \(noticed) after the blackhole (\(interrupted?.text ?? "none")), flowing \(flowing) after the restore; the server read \(readTwice) bytes twice")
        if flowing > .milliseconds(300) { print("upload silent append: slow restore, trace:\n\(Self.trace(upload, restoredAt: restoredWall))") }
        #expect(interrupted?.text.contains("a new connection to it could not be made") == true, "\(upload.transcript)")
        #expect(noticed < .milliseconds(4200), "interrupted \(noticed) after the blackhole (the idle timeout is 5 s)")
        #expect((try? Data(contentsOf: Self.storedFile(lab, server, upload, file))) == content, "the server's file differs: \(upload.transcript)")
        #expect(readTwice >= 0 && readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
        // The rule goes the moment the upload is interrupted, which is when its wait for the
        // server begins: the host's quick first probe, 100 ms later, finds the server back, and
        // the upload flows within the goal's 0.3 s. When the test's own `iptables -D` ends after
        // that probe's SYN (a loaded machine: once at load 10.7), the SYN is lost and the next
        // probe is the schedule's second, 1.5 s + the wait's phase (at most 50 ms) after the
        // failure, which keeps the host at two attempts a second with the quick one paid back:
        // traced with the rule removed 150 ms after the interruption, the first probe timed out
        // and the second flowed 1.39 s after the restore (tus and draft alike). That case is
        // held to the schedule, not to the goal.
        let probes = upload.standardError.components(separatedBy: "turn=probe(").count - 1
        let bound: Duration = probes <= 1 ? .milliseconds(300) : .milliseconds(1750)
        #expect(flowing <= bound, "bytes flowed again \(flowing) after the restore, \(probes) probes: \(Self.trace(upload, restoredAt: restoredWall))")
    }

    /// The append's own connection goes silent (the server namespace drops only its packets)
    /// while new connections still reach the server (tus: aiohttp-tus answers an offset `HEAD`
    /// beside a running `PATCH`): the racer gets the server's offset and takes over from it,
    /// within the silence's suspicion and a round trip, not the 5 s idle timeout.
    @Test func aSilentAppendIsTakenOverFromTheServersOffset() async throws {
        guard Self.hasTus else {
            print("skipped: aiohttp-tus is not installed (scripts/setup.sh)")
            return
        }
        let lab = try Lab(uplinks: 1)
        try lab.startServer(.tus)
        let (content, file, upload, cutAt) = try await Self.uploadUntilTheCut(lab, .tus, name: "takeover.bin", idleTimeout: nil)
        defer { upload.kill() }
        // The append's connection: the client's one established connection to the server.
        let sockets = try sh(["ip", "netns", "exec", lab.client, "ss", "-Htn", "state", "established",
                              "dst", "\(Self.serverAddress):\(Self.port)"])
        let firstLine: Substring = sockets.split(separator: "\n").first ?? ""
        let columns: [Substring] = firstLine.split(separator: " ", omittingEmptySubsequences: true)
        let local: Substring = columns.count > 2 ? columns[2] : ""
        let port = String(local.split(separator: ":").last ?? "")
        try #require(!port.isEmpty, "no connection: \(sockets)")
        let dropRule = ["INPUT", "-s", "10.86.1.2", "-p", "tcp", "--sport", port, "-j", "DROP"]
        let cut = ContinuousClock.now
        _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-A"] + dropRule)
        defer { _ = try? sh(["ip", "netns", "exec", lab.server, "iptables", "-D"] + dropRule) }
        let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
        let noticed = (interrupted?.arrival ?? .now) - cut
        let status = await upload.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(upload.transcript)")
        let readTwice = lab.bodyBytesRead - content.count
        print("upload silent append taken over: tus cut at \(cutAt >> 10) KiB (port \(port)): interrupted \(noticed) after the drop (\(interrupted?.text ?? "none")); the server read \(readTwice) bytes twice")
        #expect(interrupted?.text.contains("continues from the server's offset") == true, "\(upload.transcript)")
        #expect(noticed < .milliseconds(4200), "interrupted \(noticed) after the drop (the idle timeout is 5 s)")
        #expect((try? Data(contentsOf: Self.storedFile(lab, .tus, upload, file))) == content, "the server's file differs: \(upload.transcript)")
        #expect(readTwice >= 0 && readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
    }

    /// The upload's trace (`--verbose`) from 1.5 s before `restored` on, each line led by its
    /// time after the restore: where a slow restore's time went.
    static func trace(_ upload: LineProcess, restoredAt restored: Date) -> String {
        traceLines(upload, relativeTo: restored).filter { $0.offset >= -1.5 }
            .map { String(format: "%+6.0f ms ", $0.offset * 1000) + $0.text }.joined(separator: "\n")
    }

    /// The upload's trace lines, each with its time in seconds after `instant` (by their
    /// millisecond timestamps).
    static func traceLines(_ upload: LineProcess, relativeTo instant: Date) -> [(offset: Double, text: Substring)] {
        let secondOfDay = instant.timeIntervalSince1970.truncatingRemainder(dividingBy: 86_400)
        return upload.standardError.split(separator: "\n").compactMap { line -> (offset: Double, text: Substring)? in
            // "2026-12-04T17:05:01.123Z debug reachability.upload: ..."
            let clock = line.dropFirst(11).prefix(12).split(separator: ":")
            guard line.count > 25, line.dropFirst(10).first == "T", clock.count == 3,
                  let hours = Double(clock[0]), let minutes = Double(clock[1]), let seconds = Double(clock[2]) else { return nil }
            var offset = hours * 3600 + minutes * 60 + seconds - secondOfDay
            if offset > 43_200 { offset -= 86_400 } else if offset < -43_200 { offset += 86_400 }
            return (offset, line.dropFirst(25))
        }
    }

    /// Where the server stored the upload of `file`.
    static func storedFile(_ lab: Lab, _ server: Server, _ upload: LineProcess, _ file: URL) throws -> URL {
        guard server == .ietf else {
            // aiohttp-tus names the finished file after the Upload-Metadata filename.
            return lab.directory.url(file.lastPathComponent)
        }
        let created = try #require(upload.texts.first { $0.contains("\"created\"") }, "\(upload.transcript)")
        let id = try #require(created.split(separator: "/").last?.split(separator: "\"").first.map(String.init))
        return lab.directory.url(id)
    }

    /// Connection attempts (SYNs, retransmissions included) the client namespace sent to the
    /// server, counted by an accounting rule `comment` at the head of its OUTPUT chain.
    static func synCount(_ lab: Lab, comment: String) -> Int? {
        let listing = try? sh(["ip", "netns", "exec", lab.client, "iptables", "-L", "OUTPUT", "-v", "-n", "-x"])
        guard let line = listing?.split(separator: "\n").first(where: { $0.contains(comment) }) else { return nil }
        return line.split(separator: " ").first.flatMap { Int($0) }
    }

    /// A server that resets or drops for `RCH_UPLOAD_TEST_OUTAGE` seconds (10 by default, plus
    /// up to 0.5 s) with the path up: the upload probes it at the downloads' pace
    /// (`ServerProbeScheduler`: at most two connection attempts a second, counted as SYNs leaving
    /// the client) and flows again within one probe spacing of the rule's removal (0.25 s on
    /// average; the test allows 0.75 s for a loaded machine). Before uploads shared the
    /// downloads' probes they backed off to 0.75-1 s against a reset, and after a blackhole asked
    /// the server's offset with an idle timeout doubling to 16 s over the kernel's SYN retries.
    @Test(arguments: [Outage.reset, Outage.blackhole])
    func aLongServerOutageIsProbedAtTwoAttemptsASecond(outage: Outage) async throws {
        let seconds = ProcessInfo.processInfo.environment["RCH_UPLOAD_TEST_OUTAGE"].flatMap { Double($0) }
            .map { min(max($0, 2), 120) } ?? 10
        let lab = try Lab(uplinks: 1)
        try lab.startServer(.ietf)
        let (content, file, upload, _) = try await Self.uploadUntilTheCut(lab, .ietf, name: "long-\(outage.rawValue).bin", traced: true)
        defer { upload.kill() }
        let comment = "up28e-syn-\(getpid())"
        _ = try sh(["ip", "netns", "exec", lab.client, "iptables", "-I", "OUTPUT", "1", "-p", "tcp", "--syn",
                    "--dport", String(Self.port), "-m", "comment", "--comment", comment])
        let rule: (namespace: String, rule: [String]) = outage == .reset
            ? (lab.client, ["OUTPUT", "-p", "tcp", "--dport", String(Self.port), "!", "--tcp-flags", "RST", "RST",
                            "-j", "REJECT", "--reject-with", "tcp-reset"])
            : (lab.server, ["INPUT", "-s", "10.86.1.2", "-j", "DROP"])
        let began = ContinuousClock.now
        let beganWall = Date()
        _ = try sh(["ip", "netns", "exec", rule.namespace, "iptables", "-A"] + rule.rule)
        // The outage itself: a span of time, sampled every 50 ms for the attempts' times. Its
        // length is random within one probe spacing, so the restore falls anywhere between two.
        let ends = began + .seconds(seconds + Double.random(in: 0..<0.5))
        var attempts = 0
        var attemptTimes: [ContinuousClock.Instant] = []
        // Nothing ends the outage early: the condition only samples.
        _ = await waitUntil(deadline: ends, every: .milliseconds(50)) {
            let count = Self.synCount(lab, comment: comment) ?? 0
            if count > attempts { attemptTimes.append(.now) }
            attempts = max(attempts, count)
            return false
        }
        attempts = Self.synCount(lab, comment: comment) ?? -1
        let restoredAt = ContinuousClock.now
        let restoredWall = Date()
        _ = try sh(["ip", "netns", "exec", rule.namespace, "iptables", "-D"] + rule.rule)
        let removed = ContinuousClock.now - restoredAt
        // Where the time after the restore goes: the wait for the next connection attempt (a SYN
        // seen, within a listing's time), then that attempt: the probe is the offset HEAD's own
        // connection, and the PATCH follows on it.
        var nextSYN: Duration?
        _ = await waitUntil(deadline: restoredAt + .seconds(1), every: .milliseconds(2)) {
            guard let count = Self.synCount(lab, comment: comment), count > attempts else { return false }
            nextSYN = ContinuousClock.now - restoredAt
            return true
        }
        let outageLength = restoredAt - began
        let status = await upload.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(upload.transcript)")
        let lastResumed = upload.lines.last { $0.text.contains("\"resumed\"") }
        let flowing = (lastResumed?.arrival ?? .now) - restoredAt
        let rate = Double(attempts) / outageLength.timeInterval
        // Once settled (2 s in: the quick first probe is paid back by a longer gap after it),
        // attempts come every 500 ms: a restore waits at most that long for the next.
        let settled = attemptTimes.filter { $0 - began >= .seconds(2) }
        let widestGap = zip(settled, settled.dropFirst()).map { $1 - $0 }.max() ?? .zero
        // The mean spacing has the sampling's error only at its two ends.
        let meanGap = settled.count >= 2 ? (settled.last! - settled.first!) / (settled.count - 1) : .zero
        print("upload long outage: \(outage) \(outageLength): \(attempts) connection attempts (\(String(format: "%.2f", rate))/s, settled gaps at most \(widestGap), \(meanGap) on average), flowing \(flowing) after the restore (rule gone at \(removed), next SYN seen by \(nextSYN.map { "\($0)" } ?? "none"), SYNs by the flow \((Self.synCount(lab, comment: comment) ?? -1) - attempts))")
        // The probes' own spacing, from the upload's trace (millisecond timestamps of each grant),
        // free of the SYN counter's sampling (a listing every 50 ms, slower on a loaded machine).
        let restoredOffset = restoredWall.timeIntervalSince(beganWall)
        let probes = Self.traceLines(upload, relativeTo: beganWall)
            .filter { $0.text.contains("turn=probe(") && $0.offset >= 2 && $0.offset <= restoredOffset }.map(\.offset)
        let probeGaps = zip(probes, probes.dropFirst()).map { $1 - $0 }
        print("upload long outage: \(outage): settled probes by the trace: \(probes.count), gaps \(String(format: "%.3f-%.3f", probeGaps.min() ?? 0, probeGaps.max() ?? 0)) s")
        print("upload long outage: \(outage): trace around the restore:\n\(Self.trace(upload, restoredAt: restoredWall))")
        #expect((try? Data(contentsOf: Self.storedFile(lab, .ietf, upload, file))) == content, "the server's file differs: \(upload.transcript)")
        #expect(attempts >= 0 && rate <= 2.1, "\(attempts) connection attempts in \(outageLength)")
        #expect(probes.count >= 2 && (probeGaps.max() ?? 1) <= 0.6, "probes \(probeGaps) s apart during the outage (sampled SYNs: at most \(widestGap))")
        #expect(flowing <= .milliseconds(750), "bytes flowed again \(flowing) after the restore: \(upload.transcript)")
    }
}
