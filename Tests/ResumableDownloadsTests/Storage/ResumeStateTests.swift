import TestSupport
import Foundation
import LinuxSystem
import LinuxReachability
import Synchronization
import Testing
@testable import ResumableDownloads

/// The package-level surface facades use to hand resume state out and take it back.
@Suite("Resume state export and import")
struct ResumeStateTests {
    static let url = URL(string: "http://127.0.0.1:9/file.bin")!

    static func state(_ edit: (inout ResumeState) -> Void = { _ in }) -> ResumeState {
        var state = ResumeState(id: UUID(), url: url, entityTag: "\"abc-123\"", lastModified: nil,
                                totalLength: 10_000, verifiedOffset: 4096)
        edit(&state)
        return state
    }

    @Test func acceptsAWellFormedState() throws {
        try Self.state().validate()
        try Self.state { $0.entityTag = nil; $0.lastModified = "Tue, 01 Dec 2026 07:00:00 GMT" }.validate()
        try Self.state { $0.totalLength = nil }.validate()
    }

    /// The state's JSON (the background protocol's): ranges and seams travel; JSON from before
    /// they existed (the keys a background session always sent) reads back as a prefix.
    @Test func encodesWithItsRangesAndReadsTheOlderForm() throws {
        let segmented = Self.state { $0.verifiedOffset = 0; $0.ranges = [[1024, 2048], [4096, 8192]]; $0.seams = [4096] }
        #expect(try JSONDecoder().decode(ResumeState.self, from: try JSONEncoder().encode(segmented)) == segmented)
        let older = #"{"id":"5B0E3C7A-1F6D-4E55-9C3B-2A8D7E6F1A2B","url":"http://127.0.0.1:9/file.bin","entityTag":"\"abc-123\"","offset":4096,"totalLength":10000}"#
        let decoded = try JSONDecoder().decode(ResumeState.self, from: Data(older.utf8))
        #expect(decoded == Self.state { $0.id = UUID(uuidString: "5B0E3C7A-1F6D-4E55-9C3B-2A8D7E6F1A2B")! })
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(ResumeState.self, from: Data(older.replacingOccurrences(of: "http://127.0.0.1:9/file.bin", with: "").utf8))
        }
    }

    /// A hostile state, shown by its label in test output.
    struct Hostile: CustomTestStringConvertible, Sendable {
        var label: String
        var state: ResumeState
        init(_ label: String, _ state: ResumeState) { self.label = label; self.state = state }
        var testDescription: String { label }
    }

    @Test(arguments: [
        Hostile("ftp URL", state { $0.url = URL(string: "ftp://h/x")! }),
        Hostile("file URL", state { $0.url = URL(fileURLWithPath: "/etc/passwd") }),
        Hostile("negative offset", state { $0.verifiedOffset = -1 }),
        Hostile("offset past the length", state { $0.verifiedOffset = 10_001 }),
        Hostile("weak ETag", state { $0.entityTag = "W/\"abc\"" }),
        Hostile("unquoted ETag", state { $0.entityTag = "abc" }),
        Hostile("header injection in the ETag", state { $0.entityTag = "\"a\"\r\nX-Evil: 1\r\n\"" }),
        Hostile("header injection in Last-Modified", state { $0.entityTag = nil; $0.lastModified = "Tue\r\nHost: evil" }),
        Hostile("oversized validator", state { $0.entityTag = "\"" + String(repeating: "a", count: 2000) + "\"" }),
    ])
    func rejectsHostileStates(_ hostile: Hostile) {
        #expect(throws: DownloadError.invalidRequest, "\(hostile.label)") { try hostile.state.validate() }
    }

    @Test func importWritesTheRecordAndExportReadsItBackAfterPause() async throws {
        let directory = try TemporaryDirectory()
        let stateDirectory = directory.url.appendingPathComponent("state")
        let (agent, _) = try DownloadFixtures.scriptedAgent(.init(stateDirectory: stateDirectory), startingAt: Paths.offline)
        let imported = Self.state()
        let seen = EventCollector()
        let download = try await agent.makeDownload(from: Self.url, to: directory.url.appendingPathComponent("out"),
                                                    resuming: imported) { download in
            download.onEvent = { seen.append($0) }
        }
        #expect(download.id == imported.id)
        // (Not `download.progress`: the driver starts inside makeDownload and reports the bytes
        // actually on disk, 0 here, racing this line.)
        let record = try ResumeRecord.read(imported.id.uuidString + ".json",
                                           in: try CheckedDirectory.open(stateDirectory.path, policy: .privateState))
        #expect(record.verifiedOffset == 4096 && record.entityTag == "\"abc-123\"" && record.totalLength == 10_000)

        // While it waits for a path its driver runs: no export, and a second import is refused.
        let log = EventLog(download)
        #expect(await log.wait { $0 == .waitingForConnectivity })
        #expect(await agent.resumeState(of: download) == nil)
        await #expect(throws: DownloadError.invalidRequest) {
            _ = try await agent.makeDownload(from: Self.url, to: directory.url.appendingPathComponent("out2"), resuming: imported)
        }
        await download.pause()
        // The partial file had no bytes, so the durable offset fell back to what is on disk.
        let exported = try #require(await agent.resumeState(of: download))
        #expect(exported.id == imported.id && exported.url == Self.url && exported.entityTag == imported.entityTag)
        #expect(exported.verifiedOffset == 0)
        #expect(seen.all.first == .waitingForConnectivity, "prepare's handler saw the first event: \(seen.all)")

        // Forgetting keeps the files; the same id can then be imported again.
        await agent.forget(download)
        #expect(await agent.downloads.isEmpty)
        #expect(FileManager.default.fileExists(atPath: directory.path("out.part")))
        let again = try await agent.makeDownload(from: Self.url, to: directory.url.appendingPathComponent("out"), resuming: exported)
        #expect(again.id == imported.id)
        await agent.shutdown()
    }

    @Test func importRejectsAStateForAnotherURL() async throws {
        let directory = try TemporaryDirectory()
        let agent = try DownloadAgent(configuration: .init(stateDirectory: directory.url))
        await #expect(throws: DownloadError.invalidRequest) {
            _ = try await agent.makeDownload(from: URL(string: "http://127.0.0.1:9/other")!,
                                             to: directory.url.appendingPathComponent("out"), resuming: Self.state())
        }
        await agent.shutdown()
    }
}

/// Events seen by an `onEvent` handler, in order.
final class EventCollector: Sendable {
    private let events = Synchronization.Mutex<[DownloadEvent]>([])
    func append(_ event: DownloadEvent) { events.withLock { $0.append(event) } }
    var all: [DownloadEvent] { events.withLock { $0 } }
}
