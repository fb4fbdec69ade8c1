import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// The three samples under Samples/, run as built executables.
@Suite("Samples", .serialized)
struct SampleSmokeTests: DownloadScenarios {

    /// Whether the host itself has a default route (the downloading samples watch the host's path).
    static var hostHasDefaultRoute: Bool {
        ((try? sh(["ip", "route", "show", "default"])) ?? "").contains("default")
            || ((try? sh(["ip", "-6", "route", "show", "default"])) ?? "").contains("default")
    }

    @Test(arguments: ["HalfTunes", "ReachabilityBanner", "WaitThenFetch"])
    func helpExitsZero(sample: String) throws {
        let result = try BuiltProducts.run(sample, ["--help"])
        #expect(result.status == 0, "\(result)")
        #expect(result.standardOutput.hasPrefix("OVERVIEW: "))
        #expect(result.standardOutput.contains("USAGE: \(sample)"))
        #expect(result.standardError.isEmpty)
    }

    @Test(arguments: [("HalfTunes", [String]()), ("WaitThenFetch", []), ("ReachabilityBanner", ["--bogus"]),
                      ("HalfTunes", ["ftp://example.org/x"]), ("WaitThenFetch", ["http://h/x", "--timeout", "soon"])])
    func usageErrorsExit64(sample: String, arguments: [String]) throws {
        let result = try BuiltProducts.run(sample, arguments)
        #expect(result.status == 64, "\(result)")
        #expect(result.standardError.hasPrefix("Error: "))
        #expect(result.standardError.contains("See '\(sample) --help'."))
    }

    @Test(.needsRoot)
    func bannerShowsTheNamespacesConnection() throws {
        let connected = try ConnectedNamespace()
        let online = try BuiltProducts.run("ReachabilityBanner", ["--once"], prefix: ["ip", "netns", "exec", connected.name])
        #expect(online.status == 0, "\(online)")
        #expect(online.standardOutput == "● wired (uplink)\n")
        let offline = try BuiltProducts.run("ReachabilityBanner", ["--once"],
                                            prefix: ["ip", "netns", "exec", try connected.lab.namespace("empty")])
        #expect(offline.status == 1, "\(offline)")
        #expect(offline.standardOutput == "○ offline\n")
    }

    @Test(.needsNginx,
          .enabled(if: hostHasDefaultRoute, "the host has no default route; HalfTunes would wait for one"))
    func halfTunesRunsNonInteractively() throws {
        let (nginx, directory, content) = try F.nginxServing(count: 3 << 20, seed: 5, at: "song.mp3", label: "halftunes")
        let result = try BuiltProducts.run("HalfTunes", [nginx.url("song.mp3").absoluteString, nginx.url("missing.mp3").absoluteString,
                                                         "-d", directory.url.path])
        #expect(result.status == 1, "one item failed: \(result)")
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.contains("1. song.mp3: started"))
        #expect(lines.contains("1. song.mp3: done: \(directory.file("song.mp3").path)"))
        #expect(lines.contains("2. missing.mp3: failed: server answered HTTP 404"))
        #expect(F.sha256(fileAt: directory.file("song.mp3")) == F.sha256(content))
    }

    @Test(.needsNginx,
          .enabled(if: hostHasDefaultRoute, "the host has no default route; WaitThenFetch would wait for one"))
    func waitThenFetchDownloadsAndSIGINTCancelsCleanly() throws {
        let (nginx, directory, content) = try F.nginxServing(count: 24 << 20, seed: 9, at: "slow/big.iso", slowRate: "2m", label: "waitthenfetch")
        let output = directory.file("big.iso")
        let arguments = [nginx.url("slow/big.iso").absoluteString, "-o", output.path, "--sha256", F.sha256(content),
                         "--state-dir", directory.file("state").path]

        let process = try ChildProcess.start(try BuiltProducts.url("WaitThenFetch").path, arguments, input: FileHandle.standardInput)
        // Bytes on disk mean the path was usable and the transfer runs: now interrupt it.
        #expect(F.waitSync { ((try? FileManager.default.attributesOfItem(atPath: output.path + ".part"))?[.size] as? Int ?? 0) > 0 })
        kill(process.processIdentifier, SIGINT)
        #expect(F.waitSync(timeout: .seconds(10)) { !process.isRunning })
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        #expect(process.terminationStatus == 130)
        #expect(FileManager.default.fileExists(atPath: output.path + ".part"), "the partial file is kept")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).contains { $0.hasSuffix(".json") })

        let again = try BuiltProducts.run("WaitThenFetch", arguments)
        #expect(again.status == 0, "\(again)")
        #expect(again.standardOutput == output.path + "\n")
        #expect(again.standardError.contains("resuming at "))
        #expect(F.sha256(fileAt: output) == F.sha256(content))
    }
}
