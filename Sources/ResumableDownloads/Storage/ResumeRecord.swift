import FoundationEssentials
import LinuxSystem

/// Everything needed to continue a download after a crash or relaunch, stored as versioned JSON
/// in the agent's state directory next to the `NAME.part` data file.
///
/// Invariant: `verifiedOffset` bytes of the partial file, and the byte `ranges` past them (a
/// download fetched in segments), were fsynced before this record was written, and they all come
/// from the entity identified by `entityTag` / `lastModified`. `seams` are the boundaries between
/// bytes stored by different responses that were not yet compared across (docs/security.md): a
/// record naming a seam is written before the first byte on either side of it.
///
/// A record read back is not trusted: `validate(name:)` rejects one that is not well formed or
/// does not belong to its file name, and the partial file's path is derived from the destination,
/// never read (older records stored a `partialPath`; it is ignored).
struct ResumeRecord: Codable, Sendable, Hashable {
    /// The format version this code writes; older versions are migrated on load, newer rejected.
    static let currentVersion = 1

    var version: Int = ResumeRecord.currentVersion
    var id: UUID
    var url: URL
    var destination: URL
    /// A strong ETag (weak ones are never stored: they cannot validate byte ranges).
    var entityTag: String?
    /// The Last-Modified value when it was strong (the response's Date a second or more later),
    /// used as validator when there is no strong ETag.
    var lastModified: String?
    /// Any ETag seen with the stored bytes, weak ones too: a different one on resume is a change.
    var observedEntityTag: String?
    var totalLength: Int64?
    var verifiedOffset: Int64
    /// Durable byte ranges past `verifiedOffset` as `[start, end)` pairs, sorted, disjoint and
    /// apart from it (absent when the stored bytes are one prefix, and in older records).
    var ranges: [[Int64]]?
    /// Unverified seams (absent when none, and in older records).
    var seams: [Int64]?
    var expectedSHA256: String?
    /// The length the caller expects, checked at completion (optional; absent in older records).
    var expectedLength: Int64?
    var allowsExpensive: Bool
    /// `DownloadOptions.allowsRoaming`: false, or absent (older records, and the default) for true.
    var allowsRoaming: Bool?
    /// `DownloadOptions.allowsConstrained`: false, or absent (older records, and the default) for true.
    var allowsConstrained: Bool?
    /// `DownloadOptions.waitsForACPower`: true, or absent (older records, and the default) for false.
    var waitsForACPower: Bool?
    /// `DownloadOptions.priority` when not the default 0.5 (absent in older records), so that a
    /// restored job keeps its class (issue 32).
    var priority: Float?
    /// `DownloadOptions.maximumConnections` (absent: the agent's bound, and in older records).
    var maximumConnections: Int?
    /// `DownloadOptions.deadline` and `noProgressTimeout` (issue 32; absent: none), so a restored
    /// job keeps its time limits.
    var deadline: Date?
    var noProgressTimeout: Duration?
    /// `DownloadOptions.completionCommand` (issue 32; absent: none, and in older records), so a
    /// restored job still runs its `--on-complete` command when it ends.
    var onComplete: CompletionCommand?
    /// `DownloadOptions.replacesExistingFile` (absent in older records: never replace).
    var replacesExistingFile: Bool?
    /// The job's own proxy, mirrors and piece hashes (issue 34; absent: none of its own, and in
    /// older records), so a restored job keeps them (`JobSources`).
    var sources: JobSources?
    /// Transfer attempts made so far (all attempts, for diagnostics).
    var attempts: Int
    /// Set just before the verified `NAME.part` is renamed to `NAME` (issue 29): a crash between
    /// the rename and the removal of this record leaves a record whose partial file is gone and
    /// whose destination is this very file, which a restart recognises as finished instead of
    /// fetching it again. Absent until then, and in older records.
    var finishedFile: FinishedFile?
    var createdAt: Date
    var updatedAt: Date

    init(id: UUID, url: URL, destination: URL, expectedSHA256: String?,
         totalLength: Int64?, allowsExpensive: Bool, now: Date = Date()) {
        self.id = id
        self.url = url
        self.destination = destination
        self.expectedSHA256 = expectedSHA256
        self.totalLength = totalLength
        self.allowsExpensive = allowsExpensive
        verifiedOffset = 0
        attempts = 0
        createdAt = now
        updatedAt = now
    }

    /// The partial file: `NAME.part` next to the destination (derived, never stored).
    var partialPath: String {
        let path = destination.path.unicodeScalars
        let folder = path.dropLast(destination.lastPathComponent.unicodeScalars.count)
        return String(String.UnicodeScalarView(folder)) + partialName
    }

    /// The partial file's name in the destination's directory.
    var partialName: String { Self.partialName(for: destination.lastPathComponent) }

    /// `NAME.part`; for a name that leaves no room for `.part` in the 255 bytes a file name may
    /// have, its first bytes (whole characters), `~`, eight hex digits of a hash of the whole
    /// name and `.part`: the file keeps its name, only the partial is shortened, and two long
    /// names with the same beginning get different partials.
    static func partialName(for name: String) -> String {
        let suffix = ".part"
        guard name.utf8.count + suffix.utf8.count > 255 else { return name + suffix }
        var hash: UInt32 = 0x811c_9dc5   // FNV-1a 32: stable across runs, unlike Hasher
        for byte in name.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 0x0100_0193
        }
        let digits = String(hash, radix: 16)
        let tag = "~" + String(repeating: "0", count: 8 - digits.count) + digits
        let room = 255 - suffix.utf8.count - tag.utf8.count
        var prefix = ""
        for character in name {
            guard prefix.utf8.count + character.utf8.count <= room else { break }
            prefix.append(character)
        }
        return prefix + tag + suffix
    }

    /// The record's file name in the state directory.
    static func fileName(for id: UUID) -> String { id.uuidString + ".json" }

    /// The `If-Range` value: the strong ETag, else Last-Modified, else nil (then a resume is unsafe
    /// and the download restarts from zero).
    var validator: String? { entityTag ?? lastModified }

    /// Takes the options' policy (paths, power, priority, connections, time limits, command),
    /// each stored only when it differs from the default so older readers and records agree.
    mutating func adoptPolicy(of options: DownloadOptions) {
        allowsRoaming = options.allowsRoaming ? nil : false
        allowsConstrained = options.allowsConstrained ? nil : false
        waitsForACPower = options.waitsForACPower ? true : nil
        priority = options.priority == 0.5 ? nil : options.priority
        maximumConnections = options.maximumConnections
        deadline = options.deadline
        noProgressTimeout = options.noProgressTimeout
        onComplete = options.completionCommand
    }

    /// Forgets the entity: used when the server sent a new version.
    mutating func resetEntity(entityTag: String?, lastModified: String?, totalLength: Int64?) {
        observedEntityTag = nil
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.totalLength = totalLength
        verifiedOffset = 0
        ranges = nil
        seams = nil
    }

    /// Most ranges and seams a record holds (a segmented download has a few dozen).
    static let maximumRanges = 1024

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

    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    /// Decodes a record, rejecting unknown future versions.
    static func decode(_ data: Data) throws -> ResumeRecord {
        struct Versioned: Decodable { var version: Int }
        let version = try decoder().decode(Versioned.self, from: data).version
        guard version >= 1, version <= currentVersion else {
            throw DownloadError.fileSystem.with(description: "unsupported resume record version \(version)")
        }
        return try decoder().decode(ResumeRecord.self, from: data)
    }

    /// The identity of a verified download as it was renamed into place: the same file on the
    /// same device, unchanged since (its modification time and length).
    struct FinishedFile: Codable, Sendable, Hashable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        /// Modification time in nanoseconds since 1970 (a rename keeps it).
        var modified: Int64

        init(_ status: FileStatus) {
            device = status.device
            inode = status.inode
            size = status.size
            modified = status.modified
        }

        /// Whether `status` is this file, unchanged.
        func matches(_ status: FileStatus) -> Bool {
            status.kind == .regular && status.device == device && status.inode == inode && status.size == size
                && status.modified == modified
        }
    }

    /// Why a record read back cannot be used.
    struct Invalid: Error, CustomStringConvertible {
        var description: String
    }

    /// Checks a record read from the file `name`: it must belong to that file (its id is the
    /// name), name an http(s) URL and an absolute, normalised destination with a usable file name,
    /// and hold consistent offsets and lengths.
    func validate(name: String) throws(Invalid) {
        guard name == Self.fileName(for: id) else { throw Invalid(description: "its id \(id) does not match the file name") }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host?.isEmpty == false else {
            throw Invalid(description: "its URL is not http or https")
        }
        let path = destination.path
        guard destination.isFileURL, path.hasPrefix("/"), destination.standardizedFileURL.path == path,
              !path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }),
              !path.utf8.contains(0) else {
            throw Invalid(description: "its destination is not an absolute, normalised path")
        }
        let name = destination.lastPathComponent
        guard !name.isEmpty, name != "/", name.utf8.count <= 255 else { throw Invalid(description: "its destination has no usable file name") }
        guard verifiedOffset >= 0 else { throw Invalid(description: "its verified offset is negative") }
        if let totalLength {
            guard totalLength >= 0, verifiedOffset <= totalLength else { throw Invalid(description: "its offsets disagree with its length") }
        }
        try Self.validate(ranges: ranges, seams: seams, verifiedOffset: verifiedOffset, totalLength: totalLength)
        if let expectedLength, expectedLength < 0 { throw Invalid(description: "its expected length is negative") }
        try sources?.validate()
        if let expectedSHA256, SHA256.normalizedHexDigest(expectedSHA256) == nil {
            throw Invalid(description: "its SHA-256 is not 64 hex digits")
        }
        guard attempts >= 0 else { throw Invalid(description: "its attempt count is negative") }
        if let priority, !(0...1).contains(priority) { throw Invalid(description: "its priority is not within 0...1") }
        if let maximumConnections, !(1...DownloadAgent.maximumConnectionsPerHostLimit).contains(maximumConnections) {
            throw Invalid(description: "its connection bound is not 1 to \(DownloadAgent.maximumConnectionsPerHostLimit)")
        }
        // Validators go into the If-Range header: a planted CR/LF must not smuggle a header in.
        if let problem = ResumeValidator.problem(entityTag: entityTag, lastModified: lastModified) {
            throw Invalid(description: problem)
        }
        // Any tag seen, weak ones too; only compared, but read back like the others.
        if let observedEntityTag, !ResumeValidator.isHeaderSafe(observedEntityTag) {
            throw Invalid(description: "the observed entity tag is not one line of visible ASCII")
        }
    }

    /// The rules for stored ranges and seams (records, and resume data made from them): ranges
    /// need a length, are sorted, disjoint `[start, end)` pairs past and apart from the verified
    /// prefix, within the length, at most `maximumRanges`; seams lie inside the length.
    static func validate(ranges: [[Int64]]?, seams: [Int64]?, verifiedOffset: Int64, totalLength: Int64?) throws(Invalid) {
        if let ranges {
            guard let totalLength, ranges.count <= maximumRanges else {
                throw Invalid(description: "its ranges need a length and are at most \(maximumRanges)")
            }
            var previousEnd = verifiedOffset
            for pair in ranges {
                guard pair.count == 2, pair[0] > previousEnd, pair[0] < pair[1], pair[1] <= totalLength else {
                    throw Invalid(description: "its ranges are not sorted, disjoint [start, end) pairs past the verified offset within the length")
                }
                previousEnd = pair[1]
            }
        }
        if let seams {
            guard let totalLength, seams.count <= maximumRanges, seams.allSatisfy({ $0 > 0 && $0 < totalLength }) else {
                throw Invalid(description: "its seams are not offsets inside the length")
            }
        }
    }

    /// Records are small; anything larger is not one of ours. Most of this room is for a job's
    /// own sources (`JobSources`: up to 8192 piece hashes and 256 mirrors); others stay a few KiB.
    static let maximumSize = 4 << 20

    /// Writes the record atomically and durably into `directory` (temp file created with O_EXCL,
    /// fsync, rename, fsync of the directory): a crash leaves the old or the new record.
    func write(to directory: CheckedDirectory) throws {
        let data = try Self.encoder().encode(self)
        do { try directory.writeAtomically(Array(data), to: Self.fileName(for: id)) } catch { throw DownloadError.file(error) }
    }

    /// Reads and validates the record `name` in `directory` (a regular file of ours, no link).
    static func read(_ name: String, in directory: CheckedDirectory) throws -> ResumeRecord {
        let bytes: [UInt8]
        do { bytes = try directory.readOwnedFile(name, limit: maximumSize) } catch { throw DownloadError.file(error) }
        var record = try decode(Data(bytes))
        do { try record.validate(name: name) } catch {
            throw DownloadError.fileSystem.with(description: "invalid resume record \(directory.child(name)): \(error)")
        }
        record.expectedSHA256 = record.expectedSHA256.flatMap(SHA256.normalizedHexDigest)
        return record
    }
}
