import FoundationEssentials
import LinuxSystem

/// A job's own sources, kept in its resume record (issue 34): its own proxy, its mirrors and its
/// Metalink's piece hashes (its SHA-256 is the record's `expectedSHA256`), so a job restored
/// after the agent restarts (even after SIGKILL) goes on from the same places with the same
/// checks instead of the agent's proxy and its one URL.
///
/// Read back like the rest of the record, as input: `validate()` holds it to what a caller
/// could have given (a checked proxy URL, at most `DownloadAgent.maximumMirrors` http(s) mirrors
/// of bounded length, at most `maximumPieces` piece hashes that cover their file), so an edited
/// record can neither crash the agent nor send the job through something no caller could name.
/// The record is the owner's (mode 0600 in a directory only the owner writes), which is why a
/// proxy password may be kept in it, as in curl's `.netrc`.
///
/// Piece hashes beyond `maximumPieces` (a file over 8 GiB in 1 MiB pieces) do not go into the
/// record, which stays small because it is rewritten at every checkpoint: they are written once
/// to a side file beside it (`PieceFile`), and the record keeps the side file's SHA-256, length
/// and count. Read back, the side file is held to that digest before one hash is taken from it.
struct JobSources: Sendable, Hashable {
    /// The job's own proxy (a `ProxyURL`'s text, "" for none); nil: the agent's.
    var proxy: String?
    /// Other sources of the same file (`DownloadOptions.mirrors`); nil when none.
    var mirrors: [URL]?
    /// The file's piece hashes (`DownloadOptions.pieceHashes`); read back from `pieceFile` when
    /// they are kept there.
    var pieceHashes: PieceHashes?
    /// Where hashes beyond `maximumPieces` are kept; nil when the record holds them (or none).
    var pieceFile: PieceFile?

    /// Most piece hashes kept in the record itself (an 8 GiB file in 1 MiB pieces; about 600 KiB
    /// of record); more go to a side file (`PieceFile`, up to `PieceFile.maximumCount`). More than
    /// that are checked while the job runs but not after a restart (the whole-file SHA-256 still is).
    static let maximumPieces = 8192
    /// Longest mirror URL taken (a presigned URL with a session token is 1-3 KiB): with
    /// `maximumMirrors` of them and the pieces, a record stays under `ResumeRecord.maximumSize`.
    static let maximumURLLength = 8192

    init(proxy: String? = nil, mirrors: [URL]? = nil, pieceHashes: PieceHashes? = nil) {
        self.proxy = proxy
        self.mirrors = mirrors
        self.pieceHashes = pieceHashes
    }

    /// The sources `options` name, or nil when they name none of their own.
    init?(_ options: DownloadOptions) {
        proxy = options.proxy
        mirrors = options.mirrors.isEmpty ? nil : options.mirrors
        pieceHashes = options.pieceHashes.flatMap { $0.sha256.count <= PieceFile.maximumCount ? $0 : nil }
        pieceFile = pieceHashes.flatMap { $0.sha256.count > Self.maximumPieces ? PieceFile($0) : nil }
        if proxy == nil, mirrors == nil, pieceHashes == nil { return nil }
    }

    /// Why mirrors cannot be used (another scheme, no host, too long, too many), or nil: the
    /// rule for a caller's mirrors and for those read back.
    static func problem(withMirrors mirrors: [URL]) -> String? {
        for mirror in mirrors {
            guard let scheme = mirror.scheme?.lowercased(), scheme == "http" || scheme == "https", mirror.host != nil else {
                return "only http and https mirrors can be used: \(URLRedaction.redacted(mirror))"
            }
            guard mirror.absoluteString.utf8.count <= maximumURLLength else {
                return "a mirror URL is longer than \(maximumURLLength) bytes: \(URLRedaction.redacted(mirror).prefix(80))..."
            }
        }
        if mirrors.count > DownloadAgent.maximumMirrors { return "at most \(DownloadAgent.maximumMirrors) mirrors per download" }
        return nil
    }

    /// Checks sources read back from a record.
    func validate() throws(ResumeRecord.Invalid) {
        if let proxy, !proxy.isEmpty {
            do { _ = try ProxyURL(proxy) } catch { throw ResumeRecord.Invalid(description: "its proxy \(error)") }
        }
        if let mirrors {
            if let problem = Self.problem(withMirrors: mirrors) { throw ResumeRecord.Invalid(description: "its mirrors: \(problem)") }
        }
        // Decoding checked that the hashes cover their `fileLength` (`PieceHashes.init(from:)`);
        // one that disagrees with the server's length is the engine's to refuse, as when added.
        if let pieceHashes, pieceHashes.sha256.count > Self.maximumPieces, pieceFile == nil {
            throw ResumeRecord.Invalid(description: "it holds more than \(Self.maximumPieces) piece hashes")
        }
        if let pieceFile, let problem = pieceFile.problem {
            throw ResumeRecord.Invalid(description: "its piece hash file: \(problem)")
        }
    }
}

extension JobSources: Codable {
    private enum CodingKeys: String, CodingKey { case proxy, mirrors, pieceHashes, pieceFile }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        proxy = try container.decodeIfPresent(String.self, forKey: .proxy)
        mirrors = try container.decodeIfPresent([URL].self, forKey: .mirrors)
        pieceFile = try container.decodeIfPresent(PieceFile.self, forKey: .pieceFile)
        // With a side file, its hashes are read (and checked) by `ResumeRecord.read`, not here.
        pieceHashes = pieceFile == nil ? try container.decodeIfPresent(PieceHashes.self, forKey: .pieceHashes) : nil
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(proxy, forKey: .proxy)
        try container.encodeIfPresent(mirrors, forKey: .mirrors)
        if let pieceFile {
            try container.encode(pieceFile, forKey: .pieceFile)
        } else {
            try container.encodeIfPresent(pieceHashes, forKey: .pieceHashes)
        }
    }
}

/// Piece hashes kept beside the record (`ID.DIGEST16.pieces` in the state directory): a first
/// line naming the format, then one lowercase hex digest per line. The name carries the start of
/// the content's digest, so a job given other hashes writes another file instead of replacing one
/// a crash could leave half-written; the record holds the whole digest, length and count, and
/// `pieces(from:)` takes nothing from a file that does not match them (a file edited, swapped,
/// cut or grown is refused, and its record with it, as a record with hostile sources is).
struct PieceFile: Codable, Sendable, Hashable {
    /// Bytes per piece and the file's length (`PieceHashes`).
    var length: Int64
    var fileLength: Int64
    var count: Int
    /// SHA-256 of the side file's bytes.
    var sha256: String

    /// Most hashes kept (a 128 GiB file in 1 MiB pieces: an 8.5 MB side file, about 20 MB in
    /// memory while the job runs).
    static let maximumCount = 1 << 17
    static let header = Array("reachability piece hashes v1\n".utf8)

    init(length: Int64, fileLength: Int64, count: Int, sha256: String) {
        self.length = length
        self.fileLength = fileLength
        self.count = count
        self.sha256 = sha256
    }

    /// The reference to the side file `bytes(pieces)` would write.
    init(_ pieces: PieceHashes) {
        length = pieces.length
        fileLength = pieces.fileLength
        count = pieces.sha256.count
        sha256 = SHA256.hex(Self.bytes(pieces))
    }

    /// The side file's name for download `id`.
    func fileName(for id: UUID) -> String { "\(id.uuidString).\(sha256.prefix(16)).pieces" }

    /// The side file's size.
    var byteCount: Int { Self.header.count + count * 65 }

    /// The side file's content for `pieces`.
    static func bytes(_ pieces: PieceHashes) -> [UInt8] {
        var bytes = header
        bytes.reserveCapacity(header.count + pieces.sha256.count * 65)
        for digest in pieces.sha256 {
            bytes += digest.utf8
            bytes.append(0x0a)
        }
        return bytes
    }

    /// Why this reference cannot be followed, or nil.
    var problem: String? {
        guard SHA256.normalizedHexDigest(sha256) == sha256 else { return "its digest is not 64 lowercase hex digits" }
        guard (1...Self.maximumCount).contains(count), count > JobSources.maximumPieces else {
            return "its count is not \(JobSources.maximumPieces + 1) to \(Self.maximumCount)"
        }
        guard length > 0, fileLength >= 0, Int64(count) == PieceHashes.pieceCount(length: length, fileLength: fileLength) else {
            return "\(count) pieces of \(length) bytes do not cover a \(fileLength)-byte file"
        }
        return nil
    }

    /// The hashes in `bytes` (the side file), or nil when they are not exactly what this
    /// reference describes.
    func pieces(from bytes: [UInt8]) -> PieceHashes? {
        guard problem == nil, bytes.count == byteCount, bytes.starts(with: Self.header), SHA256.hex(bytes) == sha256 else { return nil }
        var digests: [String] = []
        digests.reserveCapacity(count)
        var start = Self.header.count
        while start < bytes.count {
            guard bytes[start + 64] == 0x0a else { return nil }
            digests.append(String(decoding: bytes[start..<start + 64], as: UTF8.self))
            start += 65
        }
        return PieceHashes(length: length, sha256: digests, fileLength: fileLength)
    }

    /// Writes the side file for `pieces` into `directory` unless it is there already (its name
    /// is its content's digest; its content is checked when read).
    func store(_ pieces: PieceHashes, for id: UUID, in directory: CheckedDirectory) throws {
        let name = fileName(for: id)
        if let status = try? directory.status(of: name), status.size == Int64(byteCount) { return }
        do { try directory.writeAtomically(Self.bytes(pieces), to: name) } catch { throw DownloadError.file(error) }
    }

    /// Reads the side file of download `id` from `directory`: its hashes, checked.
    func load(for id: UUID, in directory: CheckedDirectory) throws(ResumeRecord.Invalid) -> PieceHashes {
        if let problem { throw ResumeRecord.Invalid(description: "its piece hash file: \(problem)") }
        let name = fileName(for: id)
        guard let bytes = try? directory.readOwnedFile(name, limit: byteCount + 1) else {
            throw ResumeRecord.Invalid(description: "its piece hash file \(directory.child(name)) cannot be read")
        }
        guard let pieces = pieces(from: bytes) else {
            throw ResumeRecord.Invalid(description: "its piece hash file \(directory.child(name)) does not match the digest the record holds")
        }
        return pieces
    }
}
