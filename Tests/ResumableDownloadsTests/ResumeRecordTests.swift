import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Resume record")
struct ResumeRecordTests {
    func sample() -> ResumeRecord {
        var record = ResumeRecord(id: UUID(), url: URL(string: "https://example.invalid/a.iso")!,
                                  destination: URL(fileURLWithPath: "/tmp/a.iso"), partialPath: "/tmp/a.iso.part",
                                  expectedSHA256: "ab", totalLength: 1000, allowsExpensive: false,
                                  now: Date(timeIntervalSince1970: 1_700_000_000))
        record.entityTag = "\"v1\""
        record.lastModified = "Mon, 01 Jan 2024 00:00:00 GMT"
        record.verifiedOffset = 500
        record.attempts = 3
        return record
    }

    @Test func roundTripsThroughJSON() throws {
        let record = sample()
        let data = try ResumeRecord.encoder().encode(record)
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("\"version\" : 1"))
        #expect(text.contains("\"verifiedOffset\" : 500"))
        #expect(try ResumeRecord.decode(data) == record)
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

    @Test func decodesRecordsWithoutOptionalFields() throws {
        let json = """
        {"version":1,"id":"\(UUID().uuidString)","url":"http://h/x","destination":"file:///tmp/x",
         "partialPath":"/tmp/x.part","verifiedOffset":0,"allowsExpensive":true,"attempts":0,
         "createdAt":"2024-01-01T00:00:00Z","updatedAt":"2024-01-01T00:00:00Z"}
        """
        let record = try ResumeRecord.decode(Data(json.utf8))
        #expect(record.entityTag == nil)
        #expect(record.expectedLength == nil)
    }

    @Test func atomicWriteReplacesAndLeavesNoTemporary() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rr-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("r.json").path
        var record = sample()
        try record.write(to: path)
        record.verifiedOffset = 900
        try record.write(to: path)
        #expect(try ResumeRecord.read(from: path).verifiedOffset == 900)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["r.json"])
    }

    @Test func atomicWriteFailureKeepsTheOldRecord() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rr-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("r.json").path
        try sample().write(to: path)
        // A directory squatting on the temporary name makes the write fail before the rename.
        try FileManager.default.createDirectory(atPath: path + ".tmp", withIntermediateDirectories: false)
        var changed = sample()
        changed.verifiedOffset = 1
        #expect(throws: DownloadError.self) { try changed.write(to: path) }
        #expect(try ResumeRecord.read(from: path).verifiedOffset == 500)
    }
}
