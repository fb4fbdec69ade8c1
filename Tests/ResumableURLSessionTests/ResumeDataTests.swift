import Foundation
import Testing
@testable import ResumableURLSession
import ResumableDownloads
import TestSupport

@Suite("Resume data: encoding and validation")
struct ResumeDataTests {
    static let key = [UInt8](repeating: 7, count: 32)
    static let otherKey = [UInt8](repeating: 8, count: 32)

    static func sample(_ edit: (inout ResumeData) -> Void = { _ in }) -> ResumeData {
        let id = UUID(uuidString: "5B0E3C7A-1F6D-4E55-9C3B-2A8D7E6F1A2B")!
        let state = ResumeState(id: id, url: URL(string: "http://10.88.0.1/file.bin?x=1")!, entityTag: "\"6790a1b2-500000\"",
                                lastModified: "Tue, 01 Dec 2026 07:00:00 GMT", totalLength: 5_242_880, verifiedOffset: 1_048_576)
        var data = ResumeData(state: state,
                              partialFile: .init(name: ResumeData.partialFileName(for: id), device: 64_769, inode: 1_234_567,
                                                   modified: 1_800_000_000_123_456_789),
                              stateDirectory: "/var/lib/reachability/url-session",
                              createdAt: Date(timeIntervalSince1970: 1_800_000_000))
        edit(&data)
        return data
    }

    @Test func roundTrips() throws {
        let original = Self.sample()
        let blob = try original.encoded(key: Self.key)
        #expect(Array(blob.prefix(9)) == Array("RCHRESUME".utf8))
        #expect(blob[9] == 1, "version byte")
        #expect(try ResumeData.decode(blob, key: Self.key) == original)
        // Survives being written to disk and read back (the seed's recipe), and slicing.
        let scratch = try ScratchDirectory("rd")
        let file = scratch.url("resume-data")
        try blob.write(to: file)
        #expect(try ResumeData.decode(try Data(contentsOf: file), key: Self.key) == original)
        let sliced = (Data([0, 0]) + blob).dropFirst(2)
        #expect(try ResumeData.decode(sliced, key: Self.key) == original)
    }

    /// A task fetched in segments: the ranges and seams go out and come back; a blob from before
    /// they existed (no such keys) still decodes.
    @Test func rangesAndSeamsRoundTrip() throws {
        let original = Self.sample { $0.state.verifiedOffset = 0; $0.state.ranges = [[1_048_576, 2_097_152], [3_145_728, 3_407_872]]; $0.state.seams = [3_145_728] }
        #expect(try ResumeData.decode(try original.encoded(key: Self.key), key: Self.key) == original)
        let older = Self.sample()
        #expect(older.state.ranges == nil && older.state.seams == nil)
        #expect(try ResumeData.decode(try older.encoded(key: Self.key), key: Self.key) == older)
    }

    /// Data made before the state was one value (its payload written field by field, as version
    /// 1 defined it) still decodes to the same state.
    @Test func dataInTheOriginalLayoutStillDecodes() throws {
        let payload = """
        {"createdAt":"2027-01-15T08:00:00Z","entityTag":"\\"6790a1b2-500000\\"","expectedLength":5242880,\
        "id":"5B0E3C7A-1F6D-4E55-9C3B-2A8D7E6F1A2B","lastModified":"Tue, 01 Dec 2026 07:00:00 GMT","offset":1048576,\
        "partialFile":{"device":64769,"inode":1234567,"modified":1800000000123456789,\
        "name":"5B0E3C7A-1F6D-4E55-9C3B-2A8D7E6F1A2B.download.part"},"ranges":[[2097152,3145728]],"seams":[2097152],\
        "stateDirectory":"\\/var\\/lib\\/reachability\\/url-session","url":"http:\\/\\/10.88.0.1\\/file.bin?x=1"}
        """
        let blob = ResumeData.sealed(Data(payload.utf8), magic: ResumeData.magic, version: 1, key: Self.key)
        let decoded = try ResumeData.decode(blob, key: Self.key)
        #expect(decoded == Self.sample { $0.state.ranges = [[2_097_152, 3_145_728]]; $0.state.seams = [2_097_152] })
        // And what this code writes is that layout, key for key.
        let written = try decoded.encoded(key: Self.key)
        #expect(written.dropFirst(14).dropLast(32) == Data(payload.utf8))
    }

    @Test func withoutOptionalFields() throws {
        let original = Self.sample { $0.state.lastModified = nil; $0.state.totalLength = nil }
        #expect(try ResumeData.decode(try original.encoded(key: Self.key), key: Self.key) == original)
    }

    @Test func anotherDirectorysKeyIsNotAuthentic() throws {
        let blob = try Self.sample().encoded(key: Self.otherKey)
        #expect(throws: ResumeDataError.notAuthentic) { try ResumeData.decode(blob, key: Self.key) }
    }

    /// Flipping any single bit anywhere is caught, before any field is believed.
    @Test func everyBitFlipIsRejected() throws {
        let blob = try Self.sample().encoded(key: Self.key)
        for index in blob.indices {
            for bit in [0, 3, 7] {
                var forged = blob
                forged[index] ^= UInt8(1 << bit)
                #expect(throws: (any Error).self, "byte \(index) bit \(bit)") { try ResumeData.decode(forged, key: Self.key) }
            }
        }
    }

    /// A forger who edits the payload (a bigger offset, another URL) and fixes up the length
    /// still lacks the key.
    @Test func editedPayloadIsNotAuthentic() throws {
        let blob = try Self.sample().encoded(key: Self.key)
        let payload = String(decoding: blob[14..<(blob.count - 32)], as: UTF8.self)
        for edited in [payload.replacingOccurrences(of: "1048576", with: "4048576"),
                       payload.replacingOccurrences(of: "10.88.0.1", with: "10.66.6.6")] {
            var forged = Data("RCHRESUME".utf8) + Data([1])
            withUnsafeBytes(of: UInt32(edited.utf8.count).bigEndian) { forged.append(contentsOf: $0) }
            forged += Data(edited.utf8) + blob.suffix(32)
            #expect(throws: ResumeDataError.notAuthentic) { try ResumeData.decode(forged, key: Self.key) }
        }
    }

    @Test func framingErrors() throws {
        let blob = try Self.sample().encoded(key: Self.key)
        #expect(throws: ResumeDataError.malformed) { try ResumeData.decode(Data(), key: Self.key) }
        #expect(throws: ResumeDataError.malformed) { try ResumeData.decode(blob.prefix(20), key: Self.key) }
        #expect(throws: ResumeDataError.malformed) { try ResumeData.decode(blob.dropLast(), key: Self.key) }
        #expect(throws: ResumeDataError.malformed) { try ResumeData.decode(blob + Data([0]), key: Self.key) }
        #expect(throws: ResumeDataError.malformed) { try ResumeData.decode(Data(repeating: 0x41, count: 200), key: Self.key) }
        #expect(throws: ResumeDataError.malformed) { try ResumeData.decode(Data(repeating: 0, count: 70_000), key: Self.key) }
        var newer = blob
        newer[9] = 2
        #expect(throws: ResumeDataError.unsupportedVersion) { try ResumeData.decode(newer, key: Self.key) }
    }

    @Test func applesResumeDataGetsAnExplanation() throws {
        let plist = Data("bplist00\u{d4}\u{1}\u{2}\u{3}NSURLSessionDownloadURL".utf8)
        do {
            _ = try ResumeData.decode(plist, key: Self.key)
            Issue.record("accepted Apple's resume data")
        } catch let error as ResumeDataError {
            #expect(error == .malformed)
            #expect(error.description.contains("Apple's resume data"))
        }
    }

    /// Authentic data with bad fields (a writer bug or a leaked key) is still refused.
    @Test(arguments: [
        Bad("ftp URL") { $0.state.url = URL(string: "ftp://h/f")! },
        Bad("file URL") { $0.state.url = URL(fileURLWithPath: "/etc/shadow") },
        Bad("no host") { $0.state.url = URL(string: "http:///f")! },
        Bad("zero offset") { $0.state.verifiedOffset = 0 },
        Bad("negative offset") { $0.state.verifiedOffset = -5 },
        Bad("offset past the length") { $0.state.totalLength = 100 },
        Bad("no validator") { $0.state.entityTag = nil; $0.state.lastModified = nil },
        Bad("weak ETag") { $0.state.entityTag = "W/\"x\"" },
        Bad("header injection in the ETag") { $0.state.entityTag = "\"x\"\r\nHost: evil.example\r\n\"" },
        Bad("header injection in Last-Modified") { $0.state.lastModified = "Tue\nX: y" },
        Bad("partial file outside the session") { $0.partialFile.name = "../../../../etc/passwd" },
        Bad("another download's partial file") { $0.partialFile.name = ResumeData.partialFileName(for: UUID()) },
        Bad("ranges past the length") { $0.state.ranges = [[2_000_000, 6_000_000]] },
        Bad("a range inside the prefix") { $0.state.ranges = [[500_000, 2_000_000]] },
        Bad("ranges out of order") { $0.state.ranges = [[4_000_000, 4_100_000], [2_000_000, 2_100_000]] },
        Bad("ranges without a length") { $0.state.totalLength = nil; $0.state.ranges = [[2_000_000, 2_100_000]] },
        Bad("a seam past the length") { $0.state.seams = [9_000_000] },
        Bad("no prefix and no ranges") { $0.state.verifiedOffset = 0; $0.state.ranges = [] },
    ])
    func authenticButInvalidFields(_ bad: Bad) throws {
        let blob = try Self.sample(bad.edit).encoded(key: Self.key)
        #expect(throws: ResumeDataError.malformed, "\(bad.label)") { try ResumeData.decode(blob, key: Self.key) }
    }

    struct Bad: CustomTestStringConvertible, Sendable {
        var label: String
        var edit: @Sendable (inout ResumeData) -> Void
        init(_ label: String, _ edit: @escaping @Sendable (inout ResumeData) -> Void) { self.label = label; self.edit = edit }
        var testDescription: String { label }
    }

    /// RFC 4231 test cases 1 and 2.
    @Test func hmacVectors() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(HMACSHA256.authenticationCode(key: [UInt8](repeating: 0x0b, count: 20), message: [Data("Hi There".utf8)]))
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(hex(HMACSHA256.authenticationCode(key: Array("Jefe".utf8), message: [Data("what do ya want ".utf8), Data("for nothing?".utf8)]))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Test case 6: a key longer than the block is hashed first.
        #expect(hex(HMACSHA256.authenticationCode(key: [UInt8](repeating: 0xaa, count: 131),
                                                  message: [Data("Test Using Larger Than Block-Size Key - Hash Key First".utf8)]))
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }
}
