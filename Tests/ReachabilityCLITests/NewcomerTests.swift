import TestSupport
import Foundation
@testable import ResumableDownloads
import Testing
@testable import ReachabilityCLI

/// Issue 11: group help, "did you mean", failure classes, curl-like option parsing, and
/// `download` run under `CommandContext` (signals, working directory, euid) with no `exit()`.
@Suite("newcomer: help, suggestions, failure classes, download seam")
struct NewcomerTests {
    @Test(arguments: [["queue", "--help"], ["queue", "-h"], ["help", "queue"], ["queue"], ["help", "queue", "--help"]])
    func queueGroupHelp(arguments: [String]) async {
        let harness = Harness()
        #expect(await harness.run(arguments) == 0)
        let text = harness.standardOutput.text
        #expect(text.hasPrefix("OVERVIEW: "))
        #expect(text.contains("USAGE: reachability queue <subcommand>"))
        for member in ["add", "list", "pause", "resume", "cancel"] { #expect(text.contains("\n  \(member) ")) }
        #expect(harness.standardError.text.isEmpty)
    }

    @Test func agentHelpListsItsSubcommand() async {
        let harness = Harness()
        #expect(await harness.run(["help", "agent"]) == 0)
        #expect(harness.standardOutput.text.contains("SUBCOMMANDS:\n  status "))
    }

    @Test(arguments: [
        (["stauts"], "Error: Unknown subcommand 'stauts'. Did you mean 'status'?"),
        (["dowload", "x"], "Error: Unknown subcommand 'dowload'. Did you mean 'download'?"),
        (["queue", "lst"], "Error: Unknown subcommand 'queue lst'. Did you mean 'queue list'?"),
        (["status", "--jsn"], "Error: Unknown option '--jsn'. Did you mean '--json'?"),
        (["download", "--sha", "x", "http://a/b"], "Error: Unknown option '--sha'. Did you mean '--sha256'?"),
        (["--verison"], "Error: Unknown option '--verison'. Did you mean '--version'?"),
        (["zzz"], "Error: Unknown subcommand 'zzz'"),
    ])
    func didYouMean(arguments: [String], firstLine: String) async {
        let harness = Harness()
        #expect(await harness.run(arguments) == 64)
        #expect(harness.standardError.lines.first == firstLine)
    }

    @Test func editDistance() {
        #expect(Suggestion.editDistance("status", "stauts") == 1)
        #expect(Suggestion.editDistance("", "abc") == 3)
        #expect(Suggestion.closest(to: "ls", among: ["list", "add"]) == nil)
    }

    @Test(arguments: [
        (DownloadError.httpStatus(404), Int64(100), ExitCode.failure, false),
        (DownloadError.httpStatus(999), 100, .failure, false),
        (DownloadError.httpStatus(403), 100, .failure, true),
        (DownloadError.httpStatus(401), 100, .failure, true),
        (DownloadError.httpStatus(410), 100, .failure, true),
        (DownloadError.httpStatus(403), 0, .failure, false),
        (DownloadError.httpStatus(503), 100, .temporaryFailure, true),
        (DownloadError.httpStatus(503), 0, .temporaryFailure, false),
        (DownloadError.checksumMismatch, 100, .failure, false),
        (DownloadError.transport(.serverCertificateUntrusted), 0, .failure, false),
        (DownloadError.transport(.serverCertificateUntrusted), 100, .failure, false),
        (DownloadError.connectivityTimeout, 100, .temporaryFailure, true),
        (DownloadError.cannotConnectToHost, 100, .temporaryFailure, true),
        (DownloadError.diskFull, 100, .ioError, true),
        (DownloadError.fileSystem("open", path: "/proc/x.part", errno: ENOENT), 0, .cannotCreate, false),
        (DownloadError.fileSystem("open", path: "/ro/x.part", errno: EROFS), 0, .cannotCreate, false),
        (DownloadError.fileSystem("write", path: "/ro/x.part", errno: EROFS), 100, .cannotCreate, true),
        (DownloadError.fileSystem("fsync", path: "/x.part", errno: EIO), 100, .ioError, true),
    ] as [(DownloadError, Int64, ExitCode, Bool)])
    func failureClasses(error: DownloadError, stored: Int64, code: ExitCode, keeps: Bool) {
        let verdict = DownloadFailureVerdict(error, storedBytes: stored)
        #expect(verdict.exitCode == code)
        #expect(verdict.keepsResumeData == keeps)
        #expect(verdict.suffix.contains("resume data kept") == keeps)
        #expect(verdict.suffix.contains("the link expired") == (keeps && error.isExpiredLink))
    }

    @Test func combinedExitCodes() {
        #expect(DownloadFailureVerdict.combinedExitCode([]) == .success)
        #expect(DownloadFailureVerdict.combinedExitCode([.temporaryFailure, .failure, .cannotCreate]) == .failure)
        #expect(DownloadFailureVerdict.combinedExitCode([.temporaryFailure, .cannotCreate]) == .temporaryFailure)
    }

    @Test func rates() {
        #expect(TransportOptions.rate.value(from: "500k") == 512_000)
        #expect(TransportOptions.rate.value(from: "2M") == 2 << 20)
        #expect(TransportOptions.rate.value(from: "1g") == 1 << 30)
        #expect(TransportOptions.rate.value(from: "1000") == 1000)
        for bad in ["", "k", "-1k", "0", "1x", "nan", "1e30g"] { #expect(TransportOptions.rate.value(from: bad) == nil, "\(bad)") }
    }

    @Test func headers() {
        #expect(HeaderValidation.problem(with: "Authorization: Bearer x") == nil)
        #expect(HeaderValidation.problem(with: "X-Empty:") == nil)
        for bad in ["X: a\r\nY: b", "X: a\nb", "Range: bytes=0-", "if-range: x", "Accept-Encoding: gzip", "no colon",
                    ": value", "Bad Name: x", "X: \u{0}"] {
            #expect(HeaderValidation.problem(with: bad) != nil, "\(bad)")
        }
    }

    @Test func proxyEnvironmentFollowsLibcurl() {
        let url = URL(string: "http://files.example.org/x")!
        let secure = URL(string: "https://files.example.org/x")!
        #expect(ProxyEnvironment.proxy(for: url, explicit: nil, environment: ["HTTP_PROXY": "http://p:1"]) == nil)
        #expect(ProxyEnvironment.proxy(for: url, explicit: nil, environment: ["http_proxy": "http://p:1"]) == "http://p:1")
        #expect(ProxyEnvironment.proxy(for: secure, explicit: nil, environment: ["HTTPS_PROXY": "http://p:2"]) == "http://p:2")
        #expect(ProxyEnvironment.proxy(for: secure, explicit: nil, environment: ["ALL_PROXY": "socks5h://p:3"]) == "socks5h://p:3")
        #expect(ProxyEnvironment.proxy(for: url, explicit: nil, environment: ["http_proxy": "http://p:1", "no_proxy": ".example.org"]) == nil)
        #expect(ProxyEnvironment.proxy(for: url, explicit: nil, environment: ["http_proxy": "http://p:1", "no_proxy": "*"]) == nil)
        #expect(ProxyEnvironment.proxy(for: url, explicit: "", environment: ["http_proxy": "http://p:1"]) == nil)
        #expect(ProxyEnvironment.proxy(for: url, explicit: "http://q:9", environment: [:]) == "http://q:9")
        #expect(ProxyEnvironment.redacted("http://u:pw@p:1") == "http://u:***@p:1")
    }

    @Test(arguments: [
        (["-o", "-", "--json", "http://a/x"], "both write to stdout"),
        (["--limit-rate", "fast", "http://a/x"], "expected bytes per second"),
        (["--proxy", "ftp://p", "http://a/x"], "expected a proxy URL"),
        (["-H", "X: a\r\nY: b", "http://a/x"], "control characters"),
    ])
    func rejectsBadCurlOptions(arguments: [String], fragment: String) async {
        let harness = Harness()
        #expect(await harness.run(["download"] + arguments) == 64)
        #expect(harness.standardError.text.contains(fragment), "\(harness.standardError.text)")
    }

    /// The whole command under the harness: the state directory comes from the context's euid and
    /// HOME, relative paths from its working directory, and SIGINT through its signal seam; the
    /// download (to a port nobody listens on) pauses and the run returns 130 without exiting.
    @Test func downloadRunsUnderTheContextAndPausesOnSignal() async throws {
        let scratch = try ScratchDirectory("seam")
        let root = scratch.url
        let harness = Harness(environment: ["HOME": root.path, "NO_COLOR": "1"], effectiveUserID: 1000,
                              currentDirectory: root.path)
        let port = 1 + UInt16.random(in: 1...50)   // privileged ports below 64: nothing listens there
        let task = Task { await harness.run(["download", "--json", "-o", "out/f.bin", "http://127.0.0.1:\(port)/f.bin"]) }
        let ready = await Polling.wait { harness.handles(SIGINT) && harness.standardOutput.text.contains("\"event\":\"started\"") }
        #expect(ready, "no handler/started: \(harness.standardOutput.text)")
        #expect(harness.signal(SIGINT))
        #expect(await task.value == 130)
        #expect(harness.standardError.text.contains("paused; run the same command again to resume"))
        #expect(FileManager.default.fileExists(atPath: root.path + "/.local/state/reachability/downloads"))
        #expect(FileManager.default.fileExists(atPath: root.path + "/out"))
        #expect(!harness.handles(SIGINT), "the handler is removed when the run ends")
    }

    @Test func aSecondSignalQuitsWithoutWaiting() async throws {
        let run = RunControl()
        #expect(run.firstInterruption(SIGTERM))
        #expect(!run.firstInterruption(SIGINT))
        run.start { await neverEndingWork(); return [] }
        run.finish(nil)
        #expect(await run.result() == nil)
        #expect(run.interruption == SIGTERM)
        run.cancelWork()
    }
}
