import FoundationEssentials

/// A download's durable resume state as a value: what its resume record says after the last
/// checkpoint. The one model of resume facts (issue 31): the resume record stores them on disk,
/// `ResumableURLSession`'s resume data seals them for its callers, and the agent's background
/// protocol carries them as this type's JSON (`Codable`, the keys below), so a fact added here
/// (the segment ranges and seams) reaches every place that continues a download.
///
/// The value is input like any record read back from disk: `validate()` applies the same rules
/// before the agent trusts it (http/https URL with a host, offsets in range, validators that are
/// `ResumeValidator`'s rules, so they cannot smuggle a header into `If-Range`).
package struct ResumeState: Sendable, Hashable, Codable {
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

    /// The wire keys: `offset` for the prefix and the URL as a string, as the background
    /// protocol's resume state always had (state it persisted before ranges existed reads back).
    private enum CodingKeys: String, CodingKey {
        case id, url, entityTag, lastModified, totalLength, verifiedOffset = "offset", ranges, seams
    }

    /// Decodes the fields; a URL that does not parse is a decoding error (`validate()` checks the rest).
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let text = try container.decode(String.self, forKey: .url)
        guard let url = URL(string: text) else {
            throw DecodingError.dataCorruptedError(forKey: .url, in: container, debugDescription: "not a URL")
        }
        self.init(id: try container.decode(UUID.self, forKey: .id), url: url,
                  entityTag: try container.decodeIfPresent(String.self, forKey: .entityTag),
                  lastModified: try container.decodeIfPresent(String.self, forKey: .lastModified),
                  totalLength: try container.decodeIfPresent(Int64.self, forKey: .totalLength),
                  verifiedOffset: try container.decode(Int64.self, forKey: .verifiedOffset),
                  ranges: try container.decodeIfPresent([[Int64]].self, forKey: .ranges),
                  seams: try container.decodeIfPresent([Int64].self, forKey: .seams))
    }

    /// Encodes the fields under the wire keys (absent optionals are left out).
    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(url.absoluteString, forKey: .url)
        try container.encodeIfPresent(entityTag, forKey: .entityTag)
        try container.encodeIfPresent(lastModified, forKey: .lastModified)
        try container.encodeIfPresent(totalLength, forKey: .totalLength)
        try container.encode(verifiedOffset, forKey: .verifiedOffset)
        try container.encodeIfPresent(ranges, forKey: .ranges)
        try container.encodeIfPresent(seams, forKey: .seams)
    }

    /// Whether any durable byte is stored (a prefix or ranges).
    package var hasStoredBytes: Bool { verifiedOffset > 0 || !(ranges ?? []).isEmpty }

    /// One past the last durable byte: the partial file must be at least this long.
    package var storedEnd: Int64 { max(verifiedOffset, ranges?.last?.last ?? 0) }

    /// The `If-Range` value a resume would send, as in `ResumeRecord.validator`.
    package var validator: String? { entityTag ?? lastModified }

    /// Whether another process can continue from this state: bytes are stored and a validator
    /// ties them to their entity (without one, a resume could splice two versions).
    package var isContinuable: Bool { hasStoredBytes && validator != nil }

    /// This state when it passes `validate()`, else nil.
    package var validated: ResumeState? { (try? validate()) == nil ? nil : self }

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
