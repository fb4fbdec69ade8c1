import Foundation
import Testing
import TestSupport
@testable import ResumableDownloads

/// Issue 34, Metalink: `reachability download --metalink F.meta4` against two nginx servers on
/// loopback, the first by priority serving different bytes of the same length (and the same
/// ETag). With a whole-file SHA-256 the engine's check catches it; with SHA-256 pieces only, the
/// piece check does, naming the piece and the source. Either way the file is right and the bad
/// mirror is named in a sourceDropped event (the sources are used at once, pieces checked as
/// they land).
@Suite("reachability download --metalink (two loopback nginx)", .serialized,
       .needsNginx)
struct DownloadMetalinkTests: DownloadScenarios {

    static func metalink(name: String, content: Data, wholeHash: Bool, urls: [(String, Int)],
                         pieceLength: Int = 256 << 10) -> String {
        let pieces = stride(from: 0, to: content.count, by: pieceLength).map {
            "<hash>\(F.sha256(content.subdata(in: $0..<min($0 + pieceLength, content.count))))</hash>"
        }.joined()
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="\(name)">
                <size>\(content.count)</size>
                \(wholeHash ? "<hash type=\"sha-256\">\(F.sha256(content))</hash>" : "")
                <pieces length="\(pieceLength)" type="sha-256">\(pieces)</pieces>
                \(urls.map { "<url priority=\"\($0.1)\">\($0.0)</url>" }.joined(separator: "\n"))
              </file>
            </metalink>
            """
    }

    @Test(arguments: [true, false])
    func aBadMirrorFirstIsNamedAndTheFileIsRight(wholeHash: Bool) async throws {
        let bad = try DownloadTestNginx(), good = try DownloadTestNginx()
        defer { bad.stop(); good.stop() }
        let directory = try F.Directory("metalink")
        let content = F.randomData(count: 2 << 20, seed: 3411)
        var other = content
        other[1 << 20] ^= 0xFF   // one byte in piece 4 differs
        try bad.serve(other, at: "f.bin")
        try good.serve(content, at: "f.bin")
        let stamp = Date(timeIntervalSince1970: 1_700_000_000)
        for server in [bad, good] {
            try FileManager.default.setAttributes([.modificationDate: stamp], ofItemAtPath: server.root.appendingPathComponent("f.bin").path)
        }
        let badURL = bad.url("f.bin").absoluteString, goodURL = good.url("f.bin").absoluteString
        try Data(Self.metalink(name: "f.bin", content: content, wholeHash: wholeHash, urls: [(goodURL, 2), (badURL, 1)]).utf8)
            .write(to: directory.file("f.meta4"))
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--metalink", "f.meta4"],
                                 directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(30)) == 0, "\(run.transcript)")
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content), "the bad mirror's bytes never stay in the file")
        // Both sources are used at once (issue 34): the pieces are checked as they land, so the
        // bad one is dropped at its first bad piece, with or without a whole-file hash.
        let dropped = try #require(run.events.first { $0["event"] as? String == "sourceDropped" }, "\(run.transcript)")
        #expect(dropped["source"] as? String == badURL, "\(dropped)")
        let reason = dropped["reason"] as? String ?? ""
        #expect(reason.contains("piece 4 (bytes 1048576-1310719) failed its SHA-256"), "\(reason)")
        #expect(run.count("sourceChanged") == 0, "\(run.transcript)")
        #expect(run.count("completed") == 1 && run.count("failed") == 0, "\(run.transcript)")
        let problems = run.lines.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
    }

    /// Pieces only, and the one source fails them: exit 1, a `failed` event, no file left.
    @Test func aFailingPieceWithNoSourceLeftFailsAndLeavesNoFile() async throws {
        let bad = try DownloadTestNginx()
        defer { bad.stop() }
        let directory = try F.Directory("metalink")
        let content = F.randomData(count: 1 << 20, seed: 3412)
        var other = content
        other[5] ^= 0xFF
        try bad.serve(other, at: "f.bin")
        try Data(Self.metalink(name: "f.bin", content: content, wholeHash: false, urls: [(bad.url("f.bin").absoluteString, 1)]).utf8)
            .write(to: directory.file("f.meta4"))
        let run = try CLIProcess(["download", "--json", "--state-dir", directory.file("state").path, "--metalink", "f.meta4"],
                                 directory: directory.url)
        #expect(await run.waitForExit(timeout: .seconds(30)) == 1, "\(run.transcript)")
        #expect(run.count("failed") == 1 && run.count("completed") == 0, "\(run.transcript)")
        #expect(run.standardError.contains("piece 0 (bytes 0-262143) failed its SHA-256"), "\(run.transcript)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("f.bin").path), "a file failing a piece is not left")
    }

    @Test func aHostileMetalinkIsRefusedWithExit65() async throws {
        let directory = try F.Directory("metalink")
        try Data("<!DOCTYPE m [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><metalink/>".utf8).write(to: directory.file("bad.meta4"))
        let run = try CLIProcess(["download", "--metalink", "bad.meta4"], directory: directory.url)
        #expect(await run.waitForExit() == 65, "\(run.transcript)")
        #expect(run.standardError.contains("document type declaration"), "\(run.transcript)")
        let missing = try CLIProcess(["download", "--metalink", "missing.meta4"], directory: directory.url)
        #expect(await missing.waitForExit() == 66, "\(missing.transcript)")
    }
}
