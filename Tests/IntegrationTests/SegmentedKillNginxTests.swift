import Foundation
import Glibc
import Synchronization
import ReachabilityBase
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 30: `reachability download` with the default connections against nginx capping each
/// connection (`limit_rate`), SIGKILLed while several connections deliver, then the same command
/// again. What was sent twice is counted from nginx's access log (`$body_bytes_sent` of every
/// request, the killed ones included), not from the file (a segmented file is sparse).
@Suite("Segmented kills against nginx", .serialized, .needsNginx)
struct SegmentedKillNginxTests: DownloadScenarios {

    /// Every byte on disk at the kill is kept (the journaling rule, docs/segments.md, "Crash
    /// safety"): the next run fetches none of them again but the bytes it compares, and every
    /// file is right. What nginx sent twice in all (socket buffers at the kill included) is in
    /// the message; `bench/segment_bench.py --scenarios kills` measures it. Seeded kill points.
    @Test func aKillWithTheDefaultConnectionsRefetchesNothingOnDisk() async throws {
        let content = F.randomData(count: 24 << 20, seed: 3001)
        var generator = SplitMix(seed: 30)
        for trial in 0..<3 {
            let nginx = try DownloadTestNginx(slowRate: "2m", accessLog: true)
            defer { nginx.stop() }
            try nginx.serve(content, at: "slow/file.bin")
            let directory = try F.Directory("segkillnginx")
            let arguments = ["download", "--json", "--state-dir", directory.file("state").path,
                             "-o", directory.file("out.bin").path, nginx.url("slow/file.bin").absoluteString]
            let killAt = (8 << 20) + Int(generator.next() % UInt64(8 << 20))
            let first = try CLIProcess(arguments, directory: directory.url)
            // Killed once the partial file holds `killAt` bytes (its allocated blocks: progress
            // events are seconds apart, and a segmented file's size says nothing).
            let part = directory.file("out.bin.part").path
            let reached = await F.wait(timeout: .seconds(30)) { Self.allocatedBytes(part) >= killAt }
            let connections = first.events.compactMap { $0["connections"] as? Int }.last ?? 1
            first.kill()   // SIGKILL
            #expect(reached, "trial \(trial): never reached \(killAt) bytes\n\(first.transcript)")
            guard reached else { continue }
            #expect(await F.wait(timeout: .seconds(10)) { Self.openConnections(port: nginx.port) == 0 }, "trial \(trial)")
            let killed = nginx.loggedRequests
            let onDisk = Self.storedRanges(of: part, matching: content)
            let second = try CLIProcess(arguments, directory: directory.url)
            #expect(await second.waitForExit() == 0, "trial \(trial): \(second.transcript)")
            #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(content), "trial \(trial)")
            // nginx logs a request once it is done with it: wait until no connection to it is open.
            #expect(await F.wait(timeout: .seconds(10)) { Self.openConnections(port: nginx.port) == 0 }, "trial \(trial)")
            let all = nginx.loggedRequests
            let before = Self.coverage(killed)
            let after = Self.coverage(Array(all.dropFirst(killed.count)))
            // What the journal answers for: bytes that reached the file before the kill are not
            // fetched again, but for the bytes compared around each range (16 KiB before the
            // first request, a 4 KiB seam before and after each other; a seam check's 8 KiB),
            // and the one chunk (of the connections open) the kill may catch between its write
            // and its journal entry. With 16 KiB seams and 64 KiB first this failed (issue 30).
            let rerun = Array(all.dropFirst(killed.count))
            let again = Self.count(onDisk.intersection(RangeSet(Self.coverage(rerun))))
            let rules = SegmentPlanner.Configuration(maximumConnections: 6)
            let overlaps = Int(rules.firstOverlap + 2 * rules.seamOverlap * Int64(rerun.count))
                + SegmentJournalRule.forConnections(connections).bytes
            // Sent twice in all: what the killed run was sent that the next run was sent again,
            // bytes in the socket buffers at the kill included (and bytes one run fetched twice,
            // such as a tail piece two connections fetched, beside it).
            let twice = Self.count(RangeSet(before).intersection(RangeSet(after)))
            let total = Self.count(before) + Self.count(after) - content.count
            let story = "trial \(trial): \(again) bytes on disk at the kill fetched again, \(twice) bytes sent again after the "
                + "kill (\(total) sent twice in all) with \(connections) connections open at the kill; killed run: \(killed); "
                + "next run: \(rerun)"
            #expect(again <= overlaps, "\(story)")
            #expect(twice <= 8 << 20, "\(story)")
        }
    }

    /// What a kill or a server reset throws away on a connection is what the server had in
    /// flight: at most the TCP window, which the kernel's autotuning grew to 1.4 MB per
    /// connection against nginx's `limit_rate` bursts. Each connection to a server seen capping
    /// each connection gets a receive buffer of its cap's 40 ms instead
    /// (`SegmentPlanner.receiveBuffer`): at 2 MB/s about 84 kB, which the kernel doubles (`rb` in
    /// `ss -m`). Without it the sockets here read rb 0.4-1.7 MB.
    @Test func cappedConnectionsKeepASmallReceiveWindow() async throws {
        let content = F.randomData(count: 64 << 20, seed: 3002)
        let nginx = try DownloadTestNginx(slowRate: "2m", accessLog: true)
        defer { nginx.stop() }
        try nginx.serve(content, at: "slow/file.bin")
        let directory = try F.Directory("segrcvbuf")
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path,
                                  "-o", directory.file("out.bin").path, nginx.url("slow/file.bin").absoluteString],
                                 directory: directory.url)
        defer { run.kill() }
        // Past the test connection (the default goes 1, 2, then 6 once the cap showed).
        let grown = await F.wait(timeout: .seconds(30)) { (run.events.compactMap { $0["connections"] as? Int }.last ?? 1) >= 3 }
        #expect(grown, "\(run.transcript)")
        // 2 x (2 MB/s x 40 ms) is 168 kB; a cap measured a little high gets somewhat more.
        // Autotuned, they were 0.4-1.7 MB here. Set within a tick once the oldest connection
        // delivered for 2 s, on each connection made after that: the first connection, opened
        // before any cap could be seen, keeps the kernel's autotuning (SegmentPlanner's rule; CI
        // at dcc5203 read [1552026, 165132, 157254] when it was still open), so one may be large.
        let seen = Mutex<[Int]>([])
        let small = await F.wait(timeout: .seconds(8)) {
            let buffers = Self.receiveBuffers(toPort: nginx.port)
            if !buffers.isEmpty { seen.withLock { $0 = buffers } }
            return buffers.count >= 3 && buffers.sorted().dropLast().allSatisfy { $0 <= 2 * 120_000 }
        }
        #expect(small, "\(seen.withLock { $0 })")
        #expect(await run.waitForExit() == 0, "\(run.transcript)")
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(content))
    }

    /// The receive buffers (`rb` of `ss -m`, what the kernel allows) of the established TCP
    /// connections to `port`.
    static func receiveBuffers(toPort port: UInt16) -> [Int] {
        let sockets = (try? ChildProcess.run("ss", ["-Htmn", "state", "established", "dport", "=", ":\(port)"]))?.standardOutput ?? ""
        return sockets.split(separator: "\n").compactMap { line -> Int? in
            guard let field = line.split(separator: ",").first(where: { $0.hasPrefix("rb") }) else { return nil }
            return Int(field.dropFirst(2))
        }
    }

    /// The body bytes nginx logged as sent (`status bytes range` lines), by offset; repeated
    /// bytes counted once per line in `count`.
    static func coverage(_ lines: [String]) -> [Range<Int>] {
        let number = ByteCount(0...(1 << 40))
        return lines.compactMap { line -> Range<Int>? in
            let fields = line.split(separator: " ")
            guard fields.count >= 2, let sent = number.value(from: String(fields[1])) else { return nil }
            var start: Int64 = 0
            if fields.count >= 3, fields[2].hasPrefix("bytes="),
               let first = fields[2].dropFirst(6).split(separator: "-", omittingEmptySubsequences: false).first {
                guard let value = number.value(from: String(first)) else { return nil }
                start = value
            }
            return Int(start)..<Int(start + sent)
        }
    }

    /// Bytes of `ranges`, each counted as often as it appears.
    static func count(_ ranges: [Range<Int>]) -> Int { ranges.reduce(0) { $0 + $1.count } }

    /// Bytes of `ranges` (overlaps counted once).
    static func count(_ ranges: RangeSet<Int>) -> Int { ranges.ranges.reduce(0) { $0 + $1.count } }

    /// The bytes of the file at `path` that hold `content`'s, in 4 KiB granules (a granule of
    /// random content that is not on disk reads as zeros or is missing).
    static func storedRanges(of path: String, matching content: Data) -> RangeSet<Int> {
        guard let data = FileManager.default.contents(atPath: path) else { return RangeSet() }
        var stored = RangeSet<Int>()
        var offset = 0
        while offset < min(data.count, content.count) {
            let end = min(offset + 4_096, data.count, content.count)
            if data[offset..<end] == content[offset..<end] { stored.insert(contentsOf: offset..<end) }
            offset = end
        }
        return stored
    }

    /// Bytes the file system allocated to the file at `path` (0 when there is none).
    static func allocatedBytes(_ path: String) -> Int {
        var status = stat()
        guard stat(path, &status) == 0 else { return 0 }
        return Int(status.st_blocks) * 512
    }

    /// TCP connections to `port` nginx has not finished with (established, or closed by the
    /// client and not yet by nginx), from /proc/net/tcp.
    static func openConnections(port: UInt16) -> Int {
        let text = (try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8)) ?? ""
        let local = String(format: ":%04X", port)
        return text.split(separator: "\n").dropFirst().filter { line in
            let fields = line.split(separator: " ")
            guard fields.count > 3, fields[1].hasSuffix(local) else { return false }
            return fields[3] == "01" || fields[3] == "08"
        }.count
    }
}
