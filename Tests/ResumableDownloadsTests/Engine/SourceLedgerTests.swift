import Foundation
import Testing
@testable import ResumableDownloads

/// Which mirror is blamed for bytes that proved wrong, and what is fetched again (issue 34).
@Suite struct SourceLedgerTests {
    static let hash = String(repeating: "ab", count: 32)
    static let urls = [URL(string: "http://a/f")!, URL(string: "http://b/f")!, URL(string: "http://c/f")!]

    @Test(arguments: [([], []), ([2], [2]), ([0], [0]), ([0, 2], [2]), ([1, 2], [2])] as [([Int], [Int])])
    func aFailingPieceBlamesItsWriter(writers: [Int], blamed: [Int]) {
        #expect(SourceVerdict.blameForPiece(writers: writers) == blamed)
    }

    @Test func aSeamBlamesTheUncorroboratedSource() {
        #expect(SourceVerdict.blameForSeam(sources: [1, 1, nil], corroborated: [0]) == nil, "one source on both sides")
        #expect(SourceVerdict.blameForSeam(sources: [nil, 0, 2], corroborated: [0]) == 2)
        #expect(SourceVerdict.blameForSeam(sources: [nil, 2, 0], corroborated: [0]) == 2)
        #expect(SourceVerdict.blameForSeam(sources: [nil, 1, 2], corroborated: [0, 2]) == 1, "2 agreed with the first source")
        #expect(SourceVerdict.blameForSeam(sources: [nil, 1, 2], corroborated: [0]) == 2, "neither: the URL given last")
        #expect(SourceVerdict.blameForSeam(sources: [nil, 0, 1], corroborated: [0, 1]) == nil, "both corroborated")
        #expect(SourceVerdict.blameForSeam(sources: [nil, 0, 1], corroborated: [0, 1], isHashGuarded: true) == 1,
                "both corroborated, a SHA-256 judges: the URL given last, not the file, is fetched again")
        #expect(SourceVerdict.blameForSeam(sources: [2, 2, nil], corroborated: [0], isHashGuarded: true) == nil,
                "one source on both sides: its server serves two versions")
    }

    @Test func agreementSpreadsFromTheFirstSource() {
        let ledger = SourceLedger(urls: Self.urls, pieces: nil)
        ledger.noteAgreement([1, 2])
        #expect(ledger.corroborated == [0], "two mirrors agreeing prove nothing")
        ledger.noteAgreement([0, 2])
        ledger.noteAgreement([2, 1])
        #expect(ledger.corroborated == [0, 1, 2])
    }

    @Test func eachMirrorKeepsTheValidatorOfItsFirstAnswer() {
        let ledger = SourceLedger(urls: Self.urls, pieces: nil)
        #expect(ledger.bindValidator(nil, of: 1) == nil, "a mirror that sent none is held to none")
        #expect(ledger.bindValidator("\"m1-a\"", of: 1) == "\"m1-a\"")
        #expect(ledger.bindValidator("\"m1-b\"", of: 1) == "\"m1-a\"", "a later answer does not rebind it")
        #expect(ledger.bindValidator("\"m2\"", of: 2) == "\"m2\"", "mirrors need not agree with each other")
        #expect(ledger.validator(of: 1) == "\"m1-a\"" && ledger.validator(of: 0) == nil)
    }

    @Test func droppingForgetsTheSourcesBytesButVerifiedPieces() throws {
        let pieces = try #require(PieceHashes(length: 100, sha256: Array(repeating: Self.hash, count: 4), fileLength: 350))
        let ledger = SourceLedger(urls: Self.urls, pieces: pieces)
        ledger.recordWrite(source: 0, range: 0..<100)
        ledger.recordWrite(source: 1, range: 100..<300)
        ledger.markVerified(piece: 1)
        #expect(ledger.writers(of: 150..<250) == [1] && ledger.writer(at: 50) == 0)
        #expect(ledger.drop(1, reason: "bad"))
        #expect(ledger.takeForgets() == RangeSet(200..<300), "piece 1 was verified: kept")
        #expect(ledger.liveSources == [0, 2] && ledger.isDropped(1))
        #expect(!ledger.drop(1, reason: "again"))
        #expect(ledger.drop(2, reason: "bad, kept writes", keepingWrites: true))
        #expect(!ledger.drop(0, reason: "the last one stays"))
        #expect(ledger.liveSources == [0])
    }

    @Test func pieceHashesMustCoverTheFile() {
        #expect(PieceHashes(length: 100, sha256: Array(repeating: Self.hash, count: 4), fileLength: 350) != nil)
        #expect(PieceHashes(length: 100, sha256: Array(repeating: Self.hash, count: 3), fileLength: 350) == nil)
        #expect(PieceHashes(length: 0, sha256: [Self.hash], fileLength: 0) == nil)
        #expect(PieceHashes(length: 100, sha256: ["zz"], fileLength: 10) == nil)
        let decoded = try? JSONDecoder().decode(PieceHashes.self, from: Data(#"{"length":1,"sha256":[],"fileLength":5}"#.utf8))
        #expect(decoded == nil, "a hostile value from the control socket is refused when decoded")
    }
}
