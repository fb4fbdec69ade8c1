import Foundation
import Synchronization
import Testing

/// Samples/HalfTunesURLSession: the iOS sample's logic on ResumableURLSession, run as built.
@Suite("HalfTunesURLSession sample", .serialized)
struct URLSessionSampleTests {
    typealias F = DownloadFixtures

    @Test func helpAndUsageErrors() throws {
        let help = try BuiltProducts.run("HalfTunesURLSession", ["--help"])
        #expect(help.status == 0 && help.standardOutput.hasPrefix("OVERVIEW: ") && help.standardError.isEmpty, "\(help)")
        #expect(help.standardOutput.contains("USAGE: HalfTunesURLSession"))
        for arguments in [[], ["ftp://example.org/x"], ["--bogus"]] {
            let result = try BuiltProducts.run("HalfTunesURLSession", arguments)
            #expect(result.status == 64, "\(result)")
            #expect(result.standardError.hasPrefix("Error: ") && result.standardError.contains("See 'HalfTunesURLSession --help'."))
        }
    }

    @Test(.enabled(if: DownloadTestNginx.isAvailable, "nginx is not installed at /usr/sbin/nginx"),
          .enabled(if: SampleSmokeTests.hostHasDefaultRoute, "the host has no default route; the sample would see no network"))
    func downloadsOnLoopback() throws {
        let nginx = try DownloadTestNginx()
        let directory = try F.Directory("halftunes-urlsession")
        let content = F.randomData(count: 2 << 20, seed: 71)
        try nginx.serve(content, at: "song.mp3")
        let result = try BuiltProducts.run("HalfTunesURLSession", [nginx.url("song.mp3").absoluteString,
                                                                   nginx.url("missing.mp3").absoluteString,
                                                                   "-d", directory.url.path])
        #expect(result.status == 1, "one track failed: \(result)")
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.contains("1. song.mp3: downloaded to \(directory.file("song.mp3").path)"), "\(result)")
        #expect(lines.contains { $0.hasPrefix("2. missing.mp3: ") && $0.hasSuffix("failed: server answered HTTP 404") }, "\(result)")
        #expect(F.sha256(fileAt: directory.file("song.mp3")) == F.sha256(content))
    }

    /// The recipe end to end: offline, the resume data goes to disk; after Ctrl-C and with the
    /// network back, the next launch resumes from it.
    @Test(.enabled(if: isRoot, rootReason), .enabled(if: DownloadTestNginx.isAvailable, "nginx is not installed at /usr/sbin/nginx"))
    func savesResumeDataOfflineAndResumesOnTheNextLaunch() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let content = F.randomData(count: 5 << 20, seed: 72)
        try net.serve(content, at: "song.mp3")
        let output = net.directory.file("client")
        let arguments = ["\(net.url)/song.mp3", "-d", output.path]
        let first = try SampleProcess("HalfTunesURLSession", arguments, namespace: net.client)
        #expect(await first.waitForLine { SampleProcess.percent(in: $0) >= 20 }, "\(first.transcript)")
        try ip("-n \(net.client) link set eth1 down")
        #expect(await first.waitForLine(timeout: .seconds(10)) { $0.contains("offline, resume data saved to") }, "\(first.transcript)")
        let saved = output.appendingPathComponent("song.mp3.resumedata")
        #expect(FileManager.default.fileExists(atPath: saved.path))
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")
        #expect(FileManager.default.fileExists(atPath: saved.path), "kept for the next launch")

        try ip("-n \(net.client) link set eth1 up")
        try net.addDefaultRoute("eth1")
        let second = try SampleProcess("HalfTunesURLSession", arguments, namespace: net.client)
        #expect(await second.waitForExit(timeout: .seconds(30)) == 0, "\(second.transcript)")
        let resumed = second.lines.first { $0.hasPrefix("1. song.mp3: resumed at byte ") }
        let offset = resumed.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
        #expect(offset >= 1 << 20, "\(second.transcript)")
        #expect(second.lines.contains("1. song.mp3: downloaded to \(output.appendingPathComponent("song.mp3").path)"))
        #expect(F.sha256(fileAt: output.appendingPathComponent("song.mp3")) == F.sha256(content))
        #expect(!FileManager.default.fileExists(atPath: saved.path), "used up")
    }

    /// Offline then back within the same run: Reachability's whenReachable resumes from the saved data.
    @Test(.enabled(if: isRoot, rootReason), .enabled(if: DownloadTestNginx.isAvailable, "nginx is not installed at /usr/sbin/nginx"))
    func resumesWhenTheNetworkComesBack() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let content = F.randomData(count: 5 << 20, seed: 73)
        try net.serve(content, at: "song.mp3")
        let output = net.directory.file("client")
        let sample = try SampleProcess("HalfTunesURLSession", ["\(net.url)/song.mp3", "-d", output.path], namespace: net.client)
        #expect(await sample.waitForLine { SampleProcess.percent(in: $0) >= 20 }, "\(sample.transcript)")
        try ip("-n \(net.client) route del default")
        #expect(await sample.waitForLine(timeout: .seconds(10)) { $0.contains("offline, resume data saved to") }, "\(sample.transcript)")
        try net.addDefaultRoute("eth1")
        #expect(await sample.waitForExit(timeout: .seconds(30)) == 0, "\(sample.transcript)")
        #expect(sample.lines.contains { $0.hasPrefix("network: reachable via") })
        #expect(sample.lines.contains { $0.hasPrefix("1. song.mp3: resumed at byte ") }, "\(sample.transcript)")
        #expect(F.sha256(fileAt: output.appendingPathComponent("song.mp3")) == F.sha256(content))
    }
}

/// A sample started in a namespace, its stdout lines collected as they arrive.
final class SampleProcess: Sendable {
    private final class Collected: Sendable {
        let output = Mutex((partial: "", lines: [String](), errors: ""))
        let exited = Mutex<Int32?>(nil)
    }

    let process = Process()
    private let collected = Collected()

    init(_ name: String, _ arguments: [String], namespace: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["ip", "netns", "exec", namespace, try BuiltProducts.url(name).path] + arguments
        process.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "NO_COLOR": "1"]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let collected = collected
        out.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil; return }
            collected.output.withLock { state in
                state.partial += String(decoding: data, as: UTF8.self)
                while let newline = state.partial.firstIndex(of: "\n") {
                    state.lines.append(String(state.partial[..<newline]))
                    state.partial = String(state.partial[state.partial.index(after: newline)...])
                }
            }
        }
        err.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil; return }
            collected.output.withLock { $0.errors += String(decoding: data, as: UTF8.self) }
        }
        process.terminationHandler = { process in collected.exited.withLock { $0 = process.terminationStatus } }
        try process.run()
    }

    var lines: [String] { collected.output.withLock { $0.lines } }

    /// N from a progress line `1. NAME: N% of SIZE, state` (lines are printed per tenth, but a
    /// burst can skip one), else -1.
    static func percent(in line: String) -> Int {
        guard line.hasPrefix("1. "), line.contains("% of"), let colon = line.firstIndex(of: ":"),
              let percent = line[colon...].dropFirst(2).split(separator: "%").first else { return -1 }
        return Int(percent) ?? -1
    }

    func waitForLine(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable (String) -> Bool) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.lines.contains(where: predicate) }
    }

    func waitForExit(timeout: Duration = .seconds(20)) async -> Int32? {
        _ = await DownloadFixtures.wait(timeout: timeout) { self.collected.exited.withLock { $0 } != nil }
        return collected.exited.withLock { $0 }
    }

    /// Signals the sample itself (not `ip netns exec`, which execs it: same pid).
    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    var transcript: String {
        collected.output.withLock { "stdout:\n\($0.lines.joined(separator: "\n"))\nstderr:\n\($0.errors)" }
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
