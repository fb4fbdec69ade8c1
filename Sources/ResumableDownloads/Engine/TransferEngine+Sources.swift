import FoundationEssentials
import ReachabilityBase

/// A segment group over several sources of one file (issue 34): which source stored which
/// bytes, pieces checked against their hashes as they land, and a source dropped when its bytes
/// prove wrong (its unverified bytes are fetched again in a new attempt at once) or when it does
/// not serve the file as the first source does (its connection ends; the others go on).
/// Engine thread only; the verdicts are `SourceVerdict`'s.
extension TransferEngine {
    /// Most bytes read back for piece checks per tick, so the engine thread keeps serving.
    static let pieceCheckBudget: Int64 = 16 << 20

    /// Notes the bytes `member` stored so far as its source's.
    func recordWrites(_ group: SegmentGroup, _ member: SegmentGroup.Member, _ transfer: Transfer) {
        guard let sources = group.segmentation.sources, member.seam == nil else { return }
        sources.recordWrite(source: member.path.source, range: member.start..<max(member.start, transfer.storedUpTo))
    }

    /// Notes what every running member stored so far.
    func recordWrites(_ group: SegmentGroup) {
        for member in group.members.values {
            if let transfer = transfers[member.engineID] { recordWrites(group, member, transfer) }
        }
    }

    /// Checks the pieces whose bytes all reached the file; finishes a completed group once every
    /// piece passed. A piece that fails drops its source and starts a new attempt.
    func checkPieces(_ group: SegmentGroup) {
        guard let sources = group.segmentation.sources, let pieces = sources.pieces, !group.isFinishing else { return }
        var budget = Self.pieceCheckBudget
        for index in pieces.sha256.indices where !sources.isVerified(piece: index) {
            let range = pieces.range(of: index)
            guard group.file.isWritten(range) else { continue }
            if budget <= 0 { return }
            budget -= Int64(range.count)
            guard let digest = group.file.sha256(of: range) else { continue }
            if digest == pieces.sha256[index] {
                sources.markVerified(piece: index)
                continue
            }
            let writers = sources.writers(of: range)
            let blamed = SourceVerdict.blameForPiece(writers: writers)
            let reason = "piece \(index) (bytes \(range.lowerBound)-\(range.upperBound - 1)) failed its SHA-256"
            var dropped = false
            for source in blamed where sources.drop(source, reason: "its bytes failed a piece hash: \(reason)", forgetting: RangeSet(range)) {
                dropped = true
                group.callbacks.events(.sourceDropped(sources.urls[source], reason: "its bytes failed a piece hash: \(reason)"))
            }
            sources.forget(range)
            if !dropped {
                if sources.notePieceFailure() > 2 {
                    finishGroup(group, .failed(.checksumMismatch.with(description: "\(reason) again, and no other source is left")))
                    return
                }
            }
            finishGroup(group, .aborted(.pathChanged))
            return
        }
        if let total = group.completedLength, sources.verifiedCount == pieces.sha256.count {
            finishGroup(group, .completed(totalLength: total))
        }
    }

    /// Bytes across a seam differ where two sources meet: the least trusted of them is dropped,
    /// its bytes forgotten, and a new attempt starts. False when one source wrote both sides
    /// (the planner's restart), or no other source is left.
    func sourceDisagrees(_ group: SegmentGroup, source: Int?, at offset: Int64) -> Bool {
        guard let sources = group.segmentation.sources else { return false }
        recordWrites(group)
        guard let blamed = SourceVerdict.blameForSeam(sources: [source, sources.writer(at: offset - 1), sources.writer(at: offset)],
                                                      corroborated: sources.corroborated,
                                                      isHashGuarded: group.segmentation.hasExpectedDigest || sources.pieces != nil)
        else { return false }
        let reason = "its bytes at offset \(offset) differ from another source's"
        guard sources.drop(blamed, reason: reason) else { return false }
        group.callbacks.events(.sourceDropped(sources.urls[blamed], reason: reason))
        finishGroup(group, .aborted(.pathChanged))
        return true
    }

    /// The bytes across a seam agreed: the sources on its sides (and the checker's) corroborate
    /// each other.
    func sourcesAgree(_ group: SegmentGroup, source: Int?, at offset: Int64) {
        guard let sources = group.segmentation.sources else { return }
        recordWrites(group)
        sources.noteAgreement([source, sources.writer(at: offset - 1), sources.writer(at: offset)])
    }

    /// A mirror that answers its range with something else (another validator or length, a 200,
    /// an HTTP error) is not serving this file: it is dropped and the others go on. True when
    /// it was.
    func refusesMirror(_ group: SegmentGroup, member: SegmentGroup.Member, ending: SegmentPlanner.Ending,
                       result: AttemptResult, forgettingWrites: Bool = false) -> Bool {
        guard let sources = group.segmentation.sources, member.seam == nil,
              ending == .rangeRefused || ending == .fatal,
              member.path.source != sources.liveSources.first else { return false }
        let reason = switch result {
        case .failed(let error): "it answered \(error.description)"
        case .restartFromZero(let why): "it does not serve the same file (\(why))"
        default: "it does not serve the range asked for as the first source does"
        }
        guard sources.drop(member.path.source, reason: reason, keepingWrites: !forgettingWrites) else { return false }
        group.callbacks.events(.sourceDropped(sources.urls[member.path.source], reason: reason))
        return true
    }
}
