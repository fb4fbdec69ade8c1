import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 34 item 2: a link that expires mid-download (a presigned URL, a CDN token) strands no
/// bytes. The built `reachability download` against loopback nginx, where one location starts
/// answering 403 once a marker file exists and another location serves the same file (a hard
/// link: same inode, so the same ETag and Last-Modified, as a re-signed URL for the same object).
@Suite("reachability download: expired link replaced by a new URL (loopback nginx)", .serialized,
       .needsNginx)
struct DownloadExpiredLinkTests: DownloadScenarios {

    /// nginx with `/expiring/` (rate-limited, 403 once `www/expired` exists) and `/slow/`.
    static func nginx() throws -> DownloadTestNginx {
        try DownloadTestNginx(slowRate: "2m", accessLog: true, locations: """
            location /expiring/ { limit_rate 2m; if (-f $document_root/expired) { return 403; } }
            """)
    }

    @Test func expiredLinkKeepsTheBytesAndANewURLContinuesThem() async throws {
        let nginx = try Self.nginx()
        defer { nginx.stop() }
        let directory = try F.Directory()
        let content = F.randomData(count: 16 << 20, seed: 34)   // 8 s at 2 MB/s: interrupted mid-transfer
        try nginx.serve(content, at: "expiring/movie.bin")
        try FileManager.default.createDirectory(at: nginx.root.appendingPathComponent("slow"), withIntermediateDirectories: true)
        try FileManager.default.linkItem(at: nginx.root.appendingPathComponent("expiring/movie.bin"),
                                         to: nginx.root.appendingPathComponent("slow/movie.bin"))
        let state = directory.file("state").path
        let expiring = nginx.url("expiring/movie.bin").absoluteString
        let renewed = nginx.url("slow/movie.bin").absoluteString

        // Some bytes, then paused (the connection ends, as a dropped network would end it).
        // One connection: the figure is what the link change costs, not the segment ramp's overlaps.
        let first = try CLIProcess(["download", "--json", "--state-dir", state, "-o", "movie.bin", "--connections", "1", expiring],
                                   directory: directory.url)
        #expect(await first.waitForBytes(1 << 20), "\(first.transcript)")
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")
        let pausedAt = try #require(first.events.last { $0["event"] as? String == "paused" }?["bytes"] as? Int)

        // The link expires: the resume gets 403, exit 1 (a 4xx), the bytes and record stay.
        try Data().write(to: nginx.root.appendingPathComponent("expired"))
        let expired = try CLIProcess(["download", "--state-dir", state, "-o", "movie.bin", expiring], directory: directory.url)
        #expect(await expired.waitForExit() == 1, "\(expired.transcript)")
        #expect(expired.standardError.contains("the link expired (HTTP 403): rerun with the new URL and the same -o to continue"),
                "\(expired.transcript)")
        let part = directory.file("movie.bin.part")
        let kept = try #require(try FileManager.default.attributesOfItem(atPath: part.path)[.size] as? Int)
        #expect(kept >= pausedAt)

        // The new URL with the same -o continues at the stored offset: no restart, right bytes.
        let second = try CLIProcess(["download", "--json", "--state-dir", state, "-o", "movie.bin", "--sha256", F.sha256(content),
                                     "--connections", "1", renewed], directory: directory.url)
        #expect(await second.waitForExit() == 0, "\(second.transcript)")
        let resumed = try #require(second.events.first { $0["event"] as? String == "resumed" }, "\(second.transcript)")
        #expect((resumed["offset"] as? Int ?? 0) >= pausedAt - (1 << 20))
        #expect(second.count("started") == 0 && second.count("restarted") == 0, "\(second.transcript)")
        #expect(F.sha256(fileAt: directory.file("movie.bin")) == F.sha256(content))
        #expect(!FileManager.default.fileExists(atPath: part.path))

        // Bytes the server sent twice (nginx's access log, `$body_bytes_sent`): at most 1 MiB.
        #expect(Self.bytesSentTwice(nginx.loggedRequests) <= 1 << 20, "\(nginx.loggedRequests)")
    }

    /// Bytes of the file sent more than once, from log lines `STATUS BYTES RANGE` (the
    /// `requests` format): each 200/206 covers [range start, start + bytes); the rest of a
    /// response (a 403's page) is not the file.
    static func bytesSentTwice(_ lines: [String]) -> Int {
        var intervals: [(Int, Int)] = []
        for line in lines {
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count >= 3, fields[0] == "200" || fields[0] == "206", let sent = Int(fields[1]) else { continue }
            let start = fields[0] == "200" ? 0 : Int(fields[2].dropFirst("bytes=".count).prefix { $0 != "-" }) ?? 0
            intervals.append((start, start + sent))
        }
        let boundaries = intervals.flatMap { [$0.0, $0.1] }.sorted()
        // Sweep the boundaries: a stretch covered by k > 1 responses was sent k - 1 times too many.
        var twice = 0
        for (low, high) in zip(boundaries, boundaries.dropFirst()) where high > low {
            let covering = intervals.filter { $0.0 <= low && $0.1 >= high }.count
            twice += max(0, covering - 1) * (high - low)
        }
        return twice
    }

    @Test func aNewURLForADifferentFileStartsOverWithAReason() async throws {
        let nginx = try Self.nginx()
        defer { nginx.stop() }
        let directory = try F.Directory()
        let content = F.randomData(count: 16 << 20, seed: 35)
        let other = F.randomData(count: 16 << 20, seed: 36)   // same length, another file (another ETag)
        try nginx.serve(content, at: "expiring/movie.bin")
        try nginx.serve(other, at: "slow/movie.bin")
        let state = directory.file("state").path

        let first = try CLIProcess(["download", "--json", "--state-dir", state, "-o", "movie.bin",
                                    nginx.url("expiring/movie.bin").absoluteString], directory: directory.url)
        #expect(await first.waitForBytes(1 << 20), "\(first.transcript)")
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")

        let second = try CLIProcess(["download", "--json", "--state-dir", state, "-o", "movie.bin",
                                     nginx.url("slow/movie.bin").absoluteString], directory: directory.url)
        #expect(await second.waitForExit() == 0, "\(second.transcript)")
        let restarted = try #require(second.events.first { $0["event"] as? String == "restarted" }, "\(second.transcript)")
        #expect(!(restarted["reason"] as? String ?? "").isEmpty, "\(restarted)")
        #expect(F.sha256(fileAt: directory.file("movie.bin")) == F.sha256(other))
    }
}
