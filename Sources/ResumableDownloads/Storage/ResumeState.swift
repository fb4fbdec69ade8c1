import FoundationEssentials

/// A download's durable resume state as a value: what its resume record says after the last
/// checkpoint. Package-level, for facades (such as `ResumableURLSession`) that hand resume data
/// to their callers and take it back later, possibly in another process.
///
/// The value is input like any record read back from disk: `validate()` applies the same rules
/// before the agent trusts it (http/https URL with a host, offsets in range, validators that are
/// `ResumeValidator`'s rules, so they cannot smuggle a header into `If-Range`).
package struct ResumeState: Sendable, Hashable {
    /// The download's identity; it names the resume record in the state directory.
    package var id: UUID
    /// Where the bytes come from.
    package var url: URL
    /// The strong ETag the stored bytes belong to.
    package var entityTag: String?
    /// The Last-Modified value the stored bytes belong to (validator when there is no ETag).
    package var lastModified: String?
    /// The entity's full length, when the server announced it.
    package var totalLength: Int64?
    /// Bytes of the partial file that were fsynced and belong to the entity above: a prefix...
    package var verifiedOffset: Int64
    /// ... and, for a download fetched in segments, ranges past it (`[start, end)` pairs, as in
    /// the resume record), with the seams between responses not yet compared across.
    package var ranges: [[Int64]]?
    package var seams: [Int64]?

    /// Creates a state.
    package init(id: UUID, url: URL, entityTag: String?, lastModified: String?, totalLength: Int64?,
                 verifiedOffset: Int64, ranges: [[Int64]]? = nil, seams: [Int64]? = nil) {
        self.id = id
        self.url = url
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.totalLength = totalLength
        self.verifiedOffset = verifiedOffset
        self.ranges = ranges
        self.seams = seams
    }

    init(_ record: ResumeRecord) {
        self.init(id: record.id, url: record.url, entityTag: record.entityTag, lastModified: record.lastModified,
                  totalLength: record.totalLength, verifiedOffset: record.verifiedOffset, ranges: record.ranges,
                  seams: record.seams)
    }

    /// Whether any durable byte is stored (a prefix or ranges).
    package var hasStoredBytes: Bool { verifiedOffset > 0 || !(ranges ?? []).isEmpty }

    /// One past the last durable byte: the partial file must be at least this long.
    package var storedEnd: Int64 { max(verifiedOffset, ranges?.last?.last ?? 0) }

    /// The `If-Range` value a resume would send, as in `ResumeRecord.validator`.
    package var validator: String? { entityTag ?? lastModified }

    /// Throws `DownloadError.invalidRequest` with the reason when the state cannot be trusted.
    package func validate() throws {
        func reject(_ reason: String) -> DownloadError {
            DownloadError.invalidRequest.with(description: "invalid resume state: \(reason)")
        }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty else {
            throw reject("only http and https URLs can be resumed: \(URLRedaction.redacted(url).prefix(200))")
        }
        guard verifiedOffset >= 0 else { throw reject("negative offset \(verifiedOffset)") }
        if let totalLength, totalLength < verifiedOffset || totalLength < 0 {
            throw reject("offset \(verifiedOffset) beyond the length \(totalLength)")
        }
        do {
            try ResumeRecord.validate(ranges: ranges, seams: seams, verifiedOffset: verifiedOffset, totalLength: totalLength)
        } catch {
            throw reject(error.description)
        }
        if let problem = ResumeValidator.problem(entityTag: entityTag, lastModified: lastModified) {
            throw reject(problem)
        }
    }
}

extension DownloadAgent {
    /// A download's durable resume state once it is not transferring (paused, or stopped by a
    /// failure); nil while a transfer runs or for a download this agent does not hold.
    package func resumeState(of download: Download) -> ResumeState? {
        resumeRecord(of: download).map(ResumeState.init)
    }
}
