import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// The built `reachability download` binary against nginx on 127.0.0.1: exit statuses, NDJSON on
/// stdout, the file's SHA-256, and SIGINT → pause → rerun → resume.
///
/// The command runs a real `PathMonitor` on the current namespace, so these tests assume the host
/// has a usable path (any default route); the namespace tests in DownloadOutageTests do not.
@Suite("reachability download (built binary, loopback nginx)", .serialized,
       .needsNginx)
struct DownloadCommandTests: DownloadScenarios {

    @Test func downloadsWithJSONEventsAndVerifies() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 6 << 20 + 17, seed: 11, at: "files/data.bin")
        defer { nginx.stop() }
        let cli = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path,
                                  "--sha256", F.sha256(content), nginx.url("files/data.bin").absoluteString],
                                 directory: directory.url)
        let status = await cli.waitForExit()
        #expect(status == 0, "\(cli.transcript)")
        let destination = directory.file("data.bin")
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect(!FileManager.default.fileExists(atPath: destination.path + ".part"))
        // Every stdout line is one JSON object of the shared event schema (docs/events.md).
        #expect(cli.events.count == cli.lines.count)
        #expect(cli.lines.flatMap(EventSchemaValidator.problems).isEmpty, "\(cli.lines.flatMap(EventSchemaValidator.problems))")
        #expect(cli.events.last?["event"] as? String == "completed", "nothing after the terminal event: \(cli.lines)")
        #expect(cli.eventNames.first == "started")
        #expect(cli.eventNames.last == "completed")
        let completed = try #require(cli.events.last { $0["event"] as? String == "completed" })
        #expect(completed["bytes"] as? Int == content.count)
        #expect(completed["total"] as? Int == content.count)
        #expect(completed["url"] as? String == nginx.url("files/data.bin").absoluteString)
        // Nothing left to resume: the job's state directory holds only the completion marker.
        let jobs = (try? FileManager.default.contentsOfDirectory(atPath: directory.file("state/downloads").path)) ?? []
        #expect(jobs.count == 1)
        let left = jobs.first.flatMap { try? FileManager.default.contentsOfDirectory(atPath: directory.file("state/downloads/\($0)").path) }
        #expect(left == ["completed.json"], "\(left ?? [])")

        // Running it again (issue 34): the server still serves that length and ETag, so the file
        // is done, as with `wget -c`: exit 0, one `completed` line saying so, nothing fetched.
        let again = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path,
                                    nginx.url("files/data.bin").absoluteString], directory: directory.url)
        #expect(await again.waitForExit() == 0, "\(again.transcript)")
        #expect(again.eventNames == ["completed"], "\(again.transcript)")
        #expect((again.events.first?["reason"] as? String)?.contains("length and ETag match the server's") == true, "\(again.transcript)")
        #expect(F.sha256(fileAt: destination) == F.sha256(content))

        // Once the server's file changed, the rerun refuses, and says why: exit 73.
        try nginx.serve(content + Data("more".utf8), at: "files/data.bin")
        let changed = try CLIProcess(["download", "--state-dir", directory.file("state").path,
                                      nginx.url("files/data.bin").absoluteString], directory: directory.url)
        #expect(await changed.waitForExit() == 73, "\(changed.transcript)")
        #expect(changed.standardError.contains("Error: \(nginx.url("files/data.bin").absoluteString): \(destination.path) already exists"
                                               + " and may not be the server's file: its length differs"), "\(changed.transcript)")
        try nginx.serve(content, at: "files/data.bin")

        // With the right --sha256 the existing file counts as done: exit 0, one `completed` line.
        let verified = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path,
                                       "--sha256", F.sha256(content), nginx.url("files/data.bin").absoluteString],
                                      directory: directory.url)
        #expect(await verified.waitForExit() == 0, "\(verified.transcript)")
        #expect(verified.eventNames == ["completed"])
        #expect(verified.events.first?["bytes"] as? Int == content.count)

        // A server that cannot be asked decides nothing: exit 75 (run again later), file kept.
        nginx.stop()
        let unreachable = try CLIProcess(["download", "--state-dir", directory.file("state").path,
                                          nginx.url("files/data.bin").absoluteString], directory: directory.url)
        #expect(await unreachable.waitForExit() == 75, "\(unreachable.transcript)")
        #expect(unreachable.standardError.contains("the server could not be asked whether it is still its file"), "\(unreachable.transcript)")
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
    }

    /// stderr on a terminal (util-linux `script` provides one): bars with bytes, rate and ETA,
    /// redrawn in place; the pipe tests above show that without a terminal there are none.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs script(1) for a pseudo-terminal"))
    func progressBarsOnATerminal() async throws {
        let nginx = try DownloadTestNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try F.Directory()
        try nginx.serve(F.randomData(count: 3 << 20, seed: 9), at: "slow/tty.bin")
        let command = [try CLIProcess.binaryPath(), "download", "--state-dir", directory.file("state").path,
                       nginx.url("slow/tty.bin").absoluteString].joined(separator: " ")
        let result = try ChildProcess.run("/usr/bin/script", ["-qec", command, "/dev/null"], directory: directory.url,
                                          environment: ["PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": directory.url.path, "TERM": "xterm"])
        let text = result.standardOutput
        #expect(result.status == 0, "\(text)")
        #expect(text.contains("tty.bin  [#"), "\(text)")
        #expect(text.contains("MiB / 3.0 MiB"))
        #expect(text.contains("ETA "))
        #expect(text.contains("\u{1B}[1A"))          // redrawn in place
        #expect(!text.contains("\u{1B}[33m"))         // NO_COLOR
        #expect(text.contains("tty.bin: completed"))
    }

    @Test func atMostFourTransferAtOnce() async throws {
        let nginx = try DownloadTestNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try F.Directory()
        var urls: [String] = []
        var contents: [Data] = []
        for index in 0..<6 {
            let content = F.randomData(count: 1 << 20, seed: UInt64(100 + index))
            try nginx.serve(content, at: "slow/part\(index).bin")
            urls.append(nginx.url("slow/part\(index).bin").absoluteString)
            contents.append(content)
        }
        let cli = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-d", "parts"] + urls,
                                 directory: directory.url)
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        for (index, content) in contents.enumerated() {
            #expect(F.sha256(fileAt: directory.file("parts/part\(index).bin")) == F.sha256(content))
        }
        let names = cli.eventNames
        #expect(names.filter { $0 == "completed" }.count == 6)
        let firstCompletion = try #require(names.firstIndex(of: "completed"))
        #expect(names[..<firstCompletion].filter { $0 == "started" }.count <= 4, "\(names)")
    }

    @Test func aSecondProcessOnTheSameDownloadIsRefused() async throws {
        let nginx = try DownloadTestNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try F.Directory()
        // 16 s at 1 MiB/s: still running when it is interrupted, however loaded the machine.
        try nginx.serve(F.randomData(count: 16 << 20, seed: 5), at: "slow/one.bin")
        let arguments = ["download", "--json", "--state-dir", directory.file("state").path,
                         nginx.url("slow/one.bin").absoluteString]
        let first = try CLIProcess(arguments, directory: directory.url)
        #expect(await first.waitFor("started"), "\(first.transcript)")
        let second = try CLIProcess(arguments, directory: directory.url)
        #expect(await second.waitForExit() == 75, "\(second.transcript)")
        #expect(second.standardError.contains("another 'reachability download' is writing \(directory.file("one.bin").standardizedFileURL.path)"))
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")
    }

    @Test func textEventsGoToStandardErrorAndFailuresExitNonZero() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 1 << 20, seed: 3, at: "a.bin")
        defer { nginx.stop() }
        let wrong = String(repeating: "0", count: 64)
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-d", "out",
                                  nginx.url("a.bin").absoluteString, nginx.url("missing.bin").absoluteString],
                                 directory: directory.url)
        #expect(await cli.waitForExit() == 1, "\(cli.transcript)")
        #expect(cli.lines.isEmpty)   // text mode: stdout stays empty
        #expect(F.sha256(fileAt: directory.file("out/a.bin")) == F.sha256(content))
        #expect(cli.standardError.contains("a.bin: completed"))
        #expect(cli.standardError.contains("Error: \(nginx.url("missing.bin").absoluteString): "))
        #expect(cli.standardError.contains("404"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("out/missing.bin").path))

        let mismatch = try CLIProcess(["download", "--state-dir", directory.file("state").path, "--sha256", wrong,
                                       "-o", "b.bin", nginx.url("a.bin").absoluteString], directory: directory.url)
        #expect(await mismatch.waitForExit() == 1)
        #expect(mismatch.standardError.contains("Error: \(nginx.url("a.bin").absoluteString): SHA-256 is \(F.sha256(content)), expected \(wrong)"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("b.bin").path))
    }

    @Test(arguments: [(SIGINT, Int32(130)), (SIGTERM, Int32(143))])
    func interruptPausesAndTheSameCommandResumes(_ signal: Int32, _ expected: Int32) async throws {
        // 8 s: interrupted mid-transfer even under load
        let (nginx, directory, content) = try F.nginxServing(count: 16 << 20, seed: UInt64(signal), at: "slow/movie.bin", slowRate: "2m")
        defer { nginx.stop() }
        let arguments = ["download", "--json", "--state-dir", directory.file("state").path,
                         "--sha256", F.sha256(content), nginx.url("slow/movie.bin").absoluteString]

        let first = try CLIProcess(arguments, directory: directory.url)
        #expect(await first.waitForBytes(1 << 20), "\(first.transcript)")
        first.signal(signal)
        #expect(await first.waitForExit() == expected, "\(first.transcript)")
        #expect(first.standardError.contains("paused; run the same command again to resume"))
        #expect(first.eventNames.last == "paused")
        #expect(first.events.last?["event"] as? String == "paused", "no progress after the terminal event: \(first.lines.suffix(3))")
        let paused = try #require(first.events.last { $0["event"] as? String == "paused" })
        let pausedAt = try #require(paused["bytes"] as? Int)
        #expect(pausedAt >= 1 << 20 && pausedAt < content.count)
        #expect(!FileManager.default.fileExists(atPath: directory.file("movie.bin").path))
        #expect(FileManager.default.fileExists(atPath: directory.file("movie.bin.part").path))

        let second = try CLIProcess(arguments, directory: directory.url)
        #expect(await second.waitForExit() == 0, "\(second.transcript)")
        let resumed = try #require(second.events.first { $0["event"] as? String == "resumed" }, "\(second.transcript)")
        #expect(resumed["offset"] as? Int == pausedAt)
        #expect(second.count("started") == 0)
        #expect(second.count("restarted") == 0)
        #expect(F.sha256(fileAt: directory.file("movie.bin")) == F.sha256(content))
    }
}
