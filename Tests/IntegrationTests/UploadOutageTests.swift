import Foundation
import Glibc
import Testing
import TestSupport

/// `reachability upload` inside a client namespace, uploading through a veth shaped with
/// `tc tbf` (64 Mbit/s, so a 16 MiB upload lasts about two seconds) to a server namespace that
/// runs the IETF draft server (upload_server.py) or a real tus server (aiohttp-tus). The link
/// goes down in the middle: the upload stops at once (-1005), resumes from the server's offset
/// when the link is back, and the server's file is byte-identical.
@Suite("Uploads through a link outage", .serialized,
       .enabled(if: getuid() == 0, "network namespaces need root"),
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct UploadOutageTests: DownloadScenarios {
    static let serverAddress = "10.89.0.1"
    static let length = 16 << 20

    /// Two namespaces joined by a veth pair; the client's side shaped.
    final class Lab: Sendable {
        let lab = NetworkLab()
        let client: String
        let server: String
        /// The server's files.
        let directory: ScratchDirectory
        /// The client's file (apart: the tus server names its file after the client's).
        let clientDirectory: ScratchDirectory

        init() throws {
            client = try lab.namespace("uc")
            server = try lab.namespace("us")
            directory = try ScratchDirectory("upload-outage")
            clientDirectory = try ScratchDirectory("upload-outage-client")
            try ip("link add eth1 netns \(client) type veth peer name peth1 netns \(server)")
            try ip("-n \(server) addr add \(UploadOutageTests.serverAddress)/24 dev peth1")
            try ip("-n \(server) link set peth1 up")
            try ip("-n \(client) addr add 10.89.0.2/24 dev eth1")
            try ip("-n \(client) link set eth1 up")
            try ip("-n \(client) route add default via \(UploadOutageTests.serverAddress) dev eth1")
            _ = try sh(["ip", "netns", "exec", client, "tc", "qdisc", "add", "dev", "eth1", "root", "tbf",
                        "rate", "64mbit", "burst", "64kb", "latency", "50ms"])
        }

        /// Starts `script` in the server namespace on port 8080 and waits until it accepts.
        func startServer(_ script: String) throws {
            let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Servers/\(script)").path
            _ = try lab.spawn(["ip", "netns", "exec", server, "python3", path, "--directory", directory.url.path,
                               "--address", UploadOutageTests.serverAddress, "--port", "8080"])
            let server = server
            let accepts = F.waitSync(timeout: .seconds(15)) {
                (try? sh(["ip", "netns", "exec", server, "bash", "-c",
                          "exec 3<>/dev/tcp/\(UploadOutageTests.serverAddress)/8080"])) != nil
            }
            guard accepts else { throw LabCommandFailure(description: "\(script) did not start in \(server)") }
        }

        func linkDown() throws { try ip("-n \(client) link set eth1 down") }

        func linkUp() throws {
            try ip("-n \(client) link set eth1 up")
            // The default route went with the link.
            try ip("-n \(client) route replace default via \(UploadOutageTests.serverAddress) dev eth1")
        }

        deinit { lab.close() }
    }

    struct Measured {
        var cutToInterrupted: Duration
        var upToResumed: Duration
        var bytesResent: Int
    }

    /// Uploads a 16 MiB file to `path`, takes the link down once 4 MiB are stored and brings it
    /// back 1 s later; returns the file and what was measured.
    static func uploadThroughLinkDown(_ lab: Lab, path: String) async throws -> (Data, Measured, LineProcess) {
        let content = F.randomData(count: length, seed: 28)
        let file = lab.clientDirectory.url("client-storm.jpg")
        try content.write(to: file)
        let upload = try LineProcess("reachability", ["upload", "--json", file.path, "http://\(serverAddress):8080/\(path)"],
                                     namespace: lab.client)
        defer { upload.kill() }
        // A quarter of the file handed to the socket (the tus server may size its file at once).
        let started = await upload.waitForLine(timeout: .seconds(30)) {
            guard $0.contains("\"progress\""), let object = try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            else { return false }
            return (object["sent"] as? Int ?? 0) >= 4 << 20
        }
        #expect(started != nil, "the upload did not start: \(upload.transcript)")
        try lab.linkDown()
        let cutAt = ContinuousClock.now
        let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
        let cutToInterrupted = (interrupted?.arrival ?? .now) - cutAt
        try await holdOutage(for: .seconds(1))
        let upAt = ContinuousClock.now
        try lab.linkUp()
        let resumed = await upload.waitForLine(timeout: .seconds(20)) { $0.contains("\"resumed\"") }
        #expect(resumed != nil, "no resumed event: \(upload.transcript)")
        let upToResumed = (resumed?.arrival ?? .now) - upAt
        let status = await upload.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(upload.transcript)")
        let completed = upload.texts.last { $0.contains("\"completed\"") }.flatMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let measured = Measured(cutToInterrupted: cutToInterrupted, upToResumed: upToResumed,
                                bytesResent: completed?["bytes_resent"] as? Int ?? -1)
        print("upload through link down (\(path)): interrupted \(cutToInterrupted) after the cut, resumed \(upToResumed) after link up, \(measured.bytesResent) bytes handed to the socket twice")
        return (content, measured, upload)
    }

    @Test func theDraftServerGetsTheFileOnce() async throws {
        let lab = try Lab()
        try lab.startServer("upload_server.py")
        let (content, measured, upload) = try await Self.uploadThroughLinkDown(lab, path: "ietf/")
        #expect(measured.cutToInterrupted < .seconds(1), "\(upload.transcript)")
        #expect(measured.upToResumed < .seconds(3), "\(upload.transcript)")
        let created = try #require(upload.texts.first { $0.contains("\"created\"") })
        let id = try #require(created.split(separator: "/").last?.split(separator: "\"").first.map(String.init))
        #expect(try Data(contentsOf: lab.directory.url(id)) == content, "the server's file differs")
        let stats = try JSONSerialization.jsonObject(with: Data(contentsOf: lab.directory.url("_stats.json"))) as? [String: Any]
        let readTwice = (stats?["body_bytes"] as? Int ?? 0) - content.count
        print("draft server read \(readTwice) bytes twice")
        #expect(readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
    }

    @Test func anUpstreamBlackholeIsWaitedOutAndResumed() async throws {
        let lab = try Lab()
        try lab.startServer("upload_server.py")
        let content = F.randomData(count: Self.length, seed: 29)
        let file = lab.clientDirectory.url("blackhole.bin")
        try content.write(to: file)
        let upload = try LineProcess("reachability", ["upload", "--json", "--idle-timeout", "1", file.path,
                                                      "http://\(Self.serverAddress):8080/ietf/"], namespace: lab.client)
        defer { upload.kill() }
        _ = await upload.waitForLine(timeout: .seconds(30)) {
            guard $0.contains("\"progress\""), let object = try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            else { return false }
            return (object["sent"] as? Int ?? 0) >= 4 << 20
        }
        // The server side drops everything from the client: the path stays up, nothing answers.
        let rule = ["INPUT", "-s", "10.89.0.2", "-j", "DROP"]
        _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-A"] + rule)
        let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
        #expect(interrupted?.text.contains("-1001") == true, "\(upload.transcript)")
        _ = try sh(["ip", "netns", "exec", lab.server, "iptables", "-D"] + rule)
        let restoredAt = ContinuousClock.now
        let resumed = await upload.waitForLine(timeout: .seconds(30)) { $0.contains("\"resumed\"") }
        #expect(resumed != nil, "\(upload.transcript)")
        print("upload through a blackhole: resumed \((resumed?.arrival ?? .now) - restoredAt) after the DROP was removed")
        #expect(await upload.waitForExit(timeout: .seconds(60)) == 0, "\(upload.transcript)")
        let created = try #require(upload.texts.first { $0.contains("\"created\"") })
        let id = try #require(created.split(separator: "/").last?.split(separator: "\"").first.map(String.init))
        #expect(try Data(contentsOf: lab.directory.url(id)) == content, "the server's file differs")
    }

    @Test(.enabled(if: (try? sh(["python3", "-c", "import aiohttp_tus"])) != nil, "aiohttp-tus is not installed (scripts/setup.sh)"))
    func aTusServerGetsTheFileOnce() async throws {
        let lab = try Lab()
        try lab.startServer("tus_server.py")
        let (content, measured, upload) = try await Self.uploadThroughLinkDown(lab, path: "uploads")
        #expect(measured.cutToInterrupted < .seconds(1), "\(upload.transcript)")
        #expect(measured.upToResumed < .seconds(3), "\(upload.transcript)")
        #expect(upload.texts.contains { $0.contains("\"protocol\":\"tus\"") }, "\(upload.transcript)")
        // Appends go in 1 MiB pieces: an outage costs at most the piece it broke.
        #expect(measured.bytesResent <= 1 << 20 + 1 << 20, "\(upload.transcript)")
        // aiohttp-tus names the finished file after the Upload-Metadata filename.
        #expect(try Data(contentsOf: lab.directory.url("client-storm.jpg")) == content, "the server's file differs")
    }
}
