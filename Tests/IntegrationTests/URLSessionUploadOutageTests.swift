import Foundation
import Glibc
import Testing
import TestSupport

/// Resumable upload tasks against a real link cut: `urlsession-probe --upload` in a client
/// namespace, uploading 16 MiB through a veth shaped to 64 Mbit/s (`UploadFourOutagesTests.Lab`
/// with one uplink) to upload_server.py (IETF draft-05) in a server namespace; the link goes
/// down once 4 MiB went out.
@Suite("ResumableURLSession upload tasks through a link outage", .serialized,
       .enabled(if: getuid() == 0, "network namespaces need root"),
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct URLSessionUploadOutageTests: DownloadScenarios {
    typealias Lab = UploadFourOutagesTests.Lab
    static let length = 16 << 20
    static let url = "http://\(UploadFourOutagesTests.serverAddress):\(UploadFourOutagesTests.port)/ietf/"

    /// The probe uploading a fresh 16 MiB file, and the file.
    static func upload(_ lab: Lab, seed: UInt64, _ extra: [String] = []) throws -> (ProbeProcess, Data) {
        let (file, content) = try lab.clientDirectory.randomFile("storm-\(seed).jpg", count: length, seed: seed)
        let probe = try ProbeProcess(["--state-dir", lab.clientDirectory.url("session").path,
                                      "--url", url, "--upload", file.path] + extra,
                                     namespace: lab.client)
        return (probe, content)
    }

    static func waitUntilSent(_ probe: ProbeProcess, _ bytes: Int) async -> Bool {
        await probe.waitForLine { $0["call"]?.string == "sent" && ($0["total"]?.int ?? 0) >= bytes } != nil
    }

    /// The server's stored file that equals `content`, if any.
    static func stored(_ lab: Lab, _ content: Data) -> Bool {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: lab.directory.url.path)) ?? []
        return names.contains { (try? Data(contentsOf: lab.directory.url($0))) == content }
    }

    @Test("a link cut ends the upload task at once with -1005 and resume data")
    func aLinkCutEndsTheTaskWithResumeData() async throws {
        let lab = try Lab(uplinks: 1)
        try lab.startServer(.ietf)
        let (probe, _) = try Self.upload(lab, seed: 2821)
        #expect(await Self.waitUntilSent(probe, 4 << 20), "\(probe.transcript)")
        let cut = ContinuousClock.now
        try lab.linkDown(1)
        let completed = try #require(await probe.waitForCall("completed", task: 1, timeout: .seconds(10)), "\(probe.transcript)")
        let elapsed = completed.arrival - cut
        #expect(completed.object["code"]?.int == -1005, "\(probe.transcript)")
        #expect((completed.object["uploadResumeData"]?.int ?? 0) > 0, "\(probe.transcript.suffix(3000))")
        #expect(elapsed < .milliseconds(500), "-1005 after \(elapsed)")
        print("urlsession-upload-outage: link cut to -1005 with resume data in \(elapsed)")
    }

    @Test("with waitsForConnectivity the upload task stops with the link and finishes once it is back")
    func withWaitsForConnectivityTheTaskFinishesAfterTheOutage() async throws {
        let lab = try Lab(uplinks: 1)
        try lab.startServer(.ietf)
        let (probe, content) = try Self.upload(lab, seed: 2822, ["--waits-for-connectivity"])
        #expect(await Self.waitUntilSent(probe, 4 << 20), "\(probe.transcript)")
        try lab.linkDown(1)
        try await holdOutage(for: .seconds(1))
        #expect(probe.calls("completed").isEmpty, "the task waits for the link: \(probe.transcript)")
        try lab.linkUp(1)
        let completed = try #require(await probe.waitForCall("completed", task: 1, timeout: .seconds(60)), "\(probe.transcript)")
        #expect(completed.object["code"] == nil, "\(probe.transcript)")
        #expect(Self.stored(lab, content), "the server's file is the file")
        let stats = try JSONSerialization.jsonObject(with: Data(contentsOf: lab.directory.url("_stats.json"))) as? [String: Any]
        let readTwice = (stats?["body_bytes"] as? Int ?? 0) - content.count
        print("urlsession-upload-outage: the draft server read \(readTwice) bytes twice")
        #expect(readTwice <= 1 << 20, "the server read \(readTwice) bytes twice")
        let sent = probe.calls("sent").last?.object["total"]?.int ?? 0
        #expect(sent - content.count <= 4 << 20, "handed to the socket twice: \(sent - content.count)")
    }
}
