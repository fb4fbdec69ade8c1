import FoundationEssentials

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
struct JobSources: Codable, Sendable, Hashable {
    /// The job's own proxy (a `ProxyURL`'s text, "" for none); nil: the agent's.
    var proxy: String?
    /// Other sources of the same file (`DownloadOptions.mirrors`); nil when none.
    var mirrors: [URL]?
    /// The file's piece hashes (`DownloadOptions.pieceHashes`).
    var pieceHashes: PieceHashes?

    /// Most piece hashes kept (an 8 GiB file in 1 MiB pieces; about 600 KiB of record). More
    /// are checked while the job runs but not after a restart (the whole-file SHA-256 still is).
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
        pieceHashes = options.pieceHashes.flatMap { $0.sha256.count <= Self.maximumPieces ? $0 : nil }
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
        if let pieceHashes, pieceHashes.sha256.count > Self.maximumPieces {
            throw ResumeRecord.Invalid(description: "it holds more than \(Self.maximumPieces) piece hashes")
        }
    }
}
