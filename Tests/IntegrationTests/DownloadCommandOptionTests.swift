import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// `reachability download` as a newcomer meets it: reruns of an interrupted batch, failures that
/// must leave nothing behind with their own exit statuses, and the options curl users expect.
@Suite("reachability download: reruns, failure classes, curl-like options", .serialized,
       .needsNginx)
struct DownloadCommandOptionTests: DownloadScenarios {

    static func jobDirectories(_ directory: F.Directory) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory.file("state/downloads").path)) ?? []
    }

    @Test func anInterruptedBatchRerunExitsZeroOnceEverythingIsThere() async throws {
        let nginx = try DownloadTestNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try F.Directory()
        let small = F.randomData(count: 64 << 10, seed: 21)
        let big = F.randomData(count: 16 << 20, seed: 22)
        try nginx.serve(small, at: "small.bin")
        try nginx.serve(big, at: "slow/big.bin")
        let arguments = ["download", "--json", "--state-dir", directory.file("state").path, "-d", "out",
                         nginx.url("small.bin").absoluteString, nginx.url("slow/big.bin").absoluteString]
        let first = try CLIProcess(arguments, directory: directory.url)
        #expect(await first.waitForEvent { $0["event"] as? String == "completed" && ($0["file"] as? String)?.hasSuffix("small.bin") == true })
        #expect(await first.waitForBytes(1 << 20))
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")

        let second = try CLIProcess(arguments, directory: directory.url)
        #expect(await second.waitForExit() == 0, "\(second.transcript)")
        #expect(!second.standardError.contains("already exists"), "\(second.transcript)")
        #expect(second.events.contains { ($0["reason"] as? String)?.contains("earlier run of this command") == true })
        #expect(F.sha256(fileAt: directory.file("out/small.bin")) == F.sha256(small))
        #expect(F.sha256(fileAt: directory.file("out/big.bin")) == F.sha256(big))
        #expect(Self.jobDirectories(directory).count == 2, "a completion marker each: \(Self.jobDirectories(directory))")

        // The batch is finished: the next run asks the server, which still serves both (issue 34).
        let third = try CLIProcess(arguments, directory: directory.url)
        #expect(await third.waitForExit() == 0, "\(third.transcript)")
        #expect(third.events.filter { ($0["reason"] as? String)?.contains("match the server's") == true }.count == 2, "\(third.transcript)")
    }

    /// Issue 20: `--max-outage 1e16` died with SIGILL (exit 132). Limits beyond 100 years are
    /// no limit, one just below is a real one; the built binary downloads with either, and waits
    /// for a server that refuses until it is interrupted, without trapping on the deadline.
    @Test func hugeOutageLimitsAreNoLimitNotACrash() async throws {
        let content = F.randomData(count: 32 << 10, seed: 20)
        let server = try DownloadTestHTTPServer { request, _ in .honest(request, content: content, etag: "\"v20\"") }
        defer { server.stop() }
        let directory = try F.Directory()
        // (0 is parsed in ValueInputTests: here it would fail any run that waits a moment for
        // its first path.)
        for (index, limit) in ["1e16", "9e18", "9223372036854775807", "1e300", "inf", "3e9"].enumerated() {
            let run = try CLIProcess(["download", "--max-outage", limit, "--state-dir", directory.file("state").path,
                                      "-o", "out/\(index).bin", server.url().absoluteString], directory: directory.url)
            #expect(await run.waitForExit() == 0, "--max-outage \(limit): \(run.transcript)")
            #expect(F.sha256(fileAt: directory.file("out/\(index).bin")) == F.sha256(content))
        }
        let refused = try F.freePort()
        let waiting = try CLIProcess(["download", "--json", "--max-outage", "3e9", "--state-dir", directory.file("state").path,
                                      "-o", "out/never.bin", "http://127.0.0.1:\(refused)/x"], directory: directory.url)
        #expect(await waiting.waitFor("waitingForServer"), "\(waiting.transcript)")
        waiting.signal(SIGINT)
        #expect(await waiting.waitForExit() == 130, "\(waiting.transcript)")
    }

    @Test func permanentFailuresLeaveNoRecordAndSayNothingIsKept() async throws {
        let server = try DownloadTestHTTPServer { request, _ in
            request.path.hasSuffix("weird.bin") ? .init(status: 999, body: Data("odd".utf8))
                : .init(status: 404, body: Data("no".utf8))
        }
        defer { server.stop() }
        let directory = try F.Directory()
        let state = directory.file("state").path
        let weird = try CLIProcess(["download", "--state-dir", state, "http://127.0.0.1:\(server.port)/weird.bin"],
                                   directory: directory.url)
        #expect(await weird.waitForExit() == 1, "\(weird.transcript)")
        #expect(weird.standardError.contains("999"))
        #expect(!weird.standardError.contains("resume data kept"), "\(weird.transcript)")
        #expect(Self.jobDirectories(directory).isEmpty, "\(Self.jobDirectories(directory))")
        #expect(!FileManager.default.fileExists(atPath: directory.file("weird.bin.part").path))

        // A destination that can never be written: exit 73, not "run the same command again".
        let proc = try CLIProcess(["download", "--state-dir", state, "-o", "/proc/reachability-\(getpid())",
                                   "http://127.0.0.1:\(server.port)/x.bin"], directory: directory.url)
        #expect(await proc.waitForExit() == 73, "\(proc.transcript)")
        #expect(!proc.standardError.contains("resume data kept"), "\(proc.transcript)")
        #expect(Self.jobDirectories(directory).isEmpty, "\(Self.jobDirectories(directory))")
    }

    @Test func untrustedCertificateIsPermanentAndCacertOrInsecureFixIt() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 100_000, seed: 31, at: "secure.bin", tls: true)
        defer { nginx.stop() }
        let state = directory.file("state").path
        let url = nginx.tlsURL("secure.bin").absoluteString
        let untrusted = try CLIProcess(["download", "--state-dir", state, "-o", "a.bin", url], directory: directory.url)
        #expect(await untrusted.waitForExit() == 1, "\(untrusted.transcript)")
        #expect(!untrusted.standardError.contains("resume data kept"), "\(untrusted.transcript)")
        #expect(Self.jobDirectories(directory).isEmpty)

        let trusted = try CLIProcess(["download", "-q", "--state-dir", state, "--cacert", nginx.certificate.path, "-o", "b.bin", url],
                                     directory: directory.url)
        #expect(await trusted.waitForExit() == 0, "\(trusted.transcript)")
        #expect(trusted.standardError.isEmpty, "--quiet prints nothing on success: \(trusted.transcript)")
        #expect(F.sha256(fileAt: directory.file("b.bin")) == F.sha256(content))

        let insecure = try CLIProcess(["download", "--state-dir", state, "--insecure", "-o", "c.bin", url], directory: directory.url)
        #expect(await insecure.waitForExit() == 0, "\(insecure.transcript)")
        #expect(insecure.standardError.contains("warning: --insecure"), "\(insecure.transcript)")
    }

    @Test func headersAreSentAndHostileOnesRefused() async throws {
        let content = Data("header check\n".utf8)
        let server = try DownloadTestHTTPServer { _, _ in .init(status: 200, body: content) }
        defer { server.stop() }
        let directory = try F.Directory()
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-H", "X-Probe: one",
                                  "--header", "Authorization: Bearer t0ken", "--limit-rate", "1m", "-o", "h.txt",
                                  "http://127.0.0.1:\(server.port)/h.txt"], directory: directory.url)
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        let request = try #require(server.requests.first)
        #expect(request.headers["x-probe"] == "one")
        #expect(request.headers["authorization"] == "Bearer t0ken")
        #expect(request.headers["accept-encoding"] == "identity")

        for hostile in ["X-A: b\r\nX-Injected: 1", "Range: bytes=0-", "NoColon", "Bad Name: x", "X: a\u{1}b", "X: a\u{7F}"] {
            let refused = try CLIProcess(["download", "-H", hostile, "http://127.0.0.1:\(server.port)/h.txt"], directory: directory.url)
            #expect(await refused.waitForExit() == 64, "\(hostile): \(refused.transcript)")
        }
        #expect(server.requests.count == 1, "no hostile header reached the server")
    }

    @Test func proxiesAreUsedAndADeadOneIsNamed() async throws {
        let content = Data("through the proxy\n".utf8)
        // Plays an HTTP proxy: requests arrive in absolute form and are answered here, so no
        // traffic leaves the machine.
        let proxy = try DownloadTestHTTPServer { _, _ in .init(status: 200, body: content) }
        defer { proxy.stop() }
        let directory = try F.Directory()
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", "p.txt",
                                  "http://files.example.invalid/p.txt"], directory: directory.url,
                                 environment: ["http_proxy": "http://127.0.0.1:\(proxy.port)"])
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(proxy.requests.first?.path == "http://files.example.invalid/p.txt")
        #expect(try Data(contentsOf: directory.file("p.txt")) == content)

        let deadPort = try F.freePort()
        let dead = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "-o", "q.txt",
                                   "--proxy", "http://user:secret@127.0.0.1:\(deadPort)", "http://files.example.invalid/q.txt"],
                                  directory: directory.url)
        #expect(await dead.waitForEvent { event in
            ((event["error"] as? [String: Any])?["message"] as? String)?.contains("proxy http://user:***@127.0.0.1:\(deadPort)") == true
        }, "\(dead.transcript)")
        #expect(!dead.lines.joined().contains("secret"))
        dead.signal(SIGINT)
        #expect(await dead.waitForExit() == 130)
    }

    @Test func dashOWritesTheVerifiedFileToStandardOutput() async throws {
        let nginx = try DownloadTestNginx()
        defer { nginx.stop() }
        let directory = try F.Directory()
        let text = (0..<2000).map { "line \($0)" }.joined(separator: "\n") + "\n"
        try nginx.serve(Data(text.utf8), at: "t.txt")
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", "-",
                                  "--sha256", F.sha256(Data(text.utf8)), nginx.url("t.txt").absoluteString], directory: directory.url)
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(cli.lines.joined(separator: "\n") + "\n" == text)
        #expect(!FileManager.default.fileExists(atPath: directory.file("-").path))
        #expect(Self.jobDirectories(directory).isEmpty)
        let leftovers = (try? FileManager.default.subpathsOfDirectory(atPath: directory.file("state/stdout").path)) ?? []
        #expect(leftovers.isEmpty, "\(leftovers)")
    }
}
