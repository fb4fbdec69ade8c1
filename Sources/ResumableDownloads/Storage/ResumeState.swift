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

    /// The `If-Range` value: the strong ETag, else Last-Modified, else nil (then a resume is unsafe
    /// and the download restarts from zero).
    package var validator: String? { entityTag ?? lastModified }

    /// Whether another process can continue from this state: bytes are stored and a validator
    /// ties them to their entity (without one, a resume could splice two versions).
    package var isContinuable: Bool { hasStoredBytes && validator != nil }

    /// This state when it passes `validate()`, else nil.
    package var validated: ResumeState? { (try? validate()) == nil ? nil : self }

    /// Throws `DownloadError.invalidRequest` with the reason when the state cannot be trusted.
    package func validate() throws {
        if let problem { throw DownloadError.invalidRequest.with(description: "invalid resume state: \(problem)") }
    }

    /// Why the state cannot be trusted, or nil: the rules for resume facts wherever they come from
    /// (a record read back, resume data, the background protocol).
    var problem: String? {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty else {
            return "only http and https URLs can be resumed: \(URLRedaction.redacted(url).prefix(200))"
        }
        guard verifiedOffset >= 0 else { return "negative offset \(verifiedOffset)" }
        if let totalLength, totalLength < verifiedOffset || totalLength < 0 {
            return "offset \(verifiedOffset) beyond the length \(totalLength)"
        }
        if let problem = rangeProblem { return problem }
        // Validators go into the If-Range header: a planted CR/LF must not smuggle a header in.
        return ResumeValidator.problem(entityTag: entityTag, lastModified: lastModified)
    }

    /// Most ranges and seams a state holds (a segmented download has a few dozen).
    static let maximumRanges = 1024

    /// The rules for stored ranges and seams: ranges need a length, are sorted, disjoint
    /// `[start, end)` pairs past and apart from the verified prefix, within the length, at most
    /// `maximumRanges`; seams lie inside the length.
    private var rangeProblem: String? {
        if let ranges {
            guard let totalLength, ranges.count <= Self.maximumRanges else {
                return "its ranges need a length and are at most \(Self.maximumRanges)"
            }
            var previousEnd = verifiedOffset
            for pair in ranges {
                guard pair.count == 2, pair[0] > previousEnd, pair[0] < pair[1], pair[1] <= totalLength else {
                    return "its ranges are not sorted, disjoint [start, end) pairs past the verified offset within the length"
                }
                previousEnd = pair[1]
            }
        }
        if let seams {
            guard let totalLength, seams.count <= Self.maximumRanges, seams.allSatisfy({ $0 > 0 && $0 < totalLength }) else {
                return "its seams are not offsets inside the length"
            }
        }
        return nil
    }

    /// Every durable byte: the verified prefix and the ranges past it.
    var durable: RangeSet<Int64> {
        var set = RangeSet<Int64>()
        if verifiedOffset > 0 { set.insert(contentsOf: 0..<verifiedOffset) }
        for pair in ranges ?? [] where pair.count == 2 && pair[0] < pair[1] { set.insert(contentsOf: pair[0]..<pair[1]) }
        return set
    }

    /// Sets `verifiedOffset` and `ranges` from the durable bytes.
    mutating func setDurable(_ set: RangeSet<Int64>) {
        let prefix = set.ranges.first.flatMap { $0.lowerBound == 0 ? $0.upperBound : nil } ?? 0
        verifiedOffset = prefix
        let rest = set.ranges.filter { $0.lowerBound > 0 }
        ranges = rest.isEmpty ? nil : rest.map { [$0.lowerBound, $0.upperBound] }
    }

    /// The unverified seams as a set.
    var seamSet: Set<Int64> { Set(seams ?? []) }
}

extension DownloadAgent {
    /// A download's durable resume state once it is not transferring (paused, or stopped by a
    /// failure); nil while a transfer runs or for a download this agent does not hold.
    package func resumeState(of download: Download) -> ResumeState? {
        resumeRecord(of: download)?.state
    }
}
