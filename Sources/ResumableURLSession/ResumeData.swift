import Foundation
import ResumableDownloads

/// The resume data a `ResumableURLSession` hands out: everything needed to continue a download
/// in this or a later process, as one self-contained, versioned `Data` value.
///
/// Layout (version 1):
///
///     "RCHRESUME"  9 bytes   magic
///     version      1 byte    1
///     length       4 bytes   big-endian length of the payload
///     payload      length    JSON (sorted keys): the `ResumeState` (id, url, validators, offset,
///                            ranges, seams, expected length), the partial file's name and
///                            identity, where it was made, when
///     mac          32 bytes  HMAC-SHA256 of everything before it, keyed by the state directory
///
/// Decoding treats the bytes as hostile: size and framing are checked first, then the MAC (so
/// no field of a forged blob is ever believed), then every field. The partial file is never
/// named by a path from the blob: its location derives from the id inside the session's own
/// directory, and the recorded device and inode only confirm it is still the same file.
struct ResumeData: Sendable, Hashable, Codable {
    /// The partial file as it was when the data was made.
    struct PartialFile: Sendable, Hashable, Codable {
        /// Its name inside the session's `downloads` directory (always `ID.download.part`).
        var name: String
        var device: UInt64
        var inode: UInt64
        /// Modification time in nanoseconds since 1970.
        var modified: Int64
    }

    static let magic = Array("RCHRESUME".utf8)
    static let version: UInt8 = 1
    /// Far above any real blob (a long URL and two validators); bounds what is parsed.
    static let maximumSize = 64 << 10
    static let maximumURLLength = 8 << 10

    /// The resume facts: the engine's one model (`ResumeState`), ranges and seams included.
    var state: ResumeState
    var partialFile: PartialFile
    /// The state directory it was made in (for messages; never used to open anything).
    var stateDirectory: String
    var createdAt: Date

    init(state: ResumeState, partialFile: PartialFile, stateDirectory: String, createdAt: Date) {
        self.state = state
        self.partialFile = partialFile
        self.stateDirectory = stateDirectory
        self.createdAt = createdAt
    }

    /// The payload's keys beside the state's own (`ResumeState`'s coding: `offset` for the
    /// verified prefix, the URL as a string): the blob names the length `expectedLength`, as
    /// version 1 always did, so data made before the state was one value reads back unchanged.
    private enum CodingKeys: String, CodingKey {
        case expectedLength, partialFile, stateDirectory, createdAt
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        state = try ResumeState(from: decoder)
        state.totalLength = try container.decodeIfPresent(Int64.self, forKey: .expectedLength)
        partialFile = try container.decode(PartialFile.self, forKey: .partialFile)
        stateDirectory = try container.decode(String.self, forKey: .stateDirectory)
        createdAt = try container.decode(Date.self, forKey: .createdAt)
    }

    func encode(to encoder: any Encoder) throws {
        var shared = state
        shared.totalLength = nil   // written under the blob's own key below
        try shared.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(state.totalLength, forKey: .expectedLength)
        try container.encode(partialFile, forKey: .partialFile)
        try container.encode(stateDirectory, forKey: .stateDirectory)
        try container.encode(createdAt, forKey: .createdAt)
    }

    /// Sealed resume data for `state`, a download whose partial file is in `directory`; nil when
    /// it cannot be continued (no stored byte, no validator, a partial file shorter than the
    /// state promises). Local and background tasks make their data here alike.
    static func make(for state: ResumeState, in directory: SessionDirectory) -> Data? {
        guard state.isContinuable, let file = try? directory.partialFile(for: state.id), file.size >= state.storedEnd else {
            return nil
        }
        let data = ResumeData(state: state,
                              partialFile: .init(name: partialFileName(for: state.id), device: file.device, inode: file.inode,
                                                 modified: file.modified),
                              stateDirectory: directory.root.path, createdAt: Date())
        return try? data.encoded(key: directory.key)
    }

    /// What the engine continues from, checked against the partial file in `directory`: gone
    /// means a clean restart at zero; replaced or shorter than promised means the data is stale.
    func continuedState(in directory: SessionDirectory) throws -> ResumeState {
        guard let file = try directory.partialFile(for: state.id) else {
            return ResumeState(id: state.id, url: state.url, entityTag: nil, lastModified: nil, totalLength: nil, verifiedOffset: 0)
        }
        guard file.device == partialFile.device, file.inode == partialFile.inode else {
            throw ResumeDataError.stale.with("the partial file of this resume data was replaced since it was made")
        }
        guard file.modified == partialFile.modified else {
            throw ResumeDataError.stale.with("the partial file was written since this resume data was made (newer resume data supersedes it)")
        }
        guard file.size >= state.storedEnd else {
            throw ResumeDataError.stale.with("the partial file holds \(file.size) bytes; the resume data promises \(state.storedEnd)")
        }
        return state
    }

    /// The partial file's name for a download id.
    static func partialFileName(for id: UUID) -> String { id.uuidString + ".download.part" }

    // MARK: encoding

    func encoded(key: [UInt8]) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return Self.sealed(try encoder.encode(self), magic: Self.magic, version: Self.version, key: key)
    }

    /// `payload` framed as described above (magic, version, length, payload, MAC keyed by `key`);
    /// upload resume data shares the framing under its own magic.
    static func sealed(_ payload: Data, magic: [UInt8], version: UInt8, key: [UInt8]) -> Data {
        var data = Data(magic)
        data.append(version)
        withUnsafeBytes(of: UInt32(payload.count).bigEndian) { data.append(contentsOf: $0) }
        data.append(payload)
        data.append(contentsOf: HMACSHA256.authenticationCode(key: key, message: [data]))
        return data
    }

    // MARK: decoding

    /// Decodes and validates `data`, authenticated with `key`; throws `ResumeDataError`.
    static func decode(_ data: Data, key: [UInt8]) throws -> ResumeData {
        let payload = try unsealed(data, magic: magic, version: version, key: key, foreignHint: foreignFormatHint)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let value: ResumeData
        do {
            value = try decoder.decode(ResumeData.self, from: payload)
        } catch {
            throw ResumeDataError.malformed.with("resume data payload does not decode: \(error)")
        }
        try value.validate()
        return value
    }

    /// The field rules, applied even to authentic data (a bug or a leaked key must not turn into
    /// a header injection or a path outside the session).
    func validate() throws {
        func reject(_ reason: String) -> ResumeDataError { ResumeDataError.malformed.with("invalid resume data: \(reason)") }
        let url = state.url
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty else {
            throw reject("the URL is not http or https")
        }
        guard url.absoluteString.utf8.count <= Self.maximumURLLength,
              url.absoluteString.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw reject("the URL is too long or not plain ASCII")
        }
        guard state.verifiedOffset >= 0, state.hasStoredBytes else {
            throw reject("offset \(state.verifiedOffset) (resume data always covers stored bytes)")
        }
        guard state.validator != nil else {
            throw reject("no validator (without ETag or Last-Modified a resume could splice two versions)")
        }
        // Offsets, ranges, seams and validators follow the engine's rules for its own state.
        do { try state.validate() } catch let error as DownloadError { throw reject(error.description) }
        guard partialFile.name == Self.partialFileName(for: state.id) else {
            throw reject("the partial file name does not belong to download \(state.id.uuidString)")
        }
    }

    /// Says what the bytes look like when they are not ours, for the error message.
    /// The payload of data framed by `sealed`, checked as hostile: size and framing first, then
    /// the MAC (so no byte of a forged blob is ever parsed); throws `ResumeDataError`.
    static func unsealed(_ data: Data, magic: [UInt8], version: UInt8, key: [UInt8],
                         foreignHint: ([UInt8]) -> String) throws -> Data {
        let headerSize = magic.count + 1 + 4
        let bytes = [UInt8](data.prefix(maximumSize + 1))
        guard bytes.count <= maximumSize else {
            throw ResumeDataError.malformed.with("resume data is \(data.count) bytes, more than any this library makes (\(maximumSize))")
        }
        guard bytes.count >= headerSize + HMACSHA256.length, Array(bytes[0..<magic.count]) == magic else {
            throw ResumeDataError.malformed.with(foreignHint(bytes))
        }
        let found = bytes[magic.count]
        guard found == version else {
            throw ResumeDataError.unsupportedVersion.with(
                "resume data version \(found) is not supported (this library reads version \(version))")
        }
        let length = bytes[(magic.count + 1)..<headerSize].reduce(0) { $0 << 8 | Int($1) }
        guard length == bytes.count - headerSize - HMACSHA256.length else {
            throw ResumeDataError.malformed.with("resume data is truncated or has bytes appended")
        }
        let signed = Data(bytes[0..<(headerSize + length)])
        let mac = Array(bytes[(headerSize + length)...])
        guard HMACSHA256.isEqual(mac, HMACSHA256.authenticationCode(key: key, message: [signed])) else {
            throw ResumeDataError.notAuthentic
        }
        return Data(bytes[headerSize..<(headerSize + length)])
    }

    private static func foreignFormatHint(_ bytes: [UInt8]) -> String {
        let prefix = String(decoding: bytes.prefix(8), as: UTF8.self)
        if prefix.hasPrefix("bplist") || prefix.hasPrefix("<?xml") {
            return "this is Apple's resume data (a property list naming a temporary file on another system); "
                + "it cannot be resumed here: start the download again"
        }
        if bytes.isEmpty { return "the resume data is empty" }
        return "the data is not resume data from ResumableURLSession"
    }
}
