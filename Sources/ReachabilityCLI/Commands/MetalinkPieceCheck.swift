import FoundationEssentials
import LinuxSystem
import ResumableDownloads

/// The SHA-256 piece hashes of a Metalink, checked against a completed file. Used when the
/// Metalink gives no whole-file SHA-256 (with one, the engine's own check comes first and covers
/// every piece). The engine stores a file's bytes as they come, so the pieces are checked once
/// it is complete, before it is reported: a piece that fails names the source that sent it, and
/// the file is fetched again from the next source (one source at a time, as `MirrorFailover`:
/// the engine cannot refetch single ranges of a finished file).
struct MetalinkPieceCheck: Sendable, Equatable {
    var pieces: Metalink.Pieces
    /// The Metalink's `<size>`: a file of another length fails as a whole.
    var size: Int64

    /// What a check found wrong.
    enum Mismatch: Sendable, Equatable, CustomStringConvertible {
        /// The file's length and the Metalink's.
        case length(Int64, expected: Int64)
        /// A piece's index and byte range.
        case piece(Int, Range<Int64>)

        var description: String {
            switch self {
            case .length(let length, let expected): "it is \(length) bytes, not the Metalink's \(expected)"
            case .piece(let index, let range): "piece \(index) (bytes \(range.lowerBound)-\(range.upperBound - 1)) failed its SHA-256"
            }
        }
    }

    /// The first problem with the file at `path`; nil when every piece matches. Throws when it
    /// cannot be read.
    func firstMismatch(inFileAt path: String) throws -> Mismatch? {
        let file = try FileDescriptor.openForReading(path, followingLinks: false)
        defer { file.close() }
        let length = try file.status().size
        guard length == size else { return .length(length, expected: size) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        for (index, expected) in pieces.sha256.enumerated() {
            let range = pieces.range(of: index, size: size)
            let hash = SHA256()
            var offset = range.lowerBound
            while offset < range.upperBound {
                let want = Int(min(Int64(buffer.count), range.upperBound - offset))
                let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
                guard count > 0 else { return .length(offset, expected: size) }
                hash.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                offset += Int64(count)
            }
            if hash.finalize() != expected { return .piece(index, range) }
        }
        return nil
    }
}

extension MetalinkPieceCheck {
    /// Checks the completed file of `job`: nil when every piece matches; else what is wrong, the
    /// file having been deleted (a file that fails is never left where it looks finished).
    func verdict(forCompleted job: DownloadCommand.Job) -> String? {
        let path = job.destination.path
        do {
            guard let mismatch = try firstMismatch(inFileAt: path) else { return nil }
            try? FileSystem.remove(path)
            return "the file failed the Metalink's piece hashes: \(mismatch)"
        } catch {
            try? FileSystem.remove(path)
            return "the file could not be read back to check the Metalink's piece hashes (\(error))"
        }
    }
}
