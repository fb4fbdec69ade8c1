import FoundationEssentials
import ReachabilityBase
import Synchronization

/// SHA-256 hashes of a file's consecutive pieces (a Metalink's `<pieces type="sha-256">`).
public struct PieceHashes: Sendable, Hashable, Codable {
    /// Bytes per piece (the last one may be shorter).
    public var length: Int64
    /// Lowercase hex digests, in file order.
    public var sha256: [String]
    /// The file's length.
    public var fileLength: Int64

    /// Pieces of `length` bytes for a file of `fileLength`; nil when they do not cover it exactly.
    public init?(length: Int64, sha256: [String], fileLength: Int64) {
        guard length > 0, fileLength >= 0, !sha256.isEmpty,
              Int64(sha256.count) == Self.pieceCount(length: length, fileLength: fileLength),
              sha256.allSatisfy({ $0.count == 64 && $0.allSatisfy(\.isHexDigit) }) else { return nil }
        self.length = length
        self.sha256 = sha256.map { $0.lowercased() }
        self.fileLength = fileLength
    }

    /// Pieces of `length` (> 0) bytes in a file of `fileLength` (>= 0) bytes, without the
    /// overflow `(fileLength + length - 1) / length` has for a hostile length near `Int64.max`.
    static func pieceCount(length: Int64, fileLength: Int64) -> Int64 {
        fileLength / length + (fileLength % length == 0 ? 0 : 1)
    }

    private enum CodingKeys: String, CodingKey { case length, sha256, fileLength }

    /// Decodes and checks hashes (a client's value: the same bounds as `init?`).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let value = PieceHashes(length: try container.decode(Int64.self, forKey: .length),
                                      sha256: try container.decode([String].self, forKey: .sha256),
                                      fileLength: try container.decode(Int64.self, forKey: .fileLength)) else {
            throw DecodingError.dataCorruptedError(forKey: .sha256, in: container,
                                                   debugDescription: "piece hashes that do not cover the file (64 hex digits each)")
        }
        self = value
    }

    /// The byte range of piece `index`.
    func range(of index: Int) -> Range<Int64> {
        let start = Int64(index) * length
        return start..<min(start + length, fileLength)
    }

    /// The pieces `range` touches.
    func indices(touching range: Range<Int64>) -> Range<Int> {
        guard !range.isEmpty else { return 0..<0 }
        return Int(range.lowerBound / length)..<min(sha256.count, Int((range.upperBound + length - 1) / length))
    }
}

/// Which source wrote which bytes, which sources are dropped and why, and which pieces are
/// verified, for one download fetched from several sources at once (issue 34). Shared by the
/// download's driver (which sources the next attempt may use, the bytes to forget before it)
/// and the engine thread (its segment group records writes and verdicts); the decisions are
/// `SourceVerdict`'s (pure).
final class SourceLedger: Sendable {
    /// Index 0 is the download's own URL; the others are its mirrors, in the order given.
    let urls: [URL]
    let pieces: PieceHashes?

    private struct State {
        var dropped: [Int: String] = [:]
        var writers: [Int: RangeSet<Int64>] = [:]
        var verified = Set<Int>()
        var toForget = RangeSet<Int64>()
        var pieceFailures = 0
        /// Sources whose bytes agreed across a seam with the first source's, or with one that did.
        var corroborated: Set<Int> = [0]
        /// Each mirror's own strong validator, bound by its first answer (mirrors proven by a
        /// SHA-256 need not agree with each other, but each must keep its own).
        var validators: [Int: String] = [:]
    }
    private let state = Mutex(State())

    init(urls: [URL], pieces: PieceHashes?) {
        self.urls = urls
        self.pieces = pieces
    }

    /// The sources not dropped, in order.
    var liveSources: [Int] { state.withLock { state in urls.indices.filter { state.dropped[$0] == nil } } }

    func isDropped(_ source: Int) -> Bool { state.withLock { $0.dropped[source] != nil } }

    /// `source` stored `range` (this run).
    func recordWrite(source: Int, range: Range<Int64>) {
        guard !range.isEmpty else { return }
        state.withLock { $0.writers[source, default: RangeSet()].insert(contentsOf: range) }
    }

    /// The sources that stored bytes of `range`, in order.
    func writers(of range: Range<Int64>) -> [Int] {
        state.withLock { state in
            state.writers.keys.sorted().filter { !state.writers[$0]!.isDisjoint(RangeSet(range)) }
        }
    }

    /// The source that stored the byte at `offset`, when known.
    func writer(at offset: Int64) -> Int? {
        guard offset >= 0 else { return nil }
        return writers(of: offset..<offset + 1).first
    }

    /// Two sources' bytes agreed across a seam: one that agrees with a corroborated source is
    /// corroborated too.
    func noteAgreement(_ sources: [Int?]) {
        let known = Set(sources.compactMap { $0 })
        guard known.count > 1 else { return }
        state.withLock { state in
            if !state.corroborated.isDisjoint(with: known) { state.corroborated.formUnion(known) }
        }
    }

    /// Binds `source`'s strong validator on its first answer; the validator its requests carry
    /// from then on (nil when it sent none).
    @discardableResult
    func bindValidator(_ validator: String?, of source: Int) -> String? {
        state.withLock { state in
            if state.validators[source] == nil, let validator { state.validators[source] = validator }
            return state.validators[source]
        }
    }

    /// The validator `source` answered with first, when it sent one.
    func validator(of source: Int) -> String? { state.withLock { $0.validators[source] } }

    /// The sources corroborated so far.
    var corroborated: Set<Int> { state.withLock { $0.corroborated.subtracting($0.dropped.keys) } }

    /// Counts a piece that failed with nobody left to blame; returns how many did.
    func notePieceFailure() -> Int { state.withLock { $0.pieceFailures += 1; return $0.pieceFailures } }

    func isVerified(piece: Int) -> Bool { state.withLock { $0.verified.contains(piece) } }
    func markVerified(piece: Int) { _ = state.withLock { $0.verified.insert(piece) } }
    var verifiedCount: Int { state.withLock { $0.verified.count } }

    /// Drops `source`: its ranges not covered by a verified piece are to be fetched again (with
    /// `extra`), unless `keepingWrites` (bytes it stored under the first source's validator);
    /// false when it was the last one left or already dropped.
    func drop(_ source: Int, reason: String, forgetting extra: RangeSet<Int64> = RangeSet(), keepingWrites: Bool = false) -> Bool {
        state.withLock { state in
            guard state.dropped[source] == nil, urls.indices.contains(where: { $0 != source && state.dropped[$0] == nil }) else { return false }
            state.dropped[source] = reason
            let writes = state.writers.removeValue(forKey: source) ?? RangeSet()
            var forget = keepingWrites ? RangeSet() : writes
            forget.formUnion(extra)
            if let pieces {
                for index in state.verified { forget.remove(contentsOf: pieces.range(of: index)) }
            }
            state.toForget.formUnion(forget)
            return true
        }
    }

    /// Bytes to fetch again (not a dropped source's to blame: unknown writers of a bad piece).
    func forget(_ range: Range<Int64>) {
        state.withLock { state in
            state.toForget.insert(contentsOf: range)
            for key in state.writers.keys { state.writers[key]!.remove(contentsOf: range) }
        }
    }

    /// The bytes the driver removes from the partial file before the next attempt.
    func takeForgets() -> RangeSet<Int64> {
        state.withLock { state in
            defer { state.toForget = RangeSet() }
            return state.toForget
        }
    }
}

/// Which sources to blame for bytes that proved wrong (pure, tested without sockets).
enum SourceVerdict {
    /// The writers of a piece that failed its hash: with one writer, that one; with several (a
    /// piece longer than the split alignment), every one but the most trusted (the lowest
    /// index, the URL given first), unless it wrote alone: one piece cannot tell them apart,
    /// and the piece is fetched again either way.
    static func blameForPiece(writers: [Int]) -> [Int] {
        writers.count <= 1 ? writers : Array(writers.sorted().dropFirst())
    }

    /// The sources on the sides of a seam whose bytes differ: nothing to drop when one source
    /// wrote both (a server that serves other versions on other connections: the download's
    /// usual restart) or when every one of them is corroborated (agreed with the first source);
    /// else the least trusted: one not corroborated, the URL given last among those. When
    /// `isHashGuarded` (a SHA-256 will judge the file), sources that were all corroborated still
    /// cannot all be right: the URL given last is dropped and its bytes fetched again, cheaper
    /// than restarting the file. A whole-file SHA-256 is the judge at the end
    /// (docs/download-command.md, "Mirrors at once").
    static func blameForSeam(sources: [Int?], corroborated: Set<Int>, isHashGuarded: Bool = false) -> Int? {
        let known = Set(sources.compactMap { $0 })
        guard known.count > 1 else { return nil }
        return known.subtracting(corroborated).max() ?? (isHashGuarded ? known.max() : nil)
    }
}
