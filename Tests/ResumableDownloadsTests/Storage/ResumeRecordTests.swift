import Foundation
import LinuxSystem
import Testing
import TestSupport
@testable import ResumableDownloads

@Suite("Resume record")
struct ResumeRecordTests {
    static let digest = String(repeating: "ab", count: 32)

    func sample(id: UUID = UUID()) -> ResumeRecord {
        var record = ResumeRecord(id: id, url: URL(string: "https://example.invalid/a.iso")!,
                                  destination: URL(fileURLWithPath: "/tmp/a.iso"),
                                  expectedSHA256: Self.digest, totalLength: 1000, allowsExpensive: false,
                                  now: Date(timeIntervalSince1970: 1_700_000_000))
        record.entityTag = "\"v1\""
        record.lastModified = "Mon, 01 Jan 2024 00:00:00 GMT"
        record.verifiedOffset = 500
        record.attempts = 3
        return record
    }

    /// A checked state directory in a scratch directory, which the caller keeps alive.
    func state() throws -> (CheckedDirectory, URL, ScratchDirectory) {
        let scratch = try ScratchDirectory("rr")
        let url = scratch.url("state")
        return (try CheckedDirectory.open(url.path, policy: .privateState, creating: true), url, scratch)
    }

    @Test func roundTripsThroughJSON() throws {
        let record = sample()
        let data = try ResumeRecord.encoder().encode(record)
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("\"version\" : 2"))
        #expect(text.contains("\"offset\" : 500"), "the resume facts under ResumeState's keys")
        #expect(!text.contains("verifiedOffset") && !text.contains("\"state\""), "one flat object, no copy of a fact")
        #expect(!text.contains("partialPath"), "the partial path is derived, never stored")
        #expect(try ResumeRecord.decode(data) == record)
    }

    /// A record as version 1 wrote it (the resume facts as fields of the record, the prefix under
    /// `verifiedOffset`), with every optional field a version-1 agent could store.
    static let version1File = """
    {
      "allowsConstrained" : false,
      "allowsExpensive" : false,
      "attempts" : 3,
      "createdAt" : "2023-11-14T22:13:20Z",
      "destination" : "file:///tmp/a.iso",
      "entityTag" : "\\"v1\\"",
      "expectedLength" : 1000,
      "expectedSHA256" : "\(String(repeating: "ab", count: 32))",
      "id" : "5B1F6C1E-2D7A-4E43-9C1B-0E1F2A3B4C5D",
      "lastModified" : "Mon, 01 Jan 2024 00:00:00 GMT",
      "maximumConnections" : 4,
      "observedEntityTag" : "\\"v1\\"",
      "priority" : 0.75,
      "ranges" : [ [ 700, 1000 ] ],
      "seams" : [ 700 ],
      "totalLength" : 1000,
      "updatedAt" : "2023-11-14T22:13:20Z",
      "url" : "https://example.invalid/a.iso",
      "verifiedOffset" : 500,
      "version" : 1
    }
    """

    @Test func aVersion1RecordReadsBackWithItsFactsAndIsRewrittenAsVersion2() throws {
        let (state, url, scratch) = try state()
        defer { withExtendedLifetime(scratch) {} }
        let name = "5B1F6C1E-2D7A-4E43-9C1B-0E1F2A3B4C5D.json"
        #expect(FileManager.default.createFile(atPath: url.appendingPathComponent(name).path,
                                               contents: Data(Self.version1File.utf8), attributes: [.posixPermissions: 0o600]))
        var record = try ResumeRecord.read(name, in: state)
        #expect(record.id.uuidString == "5B1F6C1E-2D7A-4E43-9C1B-0E1F2A3B4C5D" && record.verifiedOffset == 500 && record.ranges == [[700, 1000]] && record.seams == [700])
        #expect(record.entityTag == "\"v1\"" && record.lastModified == "Mon, 01 Jan 2024 00:00:00 GMT" && record.totalLength == 1000)
        #expect(record.url == URL(string: "https://example.invalid/a.iso")! && record.destination.path == "/tmp/a.iso")
        #expect(record.priority == 0.75 && record.maximumConnections == 4 && record.allowsConstrained == false)
        #expect(record.expectedLength == 1000 && record.attempts == 3 && record.observedEntityTag == "\"v1\"")
        #expect(record.version == ResumeRecord.currentVersion, "migrated on load")
        record.attempts += 1
        try record.write(to: state)
        #expect(try ResumeRecord.read(name, in: state) == record)
    }

    @Test func thePartialPathIsDerivedFromTheDestination() throws {
        let json = """
        {"version":1,"id":"\(UUID().uuidString)","url":"http://h/x","destination":"file:///tmp/x",
         "partialPath":"/etc/shadow","verifiedOffset":0,"allowsExpensive":true,"attempts":0,
         "createdAt":"2024-01-01T00:00:00Z","updatedAt":"2024-01-01T00:00:00Z"}
        """
        let record = try ResumeRecord.decode(Data(json.utf8))
        #expect(record.partialPath == "/tmp/x.part")
        #expect(record.entityTag == nil)
        #expect(record.expectedLength == nil)
    }

    @Test func validatorPrefersStrongETag() {
        var record = sample()
        #expect(record.validator == "\"v1\"")
        record.entityTag = nil
        #expect(record.validator == "Mon, 01 Jan 2024 00:00:00 GMT")
        record.lastModified = nil
        #expect(record.validator == nil)
    }

    @Test func rejectsFutureVersions() throws {
        var object = try JSONSerialization.jsonObject(with: ResumeRecord.encoder().encode(sample())) as! [String: Any]
        object["version"] = 99
        let data = try JSONSerialization.data(withJSONObject: object)
        #expect(throws: DownloadError.self) { try ResumeRecord.decode(data) }
    }

    @Test(arguments: [
        ("a record for another id", { @Sendable (r: inout ResumeRecord) in r.id = UUID() }),
        ("a negative offset", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = -1 }),
        ("an offset past the length", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 2000 }),
        ("a destination with ..", { @Sendable (r: inout ResumeRecord) in r.destination = URL(fileURLWithPath: "/tmp/x/../../etc/passwd") }),
        ("a relative destination", { @Sendable (r: inout ResumeRecord) in r.destination = URL(string: "x/y")! }),
        ("a file URL to download", { @Sendable (r: inout ResumeRecord) in r.url = URL(string: "file:///etc/shadow")! }),
        ("a short digest", { @Sendable (r: inout ResumeRecord) in r.expectedSHA256 = "ab" }),
        ("a negative expected length", { @Sendable (r: inout ResumeRecord) in r.expectedLength = -5 }),
        ("a header smuggled into If-Range", { @Sendable (r: inout ResumeRecord) in r.entityTag = "\"a\"\r\nX-Evil: 1" }),
        ("ranges without a length", { @Sendable (r: inout ResumeRecord) in r.totalLength = nil; r.verifiedOffset = 0; r.ranges = [[10, 20]] }),
        ("a range past the length", { @Sendable (r: inout ResumeRecord) in r.ranges = [[900, 1001]] }),
        ("a range inside the prefix", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 100; r.ranges = [[50, 200]] }),
        ("a range touching the prefix", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 100; r.ranges = [[100, 200]] }),
        ("ranges out of order", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 0; r.ranges = [[500, 600], [100, 200]] }),
        ("overlapping ranges", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 0; r.ranges = [[100, 300], [200, 400]] }),
        ("an empty range", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 0; r.ranges = [[100, 100]] }),
        ("a range of three numbers", { @Sendable (r: inout ResumeRecord) in r.verifiedOffset = 0; r.ranges = [[1, 2, 3]] }),
        ("too many ranges", { @Sendable (r: inout ResumeRecord) in
            r.totalLength = 1 << 40; r.verifiedOffset = 0; r.ranges = (1...1025).map { [Int64($0) * 10, Int64($0) * 10 + 5] } }),
        ("a seam at zero", { @Sendable (r: inout ResumeRecord) in r.seams = [0] }),
        ("a seam past the length", { @Sendable (r: inout ResumeRecord) in r.seams = [1000] }),
        ("a proxy that is no URL", { @Sendable (r: inout ResumeRecord) in r.sources = JobSources(proxy: "evil host:1") }),
        ("a proxy smuggling a header", { @Sendable (r: inout ResumeRecord) in r.sources = JobSources(proxy: "http://p:1/\r\nX: 1") }),
        ("a file mirror", { @Sendable (r: inout ResumeRecord) in r.sources = JobSources(mirrors: [URL(string: "file:///etc/shadow")!]) }),
        ("too many mirrors", { @Sendable (r: inout ResumeRecord) in
            r.sources = JobSources(mirrors: Array(repeating: URL(string: "http://m.invalid/f")!, count: 257)) }),
        ("a mirror URL too long", { @Sendable (r: inout ResumeRecord) in
            r.sources = JobSources(mirrors: [URL(string: "http://m.invalid/" + String(repeating: "a", count: 9000))!]) }),
        ("too many piece hashes", { @Sendable (r: inout ResumeRecord) in
            r.sources = JobSources(pieceHashes: PieceHashes(length: 1, sha256: Array(repeating: digest, count: 8193), fileLength: 8193)) }),
    ] as [(String, @Sendable (inout ResumeRecord) -> Void)])
    func rejectsRecordsThatDoNotHoldTogether(_ label: String, _ edit: @Sendable (inout ResumeRecord) -> Void) {
        let id = UUID()
        var record = sample(id: id)
        #expect(throws: Never.self) { try record.validate(name: ResumeRecord.fileName(for: id)) }
        edit(&record)
        #expect(throws: ResumeRecord.Invalid.self, "\(label)") { try record.validate(name: ResumeRecord.fileName(for: id)) }
    }

    /// A job's own sources (issue 34) round-trip, and a record whose piece hashes do not
    /// cover their file is not read (decoding checks them as a client's value).
    @Test func aJobsSourcesRoundTripAndBadPieceHashesAreNotRead() throws {
        var record = sample()
        let pieces = try #require(PieceHashes(length: 400, sha256: Array(repeating: Self.digest, count: 3), fileLength: 1000))
        record.sources = JobSources(proxy: "http://user:secret@cache.invalid:3128",
                                    mirrors: [URL(string: "https://mirror.invalid/a.iso")!], pieceHashes: pieces)
        #expect(throws: Never.self) { try record.validate(name: ResumeRecord.fileName(for: record.id)) }
        let data = try ResumeRecord.encoder().encode(record)
        #expect(try ResumeRecord.decode(data) == record)
        let shortened = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\"fileLength\" : 1000", with: "\"fileLength\" : 5000")
        #expect(throws: (any Error).self) { try ResumeRecord.decode(Data(shortened.utf8)) }
        // Only what the options name of their own is kept.
        #expect(JobSources(DownloadOptions()) == nil)
        var options = DownloadOptions()
        options.mirrors = [URL(string: "http://m.invalid/a.iso")!]
        #expect(JobSources(options) == JobSources(mirrors: options.mirrors))
    }

    /// Piece hashes beyond the record's 8192 go to a side file beside it, written once, and come
    /// back whole after a restart: the record keeps the side file's digest, not the hashes.
    @Test func manyPieceHashesLiveInASideFileAndComeBack() throws {
        let (state, url, scratch) = try state()
        defer { withExtendedLifetime(scratch) {} }
        var record = sample()
        let count = 9000
        let digests = (0..<count).map { SHA256.hex(Array("piece \($0)".utf8)) }
        let pieces = try #require(PieceHashes(length: 1024, sha256: digests, fileLength: Int64(count) * 1024 - 100))
        var options = DownloadOptions()
        options.pieceHashes = pieces
        record.sources = JobSources(options)
        let file = try #require(record.sources?.pieceFile, "over 8192 hashes get a side file")
        try record.write(to: state)
        let name = ResumeRecord.fileName(for: record.id)
        let names = try FileManager.default.contentsOfDirectory(atPath: url.path).sorted()
        #expect(names == [name, file.fileName(for: record.id)].sorted())
        let recordSize = try #require(try FileManager.default.attributesOfItem(atPath: url.path + "/" + name)[.size] as? Int)
        #expect(recordSize < 8 << 10, "the record stays small: \(recordSize) bytes")
        let read = try ResumeRecord.read(name, in: state)
        #expect(read.sources?.pieceHashes == pieces)
        #expect(read == record)
        // Written once: a checkpoint leaves the side file alone.
        let before = try FileManager.default.attributesOfItem(atPath: url.path + "/" + file.fileName(for: record.id))[.modificationDate] as? Date
        record.verifiedOffset = 900
        try record.write(to: state)
        let after = try FileManager.default.attributesOfItem(atPath: url.path + "/" + file.fileName(for: record.id))[.modificationDate] as? Date
        #expect(before == after)
        // Up to 8192 stay in the record, as before.
        options.pieceHashes = try #require(PieceHashes(length: 1024, sha256: Array(digests.prefix(8192)), fileLength: 8192 * 1024))
        #expect(JobSources(options)?.pieceFile == nil && JobSources(options)?.pieceHashes == options.pieceHashes)
    }

    /// A side file of piece hashes is read back as input: edited, cut, grown, swapped for
    /// another job's, replaced by a link or missing, it is refused (and its record with it:
    /// moved aside by the agent) without a crash; and a record naming impossible counts or
    /// lengths is refused before any file is opened.
    @Test(arguments: ["edited", "cut", "grown", "swapped", "link", "missing", "fifo"])
    func aHostilePieceFileIsRefused(_ attack: String) throws {
        let (state, url, scratch) = try state()
        defer { withExtendedLifetime(scratch) {} }
        func pieces(_ seed: Int) throws -> PieceHashes {
            try #require(PieceHashes(length: 1024, sha256: (0..<8200).map { SHA256.hex(Array("\(seed) \($0)".utf8)) },
                                     fileLength: 8200 * 1024))
        }
        var record = sample()
        var options = DownloadOptions()
        options.pieceHashes = try pieces(1)
        record.sources = JobSources(options)
        try record.write(to: state)
        let side = url.path + "/" + record.sources!.pieceFile!.fileName(for: record.id)
        var bytes = try #require(FileManager.default.contents(atPath: side))
        switch attack {
        case "edited": bytes[bytes.count - 10] = bytes[bytes.count - 10] == UInt8(ascii: "a") ? UInt8(ascii: "b") : UInt8(ascii: "a")
        case "cut": bytes = bytes.prefix(bytes.count - 65)
        case "grown": bytes += Data(repeating: UInt8(ascii: "0"), count: 65)
        case "swapped": bytes = Data(PieceFile.bytes(try pieces(2)))
        default: break
        }
        unlink(side)
        switch attack {
        case "link":
            let elsewhere = url.path + "-elsewhere.pieces"
            FileManager.default.createFile(atPath: elsewhere, contents: bytes)
            symlink(elsewhere, side)
        case "fifo": mkfifo(side, 0o600)
        case "missing": break
        default: FileManager.default.createFile(atPath: side, contents: bytes, attributes: [.posixPermissions: 0o600])
        }
        #expect(throws: (any Error).self, "\(attack)") { try ResumeRecord.read(ResumeRecord.fileName(for: record.id), in: state) }
    }

    @Test func impossiblePieceFileReferencesAreRefusedWithoutACrash() throws {
        let id = UUID()
        for (count, length, fileLength, digest) in [(9000, Int64(1024), Int64(9000 * 1024), "xyz"),
                                                     (9000, Int64(2), Int64.max, Self.digest),
                                                     (Int.max, Int64(1), Int64.max, Self.digest),
                                                     (-1, Int64(1024), Int64(1), Self.digest),
                                                     (9000, Int64(0), Int64(1), Self.digest),
                                                     (9000, Int64(1024), Int64(-5), Self.digest),
                                                     (100, Int64(1024), Int64(100 * 1024), Self.digest)] {
            var record = sample(id: id)
            var sources = JobSources()
            sources.pieceFile = PieceFile(length: length, fileLength: fileLength, count: count, sha256: digest)
            record.sources = sources
            #expect(throws: ResumeRecord.Invalid.self, "\(count) \(length) \(fileLength)") {
                try record.validate(name: ResumeRecord.fileName(for: id))
            }
        }
        // The piece count of a hostile length near Int64.max no longer overflows.
        #expect(PieceHashes(length: 2, sha256: [Self.digest], fileLength: .max) == nil)
        #expect(PieceHashes(length: .max, sha256: [Self.digest], fileLength: .max) != nil)
    }

    @Test func rangesAndSeamsRoundTripAndDescribeTheDurableBytes() throws {
        let id = UUID()
        var record = sample(id: id)
        var durable = RangeSet<Int64>(0..<100)
        durable.insert(contentsOf: 300..<400)
        durable.insert(contentsOf: 700..<1000)
        record.state.setDurable(durable)
        record.seams = [300, 700]
        #expect(record.verifiedOffset == 100)
        #expect(record.ranges == [[300, 400], [700, 1000]])
        #expect(throws: Never.self) { try record.validate(name: ResumeRecord.fileName(for: id)) }
        let decoded = try ResumeRecord.decode(try ResumeRecord.encoder().encode(record))
        #expect(decoded.durable == durable)
        #expect(decoded.seamSet == [300, 700])
        // Without a prefix every range is listed; one prefix alone lists none.
        record.state.setDurable(RangeSet(200..<300))
        #expect(record.verifiedOffset == 0 && record.ranges == [[200, 300]])
        record.state.setDurable(RangeSet(0..<300))
        #expect(record.verifiedOffset == 300 && record.ranges == nil)
    }

    @Test func atomicWriteReplacesAndLeavesNoTemporary() throws {
        let (state, url, scratch) = try state()
        defer { withExtendedLifetime(scratch) {} }
        var record = sample()
        try record.write(to: state)
        record.verifiedOffset = 900
        try record.write(to: state)
        #expect(try ResumeRecord.read(ResumeRecord.fileName(for: record.id), in: state).verifiedOffset == 900)
        #expect(try FileManager.default.contentsOfDirectory(atPath: url.path) == [ResumeRecord.fileName(for: record.id)])
    }

    @Test func atomicWriteFailureKeepsTheOldRecord() throws {
        let (state, url, scratch) = try state()
        defer { withExtendedLifetime(scratch) {} }
        let record = sample()
        let name = ResumeRecord.fileName(for: record.id)
        try record.write(to: state)
        // A directory squatting on the temporary name makes the write fail before the rename.
        try FileManager.default.createDirectory(atPath: url.path + "/" + name + ".tmp", withIntermediateDirectories: false)
        var changed = record
        changed.verifiedOffset = 1
        #expect(throws: DownloadError.self) { try changed.write(to: state) }
        #expect(try ResumeRecord.read(name, in: state).verifiedOffset == 500)
    }

    @Test func aPlantedLinkIsNeverReadAsARecord() throws {
        let (state, url, scratch) = try state()
        defer { withExtendedLifetime(scratch) {} }
        let record = sample()
        let name = ResumeRecord.fileName(for: record.id)
        let elsewhere = url.path + "-elsewhere.json"
        FileManager.default.createFile(atPath: elsewhere, contents: try ResumeRecord.encoder().encode(record))
        defer { unlink(elsewhere) }
        symlink(elsewhere, url.path + "/" + name)
        #expect(throws: DownloadError.untrustedFile) { try ResumeRecord.read(name, in: state) }
    }

    /// Bounded, seeded fuzzing: mutated records never crash the parser, and whatever it accepts
    /// passes validation (offsets, paths and ids that hold together).
    @Test(arguments: [1 as UInt64, 2, 3, 4])
    func fuzzedRecordsNeverCrashAndNeverValidateBadly(seed: UInt64) throws {
        var random = SeededRandom(seed: seed)
        let id = UUID()
        let name = ResumeRecord.fileName(for: id)
        let base = Array(try ResumeRecord.encoder().encode(sample(id: id)))
        let fragments: [[UInt8]] = ["-1", "..", "/", "\"", "{", "}", "null", "1e400", "\\u0000", "99999999999999999999",
                                    "\"file:///etc/passwd\"", "\"../x\"", "[]", "true", ","].map { Array($0.utf8) }
        for _ in 0..<2500 {
            var bytes = base
            for _ in 0..<random.next(upTo: 4) + 1 {
                let position = random.next(upTo: bytes.count)
                switch random.next(upTo: 4) {
                case 0: bytes[position] = UInt8(truncatingIfNeeded: random.next(upTo: 256))
                case 1: bytes.remove(at: position)
                case 2: bytes.insert(contentsOf: fragments[random.next(upTo: fragments.count)], at: position)
                default: bytes.removeSubrange(position..<min(bytes.count, position + random.next(upTo: 16)))
                }
                if bytes.isEmpty { bytes = [0x7b] }
            }
            guard let record = try? ResumeRecord.decode(Data(bytes)) else { continue }
            if (try? record.validate(name: name)) != nil {
                #expect(record.id == id)
                #expect(record.verifiedOffset >= 0)
                #expect(record.destination.path.hasPrefix("/") && !record.destination.path.contains("/../"))
                #expect(["http", "https"].contains(record.url.scheme?.lowercased() ?? ""))
            }
        }
    }

    /// A legal file name of 251-255 bytes leaves no room for `.part`: the partial is shortened
    /// (whole characters, a hash of the full name), the file keeps its name (issue 21).
    @Test func aLongFileNameGetsAShortenedPartialName() {
        #expect(ResumeRecord.partialName(for: "x.iso") == "x.iso.part")
        for length in 248...255 {
            let name = String(repeating: "é", count: 100) + String(repeating: "b", count: length - 200)
            #expect(name.utf8.count == length)
            let partial = ResumeRecord.partialName(for: name)
            #expect(partial.utf8.count <= 255, "\(length): \(partial.utf8.count)")
            if length + 5 <= 255 {
                #expect(partial == name + ".part")
            } else {
                #expect(partial.hasPrefix(String(repeating: "é", count: 100)) && partial.hasSuffix(".part"), "\(partial)")
            }
        }
        let one = String(repeating: "z", count: 254) + "1", two = String(repeating: "z", count: 254) + "2"
        #expect(ResumeRecord.partialName(for: one) != ResumeRecord.partialName(for: two), "same beginning, different partials")
        // Whole characters only: a two-byte character is never cut in half.
        let accented = "b" + String(repeating: "é", count: 127)
        #expect(accented.utf8.count == 255)
        let partial = ResumeRecord.partialName(for: accented)
        #expect(partial.utf8.count <= 255 && partial.hasPrefix("bé") && partial.hasSuffix(".part"))
        #expect(String(decoding: Array(partial.utf8), as: UTF8.self) == partial, "valid UTF-8")

        var record = ResumeRecord(id: UUID(), url: URL(string: "http://h/f")!, destination: URL(fileURLWithPath: "/tmp/" + one),
                                  expectedSHA256: nil, totalLength: nil, allowsExpensive: true)
        #expect(record.partialPath == "/tmp/" + ResumeRecord.partialName(for: one))
        #expect(throws: Never.self) { try record.validate(name: ResumeRecord.fileName(for: record.id)) }
        record.destination = URL(fileURLWithPath: "/x")
        #expect(record.partialPath == "/x.part")
    }
}

/// xorshift64*: deterministic, so a failing fuzz case reproduces from its seed.
struct SeededRandom {
    private var state: UInt64
    init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 | 1 }
    mutating func next() -> UInt64 {
        state ^= state >> 12; state ^= state << 25; state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }
    mutating func next(upTo bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }
}
