import Foundation
import Testing
@testable import ReachabilityCLI
@testable import ResumableDownloads

/// `download --metalink` (issue 34): the strict XML reader and the Metalink 4 document read into
/// checked values, good and hostile files, and the command built from one.
@Suite("Metalink")
struct MetalinkTests {
    static let digest = String(repeating: "ab", count: 32)
    static let otherDigest = String(repeating: "cd", count: 32)

    static func document(file: String = "", name: String = "f.iso", namespace: String = Metalink.namespace) -> [UInt8] {
        Array("""
            <?xml version="1.0" encoding="UTF-8"?>
            <!-- a comment -->
            <metalink xmlns="\(namespace)">
              <published>2026-12-02T00:00:00Z</published>
              <file name="\(name)">
            \(file)
              </file>
            </metalink>
            """.utf8)
    }

    static let full = """
        <size>10</size>
        <hash type="sha-1">0000000000000000000000000000000000000000</hash>
        <hash type="SHA-256">\(digest.uppercased())</hash>
        <pieces length="4" type="sha-256"><hash>\(digest)</hash><hash>\(otherDigest)</hash><hash>\(digest)</hash></pieces>
        <url location="de" priority="2">http://b.example/f.iso</url>
        <url>https://c.example/f.iso?a=1&amp;b=2</url>
        <url priority="1" location="US">http://a.example/f.iso</url>
        <url priority="2">ftp://d.example/f.iso</url>
        <url priority="2">http://e.example/f.iso</url>
        <metaurl mediatype="torrent">http://a.example/f.torrent</metaurl>
        """

    @Test func readsAFullDocument() throws {
        let metalink = try Metalink(parsing: Self.document(file: Self.full))
        #expect(metalink.name == "f.iso")
        #expect(metalink.size == 10)
        #expect(metalink.sha256 == Self.digest)
        #expect(metalink.pieces == Metalink.Pieces(length: 4, sha256: [Self.digest, Self.otherDigest, Self.digest]))
        #expect(metalink.pieces?.range(of: 2, size: 10) == 8..<10)
        #expect(metalink.sources.map(\.url.absoluteString) == [
            "http://a.example/f.iso", "http://b.example/f.iso", "http://e.example/f.iso", "https://c.example/f.iso?a=1&b=2",
        ], "by priority, ties in document order, none last, ftp left out, &amp; decoded")
        #expect(metalink.sources.first?.location == "us")
    }

    /// `file:` and `magnet:` sources are skipped and said so, never read as paths; piece hashes
    /// without a `<size>` are ignored (and said so) when a whole-file SHA-256 checks the file.
    @Test func skipsOtherSchemesAndSizelessPiecesWithAWholeHashAndSaysSo() throws {
        let file = """
            <hash type="sha-256">\(Self.digest)</hash>
            <pieces length="4" type="sha-256"><hash>\(Self.digest)</hash></pieces>
            <url priority="1">file:///etc/passwd</url>
            <url priority="2">magnet:?xt=urn:btih:0000000000000000000000000000000000000000</url>
            <url priority="3">http://a.example/f.iso</url>
            <url priority="4">FILE:relative/path</url>
            """
        let metalink = try Metalink(parsing: Self.document(file: file))
        #expect(metalink.sources.map(\.url.absoluteString) == ["http://a.example/f.iso"])
        #expect(metalink.pieces == nil && metalink.sha256 == Self.digest && metalink.size == nil)
        #expect(metalink.notes == [
            "its sha-256 <pieces> are ignored: without a <size> they cannot be checked; the whole-file SHA-256 checks the file",
            "3 <url>s skipped, never fetched (file:, magnet:): only http and https are downloaded",
        ], "\(metalink.notes)")
        let command = try DownloadCommandTests.parse(["--metalink", "m"]).adopting(metalink, from: "m")
        #expect(command.metalinkPieces == nil && command.pieceHashes == nil && command.expectedSHA256 == Self.digest)
        #expect(try command.jobs(workingDirectory: "/w").first?.mirrors == [])
        #expect(try Metalink(parsing: Self.document(file: Self.full)).notes == ["1 <url> skipped, never fetched (ftp:): only http and https are downloaded"])
    }

    @Test(arguments: [("http://a", "http"), ("MAGNET:?x", "magnet"), ("file:///x", "file"), ("svn+ssh://h/x", "svn+ssh"),
                      ("//a/b", nil), ("1abc:x", nil), ("no colon", nil), ("a b:c", nil)] as [(String, String?)])
    func readsASchemeAsRFC3986Does(text: String, scheme: String?) {
        #expect(Metalink.scheme(of: text) == scheme)
    }

    @Test func acceptsAPrefixedNamespaceCDATAAndCharacterReferences() throws {
        let text = """
            <ml:metalink xmlns:ml="\(Metalink.namespace)"><ml:file name="caf&#xE9;&#46;iso"><ml:url><![CDATA[http://a.example/x]]></ml:url></ml:file></ml:metalink>
            """
        let metalink = try Metalink(parsing: Array(text.utf8))
        #expect(metalink.name == "café.iso")
        #expect(metalink.sources.map(\.url.absoluteString) == ["http://a.example/x"])
        #expect(metalink.size == nil && metalink.sha256 == nil && metalink.pieces == nil)
    }

    static let bomb = """
        <?xml version="1.0"?>
        <!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
        <metalink xmlns="\(Metalink.namespace)"><file name="&lol2;"><url>http://a.example/f</url></file></metalink>
        """
    static let external = """
        <!DOCTYPE m [<!ENTITY x SYSTEM "file:///etc/passwd">]>
        <metalink xmlns="\(Metalink.namespace)"><file name="&x;"><url>http://a.example/f</url></file></metalink>
        """

    @Test(arguments: [
        (bomb, "document type declaration"),
        (external, "document type declaration"),
        (String(repeating: "<a>", count: 40) + String(repeating: "</a>", count: 40), "nested deeper than 16"),
        (String(decoding: document(file: "<url>http://a.example/&lol;</url>"), as: UTF8.self), "the entity &lol;"),
        (String(decoding: document(file: "<url>http://a.example/f</url>", namespace: "http://www.metalinker.org/"), as: UTF8.self), "Metalink 3"),
        (String(decoding: document(file: "<url>http://a.example/f</url><size>-1</size>"), as: UTF8.self), "not a byte count"),
        (String(decoding: document(file: "<url>http://a.example/f</url><size>99999999999999999999999</size>"), as: UTF8.self), "not a byte count"),
        (String(decoding: document(file: "<url>http://a.example/f</url><size>2251799813685249</size>"), as: UTF8.self), "up to 1 PiB"),
        (String(decoding: document(file: "<url>http://a.example/f</url><hash type=\"sha-256\">zz</hash>"), as: UTF8.self), "not 64 hexadecimal"),
        (String(decoding: document(file: "<url>http://a.example/f</url><size>10</size><pieces length=\"4\" type=\"sha-256\"><hash>\(digest)</hash></pieces>"), as: UTF8.self), "a 10-byte file has 3 pieces"),
        (String(decoding: document(file: "<url>http://a.example/f</url><pieces length=\"0\" type=\"sha-256\"><hash>\(digest)</hash></pieces>"), as: UTF8.self), "length is not a byte count"),
        (String(decoding: document(file: "<url priority=\"0\">http://a.example/f</url>"), as: UTF8.self), "a number from 1 to 999999"),
        (String(decoding: document(file: "<url>ftp://a.example/f</url>"), as: UTF8.self), "no http or https"),
        (String(decoding: document(file: "<url>magnet:?xt=urn:btih:00</url><url>file:///etc/passwd</url>"), as: UTF8.self),
         "no http or https <url> (only those are supported; file:, magnet: skipped)"),
        (String(decoding: document(file: "<url>http://a.example/f</url><pieces length=\"4\" type=\"sha-256\"><hash>\(digest)</hash></pieces>"), as: UTF8.self),
         "cannot be checked without the file's <size>, and it gives no whole-file sha-256 <hash>"),
        (String(decoding: document(file: "<url>//a.example/f</url>"), as: UTF8.self), "is not a URL"),
        (String(decoding: document(file: ""), as: UTF8.self), "no <url>"),
        (String(decoding: document(file: "<url>http://a.example/f</url>"), as: UTF8.self) + "<metalink/>", "content after the root"),
        ("<metalink xmlns=\"\(Metalink.namespace)\"><file name=\"a\"><url>http://a.example/f</url></file>", "it ends inside"),
        ("<metalink xmlns=\"\(Metalink.namespace)\"><file name=\"a\" name=\"b\"/></metalink>", "appears twice"),
        ("<metalink xmlns=\"\(Metalink.namespace)\"><file name=\"a\"></metalink></file>", "does not match"),
        ("<metalink xmlns=\"\(Metalink.namespace)\"><file name=\"a\"><url>http://a.example/f</url></file><file name=\"b\"><url>http://a.example/g</url></file></metalink>", "2 files"),
        ("<feed/>", "root element is <feed>"),
        ("", "no root element"),
    ])
    func refusesHostileOrBrokenDocuments(text: String, message: String) {
        do {
            let metalink = try Metalink(parsing: Array(text.utf8))
            Issue.record("accepted: \(metalink)")
        } catch {
            #expect(error.description.contains(message), "\(error.description)")
        }
    }

    @Test func refusesHugeDocumentsAndManyElementsBeforeKeepingThem() {
        let huge = [UInt8](repeating: 0x20, count: (1 << 20) + 1)
        #expect(throws: MetalinkXMLReader.Failure(description: "it is larger than 1048576 bytes")) { try MetalinkXMLReader.parse(huge) }
        let many = Array(("<a>" + String(repeating: "<b/>", count: 50_001) + "</a>").utf8)
        #expect(throws: MetalinkXMLReader.Failure(description: "it has more than 50000 elements")) { try MetalinkXMLReader.parse(many) }
        #expect(throws: MetalinkXMLReader.Failure(description: "it is not UTF-8 text")) { try MetalinkXMLReader.parse([0x3C, 0xFF, 0x3E]) }
    }

    @Test(arguments: [("f.iso", true), ("../etc/passwd", false), ("dir/f.iso", false), ("..", false), (".", false), ("", false),
                      ("a\u{1B}[2Jb", false), (String(repeating: "x", count: 256), false), ("ok name (1).iso", true)])
    func onlyPlainNamesBecomeFileNames(name: String, isPlain: Bool) {
        #expect((Metalink.plainFileName(name) != nil) == isPlain)
    }

    @Test func theCommandTakesItsSourcesHashAndNameFromTheMetalink() throws {
        let metalink = try Metalink(parsing: Self.document(file: Self.full))
        let command = try DownloadCommandTests.parse(["--metalink", "f.meta4"]).adopting(metalink, from: "f.meta4")
        #expect(command.metalinkFile == "f.meta4")
        #expect(command.expectedSHA256 == Self.digest)
        #expect(command.expectedLength == 10)
        #expect(command.metalinkPieces == nil, "the whole-file SHA-256 covers the pieces")
        let jobs = try command.jobs(workingDirectory: "/w")
        #expect(jobs.map(\.destination.path) == ["/w/f.iso"])
        #expect(jobs.first?.url.absoluteString == "http://a.example/f.iso")
        #expect(jobs.first?.mirrors.map(\.absoluteString) == ["http://b.example/f.iso", "http://e.example/f.iso", "https://c.example/f.iso?a=1&b=2"])
    }

    @Test func piecesAreCheckedWithoutAWholeFileHashAndAPathNameNeedsOutput() throws {
        let file = "<size>10</size><pieces length=\"4\" type=\"sha-256\"><hash>\(Self.digest)</hash><hash>\(Self.digest)</hash><hash>\(Self.digest)</hash></pieces><url>http://a.example/f</url>"
        let metalink = try Metalink(parsing: Self.document(file: file, name: "../../etc/cron.d/x"))
        #expect(throws: CommandFailure.self) { try DownloadCommandTests.parse(["--metalink", "m"]).adopting(metalink, from: "m") }
        let command = try DownloadCommandTests.parse(["--metalink", "-o", "out.bin", "m"]).adopting(metalink, from: "m")
        #expect(try command.jobs(workingDirectory: "/w").map(\.destination.path) == ["/w/out.bin"])
        #expect(command.metalinkPieces?.pieces.sha256.count == 3)
        let clashing = try DownloadCommandTests.parse(["--metalink", "--sha256", Self.otherDigest, "m"])
        #expect(throws: CommandFailure.self) { try clashing.adopting(Metalink(parsing: Self.document(file: Self.full)), from: "m") }
    }

    @Test(arguments: [
        (["--metalink", "a.meta4", "b.meta4"], "takes one Metalink file"),
        (["--metalink", "http://[bad"], "expected a Metalink file or an http or https URL"),
        (["--metalink", "--mirror", "http://a.example/f", "a.meta4"], "cannot be added"),
    ])
    func refusesMetalinkUsageErrors(arguments: [String], message: String) {
        MirrorFailoverTests.expectUsageError(arguments, message)
    }

    @Test func aFailingPieceLeavesTheSourceForTheNextOnce() {
        let a = URL(string: "http://a.example/f")!, b = URL(string: "http://b.example/f")!
        var failover = MirrorFailover(primary: a, mirrors: [b])
        #expect(failover.leave() == b)
        #expect(failover.current == b)
        #expect(failover.leave() == nil, "no source left: the failure stands")
    }

    @Test func aPieceThatDiffersIsFoundAndNamed() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rch-metalink-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bytes = Array("0123456789".utf8)
        let file = directory.appendingPathComponent("f")
        try Data(bytes).write(to: file)
        let hashes = stride(from: 0, to: 10, by: 4).map { SHA256.hex(Array(bytes[$0..<min($0 + 4, 10)])) }
        let good = MetalinkPieceCheck(pieces: .init(length: 4, sha256: hashes), size: 10)
        #expect(try good.firstMismatch(inFileAt: file.path) == nil)
        var bad = good
        bad.pieces.sha256[1] = Self.digest
        #expect(try bad.firstMismatch(inFileAt: file.path) == .piece(1, 4..<8))
        #expect(try MetalinkPieceCheck(pieces: good.pieces, size: 11).firstMismatch(inFileAt: file.path) == .length(10, expected: 11))
        let job = DownloadCommand.Job(url: URL(string: "http://a.example/f")!, destination: file)
        #expect(bad.verdict(forCompleted: job)?.contains("piece 1 (bytes 4-7) failed its SHA-256") == true)
        #expect(!FileManager.default.fileExists(atPath: file.path), "a file failing a piece is deleted")
    }
}
