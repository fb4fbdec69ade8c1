import Foundation
import LinuxSystem
import ResumableDownloads
import Testing
@testable import ReachabilityAgent
import TestSupport

/// Upload jobs in the service, offline (nothing is sent): a request without the caller's open
/// file is refused, and records found at start are input: a job whose file is still the one
/// queued waits for a path, one whose file was replaced ends with the reason, a bad record is
/// moved aside.
@Suite("Agent service upload jobs")
struct AgentServiceUploadJobTests {
    static func record(_ file: URL, id: UUID = UUID()) throws -> UploadJobRecord {
        let opened = try FileDescriptor.openForReading(file.path)
        defer { opened.close() }
        let status = try opened.status()
        return UploadJobRecord(id: id, url: URL(string: "http://192.0.2.9/ietf/")!, filePath: file.path,
                               file: UploadFileIdentity(status), protocolChoice: .tus, method: "POST",
                               allowsPlainRetry: false, owner: 0)
    }

    @Test func aRequestWithoutTheOpenFileIsRefused() async throws {
        let scratch = try ScratchDirectory("au")
        let service = try AgentServiceTests.offlineService(scratch.url("state"), events: .init())
        let reply = await service.handle(.addUpload(url: URL(string: "http://192.0.2.9/u")!, UploadJobRequest(file: "/etc/shadow")),
                                         id: .number(1))
        #expect(reply.error?.code == .invalidArgument)
        #expect(reply.error?.message.contains("must carry the open file") == true)
        #expect(await service.uploadRows(visibleTo: 0).isEmpty)
        await service.shutdown()
    }

    @Test func recordsAreCheckedAtStart() async throws {
        let scratch = try ScratchDirectory("au")
        let state = scratch.url("state")
        let events = AgentServiceTests.EventSink()
        let service = try AgentServiceTests.offlineService(state, events: events)
        let kept = scratch.url("kept.jpg"), replaced = scratch.url("replaced.jpg")
        try Data(repeating: 1, count: 4096).write(to: kept)
        try Data(repeating: 2, count: 4096).write(to: replaced)
        let store = try UploadJobStore(stateDirectory: state.path)
        let keptRecord = try Self.record(kept), replacedRecord = try Self.record(replaced)
        try store.save(keptRecord)
        try store.save(replacedRecord)
        // Another file under the queued name (a new inode): never sent in its place.
        try FileManager.default.removeItem(at: replaced)
        try Data(repeating: 3, count: 4096).write(to: replaced)
        var bad = keptRecord
        bad.id = UUID()
        bad.filePath = "relative/path"
        try Data(ControlCodec.encode(bad)).write(to: state.appendingPathComponent("uploads/\(bad.id.uuidString.lowercased()).json"))

        await service.start()
        let rows = await service.uploadRows(visibleTo: 0)
        #expect(rows.count == 2)
        let keptRow = try #require(rows.first { $0.destination == kept.path })
        #expect(keptRow.direction == "upload" && !keptRow.state.isFinal, "\(keptRow)")
        let replacedRow = try #require(rows.first { $0.destination == replaced.path })
        #expect(replacedRow.state == .failed)
        #expect(replacedRow.error?.contains("not the file that was queued") == true, "\(replacedRow)")
        let names = try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("uploads").path)
        #expect(names.contains("\(bad.id.uuidString.lowercased()).json.bad"), "\(names)")
        #expect(!names.contains("\(replacedRecord.id.uuidString.lowercased()).json"), "a job ended for good loses its record")
        #expect(events.all.contains { $0.contains(#""type":"upload","event":"restored""#) })
        await service.shutdown()
        // Stopped for the shutdown, not ended: the record stays for the next start.
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("uploads/\(keptRecord.id.uuidString.lowercased()).json").path))
    }
}
