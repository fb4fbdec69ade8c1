import Foundation
import Testing
import TestSupport

/// Data tasks against real outages: `urlsession-probe --data` in a client namespace, nginx at
/// 1 MiB/s in the server namespace, the link cut and restored with `ip`.
@Suite("ResumableURLSession data tasks in network namespaces", .serialized, .needsRoot,
       .needsNginx)
struct URLSessionDataTaskOutageTests: DownloadScenarios {
    typealias Outages = URLSessionOutageTests

    static func probe(_ net: OutageLab, _ extra: [String] = []) throws -> ProbeProcess {
        try ProbeProcess(["--state-dir", net.directory.file("session").path, "--url", "\(net.url)/file.bin", "--data"] + extra,
                         namespace: net.client)
    }

    @Test("a drop mid-request fails at once with -1005, not -1001 after the request timeout")
    func aDropMidRequestFailsAtOnce() async throws {
        let (net, _) = try Outages.lab(seed: 81)
        defer { net.close() }
        let probe = try Self.probe(net)
        #expect(await probe.waitForLine { $0["call"]?.string == "received" && ($0["total"]?.int ?? 0) >= 1 << 20 } != nil,
                "\(probe.transcript)")
        // Timed from before the command: the probe can hear of the cut before `ip` has exited.
        let cut = ContinuousClock.now
        try Outages.cutLink(net)
        let completed = try #require(await probe.waitForCall("completed", task: 1, timeout: .seconds(10)), "\(probe.transcript)")
        let elapsed = completed.arrival - cut
        #expect(completed.object["code"]?.int == -1005, "\(probe.transcript)")
        #expect(elapsed < .milliseconds(100), "-1005 after \(elapsed)")
        print("urlsession-data-outage: link cut to -1005 in \(elapsed)")
    }

    @Test("a request started offline waits for the path and completes once it is back")
    func startedOfflineCompletesOnceThePathIsBack() async throws {
        let (net, content) = try Outages.lab(seed: 82)
        defer { net.close() }
        try Outages.cutLink(net)
        let probe = try Self.probe(net, ["--waits-for-connectivity"])
        #expect(await probe.waitForCall("waiting", task: 1, timeout: .seconds(10)) != nil, "\(probe.transcript)")
        #expect(probe.calls("completed").isEmpty && probe.calls("response").isEmpty, "\(probe.transcript)")
        try Outages.restoreLink(net)
        let completed = try #require(await probe.waitForCall("completed", task: 1, timeout: .seconds(30)), "\(probe.transcript)")
        #expect(completed.object["code"] == nil, "\(probe.transcript)")
        #expect(completed.object["sha256"]?.string == F.sha256(content))
        #expect(probe.calls("response").first?.object["status"]?.int == 200)
    }
}
