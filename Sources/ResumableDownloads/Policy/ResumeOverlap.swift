/// How many bytes before a resume offset are fetched again and compared with the disk before a
/// byte is appended (the proof that the server still sends the version on disk). Pure.
///
/// 64 KiB by default. A server (or proxy, or mobile link) that ends every connection after a few
/// KiB would never get past a 64 KiB overlap: each resume would spend its whole connection on
/// bytes already stored. So after connections the server cut short, the overlap is a quarter of
/// the shortest of the last few (each such connection then stores three quarters of what it
/// delivers), never below 4 KiB: 4 KiB of random or compressed data match by chance with
/// probability 2^-32768, and a changed file that keeps its last 4 KiB before the seam is what a
/// 64 KiB overlap would also miss if it kept its last 64 KiB (docs/security.md says what this
/// guarantees). Connections shorter than 4 KiB cannot be resumed with that proof: the download
/// then makes no progress and fails on its failure budget, with the resume data kept.
struct ResumeOverlap: Sendable, Hashable {
    /// The overlap while connections last.
    static let maximum: Int64 = 64 << 10
    /// The floor that keeps the comparison a proof.
    static let minimum: Int64 = 4 << 10
    /// How many cut-short connections are remembered.
    static let memory = 4

    /// Body bytes (overlap included) of the last connections the server ended early.
    private var cutLengths: [Int64] = []

    init() {}

    /// A connection that got an answer ended; `cutShort` when the server ended it before the end
    /// of the entity (not a path change, pause or stall of ours), after `delivered` body bytes.
    mutating func connectionEnded(delivered: Int64, cutShort: Bool) {
        guard cutShort else { return }
        cutLengths.append(max(0, delivered))
        if cutLengths.count > Self.memory { cutLengths.removeFirst() }
    }

    /// The overlap for the next resume (at most the offset, which the executor applies).
    var bytes: Int64 {
        guard let shortest = cutLengths.min() else { return Self.maximum }
        return min(Self.maximum, max(Self.minimum, shortest / 4))
    }
}
