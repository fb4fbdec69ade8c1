import FoundationEssentials
import LinuxSystem

/// Everything needed to continue a download after a crash or relaunch, stored as versioned JSON
/// in the agent's state directory next to the `NAME.part` data file: the download's resume facts
/// (`state`, the one model of them, issue 31) and the job around them (`job`: destination,
/// options, history). Both are encoded into one JSON object (the state under its own keys, as the
/// background protocol carries it), so the record holds no copy of a resume fact of its own.
/// Record fields are read and written through the record (`record.verifiedOffset`,
/// `record.destination`) by dynamic member lookup.
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
@dynamicMemberLookup
struct ResumeRecord: Sendable, Hashable {
    /// The format version this code writes; older versions are migrated on load, newer rejected.
    /// Version 2 stores the resume facts under `ResumeState`'s keys (`offset`, not version 1's
    /// `verifiedOffset`).
    static let currentVersion = 2

    /// The resume facts: id, URL, validators, length, the verified prefix, ranges and seams.
    var state: ResumeState
    /// The rest of the record.
    var job: Job

    /// What the record keeps beside the resume facts. A field added here is optional (absent in
    /// older records) so that every record on disk still reads back; its coding is synthesised.
    struct Job: Codable, Sendable, Hashable {
        var version: Int = ResumeRecord.currentVersion
        var destination: URL
        /// Any ETag seen with the stored bytes, weak ones too: a different one on resume is a change.
        var observedEntityTag: String?
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
        /// `DownloadOptions.opensAllConnections`: true, or absent (older records, and the default) for false.
        var opensAllConnections: Bool?
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
    }

    init(id: UUID, url: URL, destination: URL, expectedSHA256: String?,
         totalLength: Int64?, allowsExpensive: Bool, now: Date = Date()) {
        state = ResumeState(id: id, url: url, entityTag: nil, lastModified: nil, totalLength: totalLength, verifiedOffset: 0)
        job = Job(destination: destination, expectedSHA256: expectedSHA256, allowsExpensive: allowsExpensive,
                  attempts: 0, createdAt: now, updatedAt: now)
    }

    /// A resume fact, read through the record.
    subscript<Value>(dynamicMember path: KeyPath<ResumeState, Value>) -> Value { state[keyPath: path] }

    /// A resume fact, read and written through the record.
    subscript<Value>(dynamicMember path: WritableKeyPath<ResumeState, Value>) -> Value {
        get { state[keyPath: path] }
        set { state[keyPath: path] = newValue }
    }

    /// A field of the job, read and written through the record.
    subscript<Value>(dynamicMember path: WritableKeyPath<Job, Value>) -> Value {
        get { job[keyPath: path] }
        set { job[keyPath: path] = newValue }
    }

    /// The partial file: `NAME.part` next to the destination (derived, never stored).
    var partialPath: String {
        let path = job.destination.path.unicodeScalars
        let folder = path.dropLast(job.destination.lastPathComponent.unicodeScalars.count)
        return String(String.UnicodeScalarView(folder)) + partialName
    }

    /// The partial file's name in the destination's directory.
    var partialName: String { Self.partialName(for: job.destination.lastPathComponent) }

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

    /// Takes the options' policy (paths, power, priority, connections, time limits, command),
    /// each stored only when it differs from the default so older readers and records agree.
    mutating func adoptPolicy(of options: DownloadOptions) {
        job.allowsRoaming = options.allowsRoaming ? nil : false
        job.allowsConstrained = options.allowsConstrained ? nil : false
        job.waitsForACPower = options.waitsForACPower ? true : nil
        job.priority = options.priority == 0.5 ? nil : options.priority
        job.maximumConnections = options.maximumConnections
        job.opensAllConnections = options.opensAllConnections ? true : nil
        job.deadline = options.deadline
        job.noProgressTimeout = options.noProgressTimeout
        job.onComplete = options.completionCommand
    }

    /// Forgets the entity: used when the server sent a new version.
    mutating func resetEntity(entityTag: String?, lastModified: String?, totalLength: Int64?) {
        job.observedEntityTag = nil
        state = ResumeState(id: state.id, url: state.url, entityTag: entityTag, lastModified: lastModified,
                            totalLength: totalLength, verifiedOffset: 0)
    }

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

    /// The resume facts as version 1 records stored them: `ResumeState`'s fields, the prefix under
    /// `verifiedOffset` (read so that records written before version 2 continue).
    private struct Version1Facts: Decodable {
        var id: UUID
        var url: URL
        var entityTag, lastModified: String?
        var totalLength: Int64?
        var verifiedOffset: Int64
        var ranges: [[Int64]]?
        var seams: [Int64]?
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
    /// name), hold resume facts that pass `ResumeState`'s rules (an http(s) URL, consistent
    /// offsets, ranges and validators), and name an absolute, normalised destination with a
    /// usable file name.
    func validate(name: String) throws(Invalid) {
        guard name == Self.fileName(for: state.id) else { throw Invalid(description: "its id \(state.id) does not match the file name") }
        if let problem = state.problem { throw Invalid(description: problem) }
        let path = job.destination.path
        guard job.destination.isFileURL, path.hasPrefix("/"), job.destination.standardizedFileURL.path == path,
              !path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }),
              !path.utf8.contains(0) else {
            throw Invalid(description: "its destination is not an absolute, normalised path")
        }
        let name = job.destination.lastPathComponent
        guard !name.isEmpty, name != "/", name.utf8.count <= 255 else { throw Invalid(description: "its destination has no usable file name") }
        if let expectedLength = job.expectedLength, expectedLength < 0 { throw Invalid(description: "its expected length is negative") }
        try job.sources?.validate()
        if let expectedSHA256 = job.expectedSHA256, SHA256.normalizedHexDigest(expectedSHA256) == nil {
            throw Invalid(description: "its SHA-256 is not 64 hex digits")
        }
        guard job.attempts >= 0 else { throw Invalid(description: "its attempt count is negative") }
        if let priority = job.priority, !(0...1).contains(priority) { throw Invalid(description: "its priority is not within 0...1") }
        if let maximumConnections = job.maximumConnections, !(1...DownloadAgent.maximumConnectionsPerHostLimit).contains(maximumConnections) {
            throw Invalid(description: "its connection bound is not 1 to \(DownloadAgent.maximumConnectionsPerHostLimit)")
        }
        // Any tag seen, weak ones too; only compared, but read back like the others.
        if let observedEntityTag = job.observedEntityTag, !ResumeValidator.isHeaderSafe(observedEntityTag) {
            throw Invalid(description: "the observed entity tag is not one line of visible ASCII")
        }
    }

    /// Records are small; anything larger is not one of ours. Most of this room is for a job's
    /// own sources (`JobSources`: up to 8192 piece hashes, more in a side file, and 256 mirrors);
    /// others stay a few KiB.
    static let maximumSize = 4 << 20

    /// Writes the record atomically and durably into `directory` (temp file created with O_EXCL,
    /// fsync, rename, fsync of the directory): a crash leaves the old or the new record.
    func write(to directory: CheckedDirectory) throws {
        // The side file first: a record never names piece hashes that are not on disk.
        if let pieceFile = job.sources?.pieceFile, let pieces = job.sources?.pieceHashes {
            try pieceFile.store(pieces, for: state.id, in: directory)
        }
        let data = try Self.encoder().encode(self)
        do { try directory.writeAtomically(Array(data), to: Self.fileName(for: state.id)) } catch { throw DownloadError.file(error) }
    }

    /// Reads and validates the record `name` in `directory` (a regular file of ours, no link).
    static func read(_ name: String, in directory: CheckedDirectory) throws -> ResumeRecord {
        let bytes: [UInt8]
        do { bytes = try directory.readOwnedFile(name, limit: maximumSize) } catch { throw DownloadError.file(error) }
        var record = try decode(Data(bytes))
        do {
            try record.validate(name: name)
            if let pieceFile = record.job.sources?.pieceFile {
                record.job.sources?.pieceHashes = try pieceFile.load(for: record.state.id, in: directory)
            }
        } catch {
            throw DownloadError.fileSystem.with(description: "invalid resume record \(directory.child(name)): \(error)")
        }
        record.expectedSHA256 = record.expectedSHA256.flatMap(SHA256.normalizedHexDigest)
        return record
    }
}

extension ResumeRecord: Codable {
    /// Reads the job's fields and the resume facts from one JSON object (version 1's facts by
    /// their old keys).
    init(from decoder: any Decoder) throws {
        job = try Job(from: decoder)
        if job.version == 1 {
            let old = try Version1Facts(from: decoder)
            state = ResumeState(id: old.id, url: old.url, entityTag: old.entityTag, lastModified: old.lastModified,
                                totalLength: old.totalLength, verifiedOffset: old.verifiedOffset, ranges: old.ranges,
                                seams: old.seams)
            job.version = ResumeRecord.currentVersion   // migrated: written back in version 2's layout
        } else {
            state = try ResumeState(from: decoder)
        }
    }

    /// Writes the resume facts (under `ResumeState`'s keys) and the job's fields into one JSON object.
    func encode(to encoder: any Encoder) throws {
        try state.encode(to: encoder)
        try job.encode(to: encoder)
    }
}
