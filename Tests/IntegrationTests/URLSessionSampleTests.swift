import Foundation
import Synchronization
import Testing
import TestSupport

/// Samples/HalfTunesURLSession: the iOS sample's logic on ResumableURLSession, run as built.
@Suite("HalfTunesURLSession sample", .serialized)
struct URLSessionSampleTests: DownloadScenarios {

    /// N from a progress line `1. NAME: N% of SIZE, state` (lines are printed per tenth, but a
    /// burst can skip one), else -1.
    static func percent(in line: String) -> Int {
        guard line.hasPrefix("1. "), line.contains("% of"), let colon = line.firstIndex(of: ":"),
              let percent = line[colon...].dropFirst(2).split(separator: "%").first else { return -1 }
        return Int(percent) ?? -1
    }

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

    @Test(.needsNginx,
          .enabled(if: SampleSmokeTests.hostHasDefaultRoute, "the host has no default route; the sample would see no network"))
    func downloadsOnLoopback() throws {
        let (nginx, directory, content) = try F.nginxServing(count: 2 << 20, seed: 71, at: "song.mp3", label: "halftunes-urlsession")
        let result = try BuiltProducts.run("HalfTunesURLSession", [nginx.url("song.mp3").absoluteString,
                                                                   nginx.url("missing.mp3").absoluteString,
                                                                   "-d", directory.url.path])
        #expect(result.status == 1, "one track failed: \(result)")
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.contains("1. song.mp3: downloaded to \(directory.file("song.mp3").path)"), "\(result)")
        #expect(lines.contains { $0.hasPrefix("2. missing.mp3: ") && $0.hasSuffix("failed: server answered HTTP 404") }, "\(result)")
        #expect(F.sha256(fileAt: directory.file("song.mp3")) == F.sha256(content))
    }

    /// The seed's search, back: a data task against an iTunes-shaped endpoint (a file nginx
    /// serves whatever the query), then the results' previews downloaded.
    @Test(.needsNginx,
          .enabled(if: SampleSmokeTests.hostHasDefaultRoute, "the host has no default route; the sample would see no network"))
    func searchesWithADataTaskThenDownloadsTheResults() throws {
        let (nginx, directory, content) = try F.nginxServing(count: 256 << 10, seed: 73, at: "storm.m4a", label: "halftunes-search")
        let answer = #"{"resultCount":2,"results":[{"trackName":"Storm Song","artistName":"The Clouds","previewUrl":"\#(nginx.url("storm.m4a").absoluteString)"},{"trackName":"No Preview"}]}"#
        try nginx.serve(Data(answer.utf8), at: "search")
        let result = try BuiltProducts.run("HalfTunesURLSession", ["--search", "storm", "--search-url", nginx.url("search").absoluteString,
                                                                   "-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.contains("search: 1 results for storm") && lines.contains("found: The Clouds - Storm Song"), "\(result)")
        #expect(lines.contains("1. Storm Song: downloaded to \(directory.file("storm.m4a").path)"), "\(result)")
        #expect(F.sha256(fileAt: directory.file("storm.m4a")) == F.sha256(content))

        let missing = try BuiltProducts.run("HalfTunesURLSession", ["--search", "storm", "--search-url", nginx.url("nothing").absoluteString,
                                                                    "-d", directory.url.path])
        #expect(missing.status == 1 && missing.standardError.contains("search failed: the search answered HTTP 404"), "\(missing)")
    }

    /// The sample downloading a song served in `net` (into its client folder), cut off a fifth of
    /// the way in by `ip -n CLIENT <cut>` until it says it saved its resume data: the song, the
    /// folder, the sample's arguments and the running sample.
    static func sampleCutOffAtAFifth(in net: OutageLab, seed: UInt64, by cut: String, sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> (Data, URL, [String], LineProcess) {
        let content = try net.serveRandom(count: 5 << 20, seed: seed, at: "song.mp3")
        let output = net.directory.file("client")
        let arguments = ["\(net.url)/song.mp3", "-d", output.path]
        let sample = try LineProcess("HalfTunesURLSession", arguments, namespace: net.client)
        #expect(await sample.waitForLine { percent(in: $0) >= 20 } != nil, "\(sample.transcript)", sourceLocation: sourceLocation)
        try ip("-n \(net.client) \(cut)")
        #expect(await sample.waitForLine(timeout: .seconds(10)) { $0.contains("offline, resume data saved to") } != nil,
                "\(sample.transcript)", sourceLocation: sourceLocation)
        return (content, output, arguments, sample)
    }

    /// The recipe end to end: offline, the resume data goes to disk; after Ctrl-C and with the
    /// network back, the next launch resumes from it.
    @Test(.needsRoot, .needsNginx)
    func savesResumeDataOfflineAndResumesOnTheNextLaunch() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let (content, output, arguments, first) = try await Self.sampleCutOffAtAFifth(in: net, seed: 72, by: "link set eth1 down")
        let saved = output.appendingPathComponent("song.mp3.resumedata")
        #expect(FileManager.default.fileExists(atPath: saved.path))
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")
        #expect(FileManager.default.fileExists(atPath: saved.path), "kept for the next launch")

        try ip("-n \(net.client) link set eth1 up")
        try net.addDefaultRoute("eth1")
        let second = try LineProcess("HalfTunesURLSession", arguments, namespace: net.client)
        #expect(await second.waitForExit(timeout: .seconds(30)) == 0, "\(second.transcript)")
        let resumed = second.texts.first { $0.hasPrefix("1. song.mp3: resumed at byte ") }
        let offset = resumed.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
        #expect(offset >= 1 << 20, "\(second.transcript)")
        #expect(second.texts.contains("1. song.mp3: downloaded to \(output.appendingPathComponent("song.mp3").path)"))
        #expect(F.sha256(fileAt: output.appendingPathComponent("song.mp3")) == F.sha256(content))
        #expect(!FileManager.default.fileExists(atPath: saved.path), "used up")
    }

    /// Offline then back within the same run: Reachability's whenReachable resumes from the saved data.
    @Test(.needsRoot, .needsNginx)
    func resumesWhenTheNetworkComesBack() async throws {
        let net = try OutageLab()
        defer { net.close() }
        let (content, output, _, sample) = try await Self.sampleCutOffAtAFifth(in: net, seed: 73, by: "route del default")
        try net.addDefaultRoute("eth1")
        #expect(await sample.waitForExit(timeout: .seconds(30)) == 0, "\(sample.transcript)")
        #expect(sample.texts.contains { $0.hasPrefix("network: reachable via") })
        #expect(sample.texts.contains { $0.hasPrefix("1. song.mp3: resumed at byte ") }, "\(sample.transcript)")
        #expect(F.sha256(fileAt: output.appendingPathComponent("song.mp3")) == F.sha256(content))
    }
}
