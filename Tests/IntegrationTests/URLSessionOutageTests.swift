import Foundation
import Synchronization
import Testing
import TestSupport

/// The seed's URLSession recipe against real outages: namespaces, veth links, nginx.
@Suite("ResumableURLSession outages in network namespaces", .serialized, .needsRoot,
       .needsNginx)
struct URLSessionOutageTests: DownloadScenarios {
    static let size = 5 << 20

    /// A lab serving fresh random content at /file.bin (1 MiB/s), and the probe's arguments.
    static func lab(seed: UInt64) throws -> (OutageLab, Data) {
        let net = try OutageLab()
        let content = try net.serveRandom(count: size, seed: seed)
        return (net, content)
    }

    static func probe(_ net: OutageLab, _ extra: [String] = [], url: Bool = true) throws -> ProbeProcess {
        try ProbeProcess(["--state-dir", net.directory.file("session").path] + (url ? ["--url", "\(net.url)/file.bin"] : []) + extra,
                         namespace: net.client)
    }

    /// The seed's recipe, first half: a process downloading when the link is cut saves its resume
    /// data to disk and exits. Returns the file and the process.
    static func resumeDataSavedOffline(_ net: OutageLab, sourceLocation: SourceLocation = #_sourceLocation) async throws -> (URL, ProbeProcess) {
        let saved = net.directory.file("resume.data")
        let first = try probe(net, ["--save-resume-data", saved.path, "--exit-when-done"])
        #expect(await first.waitForBytes(1 << 20), "\(first.transcript)", sourceLocation: sourceLocation)
        try cutLink(net)
        #expect(await first.waitForExit() == 0, "\(first.transcript)", sourceLocation: sourceLocation)
        return (saved, first)
    }

    /// `lab(seed:)` with a probe downloading its file (with `extra` arguments) past its first MiB.
    static func probing(seed: UInt64, _ extra: [String] = [], sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> (OutageLab, Data, ProbeProcess) {
        let (net, content) = try lab(seed: seed)
        do {
            let probe = try Self.probe(net, extra)
            #expect(await probe.waitForBytes(1 << 20), "\(probe.transcript)", sourceLocation: sourceLocation)
            return (net, content, probe)
        } catch { net.close(); throw error }
    }

    static func cutLink(_ net: OutageLab) throws { try ip("-n \(net.client) link set eth1 down") }

    static func restoreLink(_ net: OutageLab) throws {
        try ip("-n \(net.client) link set eth1 up")
        try net.addDefaultRoute("eth1")
    }

    /// The completion of `task`, its code (nil = success) and its finished file's SHA-256.
    static func outcome(_ probe: ProbeProcess, task: Int) -> (code: Int?, sha256: String?) {
        let completed = probe.calls("completed").first { $0.object["task"]?.int == task }
        let finished = probe.calls("finished").first { $0.object["task"]?.int == task }
        return (completed?.object["code"]?.int, finished?.object["sha256"]?.string)
    }

    static func expectMonotonic(_ totals: [Int], sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(!totals.isEmpty && zip(totals, totals.dropFirst()).allSatisfy { $0 < $1 }, "didWriteData totals: \(totals)",
                sourceLocation: sourceLocation)
    }

    @Test("link cut mid-download: -1005 with resume data within a second; the data finishes the file in the same process")
    func linkCutThenResumeInProcess() async throws {
        let (net, content, probe) = try await Self.probing(seed: 61)
        defer { net.close() }
        // Timed from before the command: the probe can hear of the cut before `ip` has exited.
        let cut = ContinuousClock.now
        try Self.cutLink(net)
        let completed = try #require(await probe.waitForCall("completed", task: 1, timeout: .seconds(10)), "\(probe.transcript)")
        let elapsed = completed.arrival - cut
        #expect(completed.object["code"]?.int == -1005, "\(probe.transcript)")
        #expect((completed.object["resumeData"]?.int ?? 0) > 0, "resume data in userInfo")
        #expect(elapsed < .seconds(1), "-1005 after \(elapsed)")
        print("urlsession-outage: link cut to -1005 in \(elapsed)")

        try Self.restoreLink(net)
        probe.send("resume")
        #expect(await probe.waitForCall("completed", task: 2, timeout: .seconds(30)) != nil, "\(probe.transcript)")
        let (code, sha) = Self.outcome(probe, task: 2)
        #expect(code == nil, "\(probe.transcript)")
        #expect(sha == F.sha256(content))
        let offset = try #require(probe.calls("resumed").first { $0.object["task"]?.int == 2 }?.object["offset"]?.int)
        #expect(offset >= 1 << 20 && offset < Self.size, "didResumeAtOffset \(offset)")
        Self.expectMonotonic(Self.totals(probe, 1))
        Self.expectMonotonic(Self.totals(probe, 2))
        #expect(Self.totals(probe, 2).first.map { $0 > offset } == true)
    }

    @Test("resume data written to disk when offline finishes the file in a new process, from a non-zero offset")
    func resumeInANewProcess() async throws {
        let (net, content) = try Self.lab(seed: 62)
        defer { net.close() }
        let (saved, first) = try await Self.resumeDataSavedOffline(net)
        #expect(Self.outcome(first, task: 1).code == -1005, "\(first.transcript)")
        #expect(FileManager.default.fileExists(atPath: saved.path))

        try Self.restoreLink(net)
        let second = try Self.probe(net, ["--resume-data", saved.path, "--exit-when-done"], url: false)
        #expect(await second.waitForExit(timeout: .seconds(30)) == 0, "\(second.transcript)")
        let (code, sha) = Self.outcome(second, task: 1)
        #expect(code == nil, "\(second.transcript)")
        #expect(sha == F.sha256(content))
        let offset = try #require(second.calls("resumed").first?.object["offset"]?.int, "\(second.transcript)")
        #expect(offset >= 1 << 20, "didResumeAtOffset \(offset)")
        Self.expectMonotonic(Self.totals(second, 1))
        // The server sent the rest, not the whole file again (each of the connections that ran
        // re-fetches its overlap and what was in flight at the cut).
        let sent = await net.bytesSentWhenIdle()
        #expect(sent < content.count + content.count / 2, "server sent \(sent) bytes for \(content.count): \(net.requests)")
    }

    @Test("cancel(byProducingResumeData:) then resume")
    func cancelByProducingResumeDataThenResume() async throws {
        let (net, content, probe) = try await Self.probing(seed: 63)
        defer { net.close() }
        probe.send("cancel-with-data")
        let answer = try #require(await probe.waitForCall("resumeData"), "\(probe.transcript)")
        #expect((answer.object["bytes"]?.int ?? 0) > 0)
        #expect(await probe.waitForCall("completed", task: 1) != nil)
        #expect(Self.outcome(probe, task: 1).code == -999)
        probe.send("resume")
        #expect(await probe.waitForCall("completed", task: 2) != nil, "\(probe.transcript)")
        #expect(Self.outcome(probe, task: 2).code == nil, "\(probe.transcript)")
        #expect(Self.outcome(probe, task: 2).sha256 == F.sha256(content))
        #expect((probe.calls("resumed").first?.object["offset"]?.int ?? 0) >= 1 << 20)
    }

    @Test("a forged resume data file is rejected in a new process, and the genuine one still works")
    func forgedResumeDataRejected() async throws {
        let (net, content) = try Self.lab(seed: 64)
        defer { net.close() }
        let (saved, _) = try await Self.resumeDataSavedOffline(net)
        try Self.restoreLink(net)

        // The attacker moves the offset forward, hoping to splice.
        var forged = try Data(contentsOf: saved)
        let text = String(decoding: forged, as: UTF8.self)
        let range = try #require(text.range(of: "\"offset\":"))
        let index = forged.startIndex + text.utf8.distance(from: text.utf8.startIndex, to: range.upperBound.samePosition(in: text.utf8)!)
        forged[index] = forged[index] == UInt8(ascii: "9") ? UInt8(ascii: "1") : forged[index] + 1
        let forgedFile = net.directory.file("forged.data")
        try forged.write(to: forgedFile)
        let attacked = try Self.probe(net, ["--resume-data", forgedFile.path, "--exit-when-done"], url: false)
        #expect(await attacked.waitForExit() == 0, "\(attacked.transcript)")
        let completion = try #require(attacked.calls("completed").first)
        #expect(completion.object["code"]?.int == -3003, "\(attacked.transcript)")
        #expect(completion.object["underlying"]?.string?.contains("altered") == true, "\(attacked.transcript)")
        #expect(attacked.calls("wrote").isEmpty && attacked.calls("finished").isEmpty)

        let genuine = try Self.probe(net, ["--resume-data", saved.path, "--exit-when-done"], url: false)
        #expect(await genuine.waitForExit(timeout: .seconds(30)) == 0, "\(genuine.transcript)")
        #expect(Self.outcome(genuine, task: 1).sha256 == F.sha256(content), "\(genuine.transcript)")
    }

    @Test("waitsForConnectivity waits out an outage and finishes without an error")
    func waitsForConnectivityWaitsOutAnOutage() async throws {
        let (net, content, probe) = try await Self.probing(seed: 65, ["--waits-for-connectivity"])
        defer { net.close() }
        try ip("-n \(net.client) route del default")
        #expect(await probe.waitForCall("waiting", task: 1, timeout: .seconds(5)) != nil, "\(probe.transcript)")
        // The outage itself: two seconds without a path, during which the task must not end.
        _ = await F.wait(timeout: .seconds(2)) { !probe.calls("completed").isEmpty }
        #expect(probe.calls("completed").isEmpty, "the task ended during the outage: \(probe.transcript)")
        try net.addDefaultRoute("eth1")
        #expect(await probe.waitForCall("completed", task: 1, timeout: .seconds(30)) != nil, "\(probe.transcript)")
        let (code, sha) = Self.outcome(probe, task: 1)
        #expect(code == nil, "\(probe.transcript)")
        #expect(sha == F.sha256(content))
        Self.expectMonotonic(Self.totals(probe, 1))
        #expect(probe.calls("waiting").count == 1)
    }

    @Test("allowsExpensiveNetworkAccess off: a cellular-only path is -1009 (expensive); with a cheap uplink too, the download uses it")
    func expensivePathsAvoided() async throws {
        let (net, content) = try Self.lab(seed: 66)
        defer { net.close() }
        let options = ["--no-expensive", "--classify", "eth1=cellular", "--exit-when-done"]
        let refused = try Self.probe(net, options)
        #expect(await refused.waitForExit(timeout: .seconds(10)) == 0, "\(refused.transcript)")
        let completion = try #require(refused.calls("completed").first)
        #expect(completion.object["code"]?.int == -1009, "\(refused.transcript)")
        #expect(completion.object["reason"]?.string == "expensive", "\(refused.transcript)")
        #expect(refused.calls("wrote").isEmpty)

        // eth1 stays the primary (metric 0) but is expensive: the engine binds to eth2.
        try net.uplink("eth2", address: "10.88.0.3", metric: 10)
        let cheap = try Self.probe(net, options)
        #expect(await cheap.waitForExit(timeout: .seconds(30)) == 0, "\(cheap.transcript)")
        #expect(Self.outcome(cheap, task: 1).sha256 == F.sha256(content), "\(cheap.transcript)")
        _ = await net.bytesSentWhenIdle()
        #expect(!net.requests.isEmpty && net.requests.allSatisfy { $0.address == "10.88.0.3" }, "\(net.requests)")
    }

    static func totals(_ probe: ProbeProcess, _ task: Int) -> [Int] { probe.totals(task: task) }
}
