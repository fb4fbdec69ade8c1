import Foundation
import Testing
@testable import ReachabilityCLI
import ReachabilityAgent
@testable import ResumableDownloads
import TestSupport

/// `reachability download`: argument validation, destinations, state directory, help and the
/// event/progress text. Transfers themselves are tested in IntegrationTests (nginx, namespaces).
@Suite("download command")
struct DownloadCommandTests {
    static func parse(_ arguments: [String]) throws -> DownloadCommand {
        let parsed = try ParsedArguments.parse(arguments, options: DownloadCommand.options,
                                               positionals: DownloadCommand.positionals)
        return try DownloadCommand(arguments: parsed)
    }

    @Test func parsesOptions() throws {
        let hex = String(repeating: "aB", count: 32)
        let command = try Self.parse(["--sha256", hex, "--no-expensive", "--no-roaming", "--json", "--max-outage", "2.5",
                                      "--state-dir", "/tmp/s", "-d", "out", "http://example.com/a.iso",
                                      "https://example.com/b/c.tar.gz?x=1"])
        #expect(command.urls.map(\.absoluteString) == ["http://example.com/a.iso", "https://example.com/b/c.tar.gz?x=1"])
        #expect(command.expectedSHA256 == hex.lowercased())
        #expect(!command.allowsExpensive && !command.allowsRoaming)
        #expect(command.isJSON)
        #expect(command.maximumOutageWait == .milliseconds(2500))
        #expect(command.stateDirectoryOverride == "/tmp/s")
        let jobs = try command.jobs(workingDirectory: "/work")
        #expect(jobs.map(\.destination.path) == ["/work/out/a.iso", "/work/out/c.tar.gz"])
    }

    @Test func connectionAndPathOptions() throws {
        let command = try Self.parse(["--connections", "16", "--interface", "eth0", "--interface", "wwan0",
                                      "--expensive-as-fallback", "http://example.com/a.iso"])
        #expect(command.maximumConnections == 16)
        #expect(command.interfaces == ["eth0", "wwan0"])
        #expect(command.usesExpensivePathsOnlyAsFallback)
        let plain = try Self.parse(["http://example.com/a.iso"])
        #expect(plain.maximumConnections == nil && plain.interfaces.isEmpty && !plain.usesExpensivePathsOnlyAsFallback)
        // An interface the kernel does not have now is waited for, and the user is told at once.
        let path = PathFixtures.satisfiedWifi
        #expect(DownloadRun.missingInterfaceNotice(["eth0", "wlp2s0"], on: path) == nil)
        #expect(DownloadRun.missingInterfaceNotice(["wwan0"], on: path)
                == "reachability: no interface named 'wwan0' now (there are: eth0, wlp2s0); the download waits for it to appear (--max-outage bounds the wait, Ctrl-C stops)")
        #expect(DownloadRun.missingInterfaceNotice(["wwan0"], on: .unsatisfied(.noInterfaceUp)) == nil, "not listed yet: nothing said")
    }

    @Test func defaultsAndOutput() throws {
        let command = try Self.parse(["http://example.com/dir/file%20name.bin"])
        #expect(command.allowsExpensive && command.allowsRoaming && !command.isJSON && command.expectedSHA256 == nil
                && command.maximumOutageWait == nil)
        #expect(try command.jobs(workingDirectory: "/w").map(\.destination.path) == ["/w/file name.bin"])
        let explicit = try Self.parse(["-o", "x/y.bin", "http://example.com/"])
        #expect(try explicit.jobs(workingDirectory: "/w").map(\.destination.path) == ["/w/x/y.bin"])
        let absolute = try Self.parse(["--output=/tmp/z", "http://example.com/q"])
        #expect(try absolute.jobs(workingDirectory: "/w").map(\.destination.path) == ["/tmp/z"])
    }

    @Test(arguments: [
        (["ftp://example.com/a"], "only http and https URLs are supported, not 'ftp'"),
        (["file:///etc/passwd"], "expected an http or https URL"),
        (["not a url"], "expected an http or https URL"),
        (["http://"], "expected an http or https URL"),
        (["/just/a/path"], "expected an http or https URL"),
        (["-o", "f", "http://a/x", "http://a/y"], "'--output <file>' names one file but 2 URLs were given"),
        (["-o", "f", "-d", "dir", "http://a/x"], "cannot be used together"),
        (["--sha256", "abc", "http://a/x"], "expected 64 hexadecimal digits"),
        (["--sha256", String(repeating: "g", count: 64), "http://a/x"], "expected 64 hexadecimal digits"),
        (["--max-outage", "soon", "http://a/x"], "expected a number of seconds"),
        (["--max-outage", "-1", "http://a/x"], "expected a number of seconds"),
        (["http://example.com/"], "no file name in its path"),
        (["--netns", "a/b", "http://a/x"], "expected a namespace name"),
        (["--connections", "0", "http://a/x"], "expected a number from 1 to 16"),
        (["--connections", "17", "http://a/x"], "expected a number from 1 to 16"),
        (["--connections", "-1", "http://a/x"], "expected a number from 1 to 16"),
        (["--connections", "1e3", "http://a/x"], "expected a number from 1 to 16"),
        (["--connections", "99999999999999999999", "http://a/x"], "expected a number from 1 to 16"),
        (["--connections", "+4", "http://a/x"], "expected a number from 1 to 16"),
        (["--interface", "", "http://a/x"], "expected an interface name"),
        (["--interface", "eth0:1", "http://a/x"], "expected an interface name"),
        (["--interface", "a/b", "http://a/x"], "expected an interface name"),
        (["--interface", "sixteencharsxxxx", "http://a/x"], "expected an interface name"),
        (["--interface", "..", "http://a/x"], "expected an interface name"),
        (["--interface", "eth 0", "http://a/x"], "expected an interface name"),
        (["--no-expensive", "--expensive-as-fallback", "http://a/x"], "contradict each other"),
    ])
    func rejectsBadArguments(_ arguments: [String], _ fragment: String) throws {
        do {
            _ = try Self.parse(arguments)
            Issue.record("accepted \(arguments)")
        } catch let error as UsageError {
            #expect(error.message.contains(fragment), "\(error.message)")
        }
    }

    @Test func missingURLAndDuplicateDestinations() async throws {
        let harness = Harness()
        #expect(await harness.run(["download"]) == 64)
        #expect(harness.standardError.lines.first == "Error: Missing expected argument '<url> ...'")
        #expect(harness.standardError.text.contains("See 'reachability download --help'"))

        let duplicate = try Self.parse(["http://a/x/f.bin", "http://b/y/f.bin"])
        #expect(throws: UsageError.self) { try duplicate.jobs(workingDirectory: "/w") }
    }

    @Test func badURLThroughTheToolExits64() async {
        let harness = Harness()
        #expect(await harness.run(["download", "gopher://x/y"]) == 64)
        #expect(harness.standardError.lines.first?.hasPrefix("Error: The value 'gopher://x/y' is invalid for '<url>'") == true)
        #expect(harness.standardOutput.text.isEmpty)
    }

    @Test func helpListsOptionsAndExitCodes() async {
        let harness = Harness()
        #expect(await harness.run(["help", "download"]) == 0)
        let help = harness.standardOutput.text
        for option in DownloadCommand.options + [Option.help] {
            #expect(help.contains(option.helpLabel), "\(option.name) undocumented")
        }
        for fragment in ["USAGE: reachability download", "<url> ...", "Exit status: 0", "64 usage", "73 ", "75 ",
                         "130 interrupted by SIGINT", "143 by SIGTERM", "74 ", "66 ", "resume data kept", "http_proxy"] {
            #expect(help.contains(fragment), "help lacks \(fragment)")
        }
        let root = Harness()
        #expect(await root.run(["--help"]) == 0)
        #expect(root.standardOutput.text.contains("  download "))
    }

    @Test func stateDirectoryIsPrivateAndJobDirectoriesAreStable() throws {
        let scratch = try ScratchDirectory("dl")
        let root = scratch.url("a/b")
        try DownloadStateDirectory.create(root)
        let mode = try FileManager.default.attributesOfItem(atPath: root.path)[.posixPermissions] as? Int
        #expect(mode == 0o700)
        let job = DownloadCommand.Job(url: URL(string: "http://a/x")!, destination: URL(fileURLWithPath: "/w/x"))
        let other = DownloadCommand.Job(url: URL(string: "http://a/x")!, destination: URL(fileURLWithPath: "/w/y"))
        let first = DownloadStateDirectory.jobDirectory(for: job, in: root)
        #expect(first == DownloadStateDirectory.jobDirectory(for: job, in: root))
        #expect(first != DownloadStateDirectory.jobDirectory(for: other, in: root))
        #expect(first.deletingLastPathComponent().lastPathComponent == "downloads")
        #expect(first.lastPathComponent.count == 16)
    }

    @Test func formatting() {
        #expect(DownloadReporter.bytes(512) == "512 B")
        #expect(DownloadReporter.bytes(1536) == "1.5 KiB")
        #expect(DownloadReporter.bytes(40 * 1024 * 1024) == "40.0 MiB")
        #expect(DownloadReporter.clock(.seconds(13)) == "0:13")
        #expect(DownloadReporter.clock(.seconds(3723)) == "1:02:03")
        #expect(DownloadReporter.text(of: .waitingForConnectivity) == "waiting for network")
        #expect(DownloadReporter.text(of: .resumed(at: 42)) == "resumed at byte 42")
        #expect(EventSchema.describe(.resumed(at: 42)).0 == .resumed)
        #expect(DownloadReporter.seconds(.milliseconds(250)) == "250 ms")
    }
}

@Suite("text formatting by hand")
struct TextFormatTests {
    @Test(arguments: [(0.0, "0.0"), (0.04, "0.0"), (0.05, "0.1"), (1.25, "1.3"), (12.0, "12.0"), (1023.96, "1024.0"), (-2.5, "-2.5")])
    func oneDecimal(_ value: Double, _ expected: String) {
        #expect(TextFormat.decimal(value, fractionDigits: 1) == expected)
    }

    @Test func paddingAndReasons() {
        #expect(TextFormat.zeroPadded(7, width: 2) == "07")
        #expect(TextFormat.zeroPadded(123, width: 2) == "123")
        #expect(TextFormat.rightAligned("5%", width: 4) == "  5%")
        #expect(TextFormat.leftAligned("run", width: 5) == "run  ")
        #expect(TextFormat.decimal(3.14159, fractionDigits: 0) == "3")
        do {
            try FileManager.default.createDirectory(atPath: "/proc/self/no/such", withIntermediateDirectories: true)
            Issue.record("creating under /proc should fail")
        } catch {
            #expect(TextFormat.reason(error) == "No such file or directory")
        }
    }
}

/// How a run ends, decided without downloads (`DownloadSettlement`).
@Suite("download settlement")
struct DownloadSettlementTests {
    static let jobs = ["a", "b", "c"].map {
        DownloadCommand.Job(url: URL(string: "http://192.0.2.9/\($0)")!, destination: URL(fileURLWithPath: "/d/\($0)"))
    }

    @Test func completedRunsAreComplete() {
        let ends = Self.jobs.map { DownloadSettlement.End(job: $0, state: .completed, storedBytes: 10) }
        let settlement = DownloadSettlement.decide(ends, openingFailures: [], interruption: 0, alreadyComplete: 0, jobs: Self.jobs)
        #expect(settlement == DownloadSettlement(cancelled: [], failures: [], isUnfinished: false, isComplete: true))
    }

    @Test func failuresKeepWhatTheirVerdictKeepsAndComeInCommandLineOrder() {
        let ends = [
            DownloadSettlement.End(job: Self.jobs[2], state: .failed(.httpStatus(404)), storedBytes: 10),
            DownloadSettlement.End(job: Self.jobs[1], state: .failed(.connectivityTimeout), storedBytes: 10),
        ]
        let opening = DownloadCommand.JobFailure(job: Self.jobs[0], message: "exists", exitCode: .cannotCreate)
        let settlement = DownloadSettlement.decide(ends, openingFailures: [opening], interruption: 0, alreadyComplete: 0, jobs: Self.jobs)
        #expect(settlement.cancelled == [Self.jobs[2]], "a 404 keeps nothing; an outage keeps the resume data")
        #expect(settlement.failures.map(\.job) == Self.jobs)
        #expect(settlement.failures.map(\.exitCode) == [.cannotCreate, .temporaryFailure, .failure])
        #expect(!settlement.isComplete && !settlement.isUnfinished)
    }

    @Test func anInterruptionLeavesRunningDownloadsPausedNotFailed() {
        let ends = [DownloadSettlement.End(job: Self.jobs[0], state: .completed, storedBytes: 10),
                    DownloadSettlement.End(job: Self.jobs[1], state: .paused, storedBytes: 10)]
        let settlement = DownloadSettlement.decide(ends, openingFailures: [], interruption: SIGINT, alreadyComplete: 0, jobs: Self.jobs)
        #expect(settlement.failures.isEmpty && settlement.isUnfinished && !settlement.isComplete)
        let uninterrupted = DownloadSettlement.decide(ends, openingFailures: [], interruption: 0, alreadyComplete: 0, jobs: Self.jobs)
        #expect(uninterrupted.failures.map(\.message) == ["did not finish (paused)"])
    }

    @Test func filesAlreadyThereCountTowardsComplete() {
        let ends = [DownloadSettlement.End(job: Self.jobs[0], state: .completed, storedBytes: 10)]
        #expect(DownloadSettlement.decide(ends, openingFailures: [], interruption: 0, alreadyComplete: 2, jobs: Self.jobs).isComplete)
        #expect(!DownloadSettlement.decide(ends, openingFailures: [], interruption: 0, alreadyComplete: 1, jobs: Self.jobs).isComplete)
    }
}
