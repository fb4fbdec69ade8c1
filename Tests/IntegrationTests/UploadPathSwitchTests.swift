import Foundation
import Glibc
import Testing
import TestSupport

/// An upload moving to another path: a client namespace with two uplinks (veth pairs shaped with
/// `tc tbf` at 32 Mbit/s, so the 16 MiB upload lasts about four seconds and a test starved by a
/// loaded machine still switches in the middle; default routes with metrics 100 and 200) to a
/// server namespace whose address sits on its loopback, reachable over either. The primary goes
/// down mid-upload: the upload stops at once (the path moved), asks the server its offset over
/// the second uplink and sends the rest; the server's file is byte-identical.
@Suite("Uploads across a path switch", .serialized,
       .enabled(if: getuid() == 0, "network namespaces need root"),
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct UploadPathSwitchTests {
    static let serverAddress = "10.89.9.1"

    final class Lab: Sendable {
        let lab = NetworkLab()
        let client: String
        let server: String
        let directory: ScratchDirectory
        let clientDirectory: ScratchDirectory

        init() throws {
            client = try lab.namespace("sc")
            server = try lab.namespace("ss")
            directory = try ScratchDirectory("upload-switch")
            clientDirectory = try ScratchDirectory("upload-switch-client")
            try ip("-n \(server) addr add \(UploadPathSwitchTests.serverAddress)/32 dev lo")
            for (index, metric) in [(1, 100), (2, 200)] {
                try ip("link add eth\(index) netns \(client) type veth peer name peth\(index) netns \(server)")
                try ip("-n \(server) addr add 10.89.\(index).1/24 dev peth\(index)")
                try ip("-n \(server) link set peth\(index) up")
                try ip("-n \(client) addr add 10.89.\(index).2/24 dev eth\(index)")
                try ip("-n \(client) link set eth\(index) up")
                try ip("-n \(client) route add default via 10.89.\(index).1 dev eth\(index) metric \(metric)")
                _ = try sh(["ip", "netns", "exec", client, "tc", "qdisc", "add", "dev", "eth\(index)", "root", "tbf",
                            "rate", "32mbit", "burst", "64kb", "latency", "50ms"])
            }
            let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Servers/upload_server.py").path
            _ = try lab.spawn(["ip", "netns", "exec", server, "python3", path, "--directory", directory.url.path,
                               "--address", UploadPathSwitchTests.serverAddress, "--port", "8080"])
            let server = server
            let accepts = DownloadFixtures.waitSync(timeout: .seconds(15)) {
                (try? sh(["ip", "netns", "exec", server, "bash", "-c",
                          "exec 3<>/dev/tcp/\(UploadPathSwitchTests.serverAddress)/8080"])) != nil
            }
            guard accepts else { throw CommandFailure(description: "upload_server.py did not start in \(server)") }
        }

        deinit { lab.close() }
    }

    @Test func thePrimaryGoingDownMovesTheUploadToTheOtherUplink() async throws {
        let lab = try Lab()
        let content = DownloadFixtures.randomData(count: 16 << 20, seed: 2840)
        let file = lab.clientDirectory.url("switch-storm.jpg")
        try content.write(to: file)
        let upload = try LineProcess("reachability", ["upload", "--json", file.path, "http://\(Self.serverAddress):8080/ietf/"],
                                     namespace: lab.client)
        defer { upload.kill() }
        let started = await upload.waitForLine(timeout: .seconds(30)) {
            guard $0.contains("\"progress\""), let object = try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            else { return false }
            return (object["sent"] as? Int ?? 0) >= 4 << 20
        }
        #expect(started != nil, "the upload did not start: \(upload.transcript)")
        // Taken before the command: its own run time counts against the upload.
        let switchedAt = ContinuousClock.now
        try ip("-n \(lab.client) link set eth1 down")
        let interrupted = await upload.waitForLine(timeout: .seconds(10)) { $0.contains("\"interrupted\"") }
        #expect(interrupted != nil, "the upload did not notice the switch: \(upload.transcript)")
        let resumed = await upload.waitForLine(timeout: .seconds(20)) { $0.contains("\"resumed\"") }
        #expect(resumed != nil, "no resumed event: \(upload.transcript)")
        let status = await upload.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(upload.transcript)")
        let toInterrupted = (interrupted?.arrival ?? .now) - switchedAt
        let toResumed = (resumed?.arrival ?? .now) - switchedAt
        let created = try #require(upload.texts.first { $0.contains("\"created\"") })
        let id = try #require(created.split(separator: "/").last?.split(separator: "\"").first.map(String.init))
        #expect(try Data(contentsOf: lab.directory.url(id)) == content, "the server's file differs")
        let stats = try JSONSerialization.jsonObject(with: Data(contentsOf: lab.directory.url("_stats.json"))) as? [String: Any]
        let readTwice = (stats?["body_bytes"] as? Int ?? 0) - content.count
        print("upload across a path switch: interrupted \(toInterrupted) after the primary went down, resumed \(toResumed) after it; the server read \(readTwice) bytes twice")
        #expect(toInterrupted < .seconds(1), "\(upload.transcript)")
        #expect(readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
    }
}
