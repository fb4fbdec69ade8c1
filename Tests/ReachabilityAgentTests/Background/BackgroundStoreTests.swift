import Foundation
import LinuxSystem
import Testing
import TestSupport
@testable import ReachabilityAgent

/// Session records written as a log of changes (issue 29): what a new store reads back is what
/// was saved last, a change costs a line the size of what changed, and a log torn by a crash
/// gives back every whole line before the tear.
@Suite("Background session store")
struct BackgroundStoreTests {
    typealias R = BackgroundRegistryTests

    static func store(_ scratch: ScratchDirectory) throws -> BackgroundStore {
        try BackgroundStore(stateDirectory: CheckedDirectory.open(scratch.path + "/state", policy: .privateState, creating: true))
    }

    static func sessionFiles(_ scratch: ScratchDirectory) throws -> [String: Int] {
        let directory = scratch.path + "/state/background/sessions"
        var sizes: [String: Int] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            sizes[name] = (try FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? Int) ?? -1
        }
        return sizes
    }

    static func event(_ sequence: UInt64, task: BackgroundTaskRecord) -> BackgroundPendingEvent {
        BackgroundPendingEvent(sequence: sequence, kind: .finished, task: task.snapshot(waitingReason: nil), failure: nil)
    }

    @Test func changesAreLinesAndReadBackExactly() throws {
        let scratch = try ScratchDirectory("bs")
        let store = try Self.store(scratch)
        var record = BackgroundSessionRecord(key: R.key, settings: R.settings())
        try store.save(record)
        var saved: [BackgroundSessionRecord] = []
        for identifier in 1...300 {
            record.tasks.append(BackgroundTaskRecord(spec: R.spec(identifier, "http://192.0.2.1/f\(identifier).bin"), transfer: UUID()))
            record.nextTaskIdentifier = identifier + 1
            try store.save(record)
            saved.append(record)
        }
        let lines = try Self.sessionFiles(scratch)
        let log = try #require(lines.first { $0.key.hasSuffix(".log") })
        #expect(log.value < 300 * 1024, "a creation appends about one task (\(log.value) bytes for 300)")
        // Changes of every kind: a task changed in the middle, one removed, events added and one
        // acknowledged, the settings, the scalars.
        record.tasks[150].phase = .running
        record.tasks[150].bytesReceived = 4096
        try store.save(record)
        record.tasks.remove(at: 10)
        record.pending = [Self.event(1, task: record.tasks[0]), Self.event(2, task: record.tasks[1])]
        record.nextSequence = 3
        try store.save(record)
        record.pending[1].delivery = record.pending[1].deliveryName
        record.pending.removeFirst()
        record.settings.launchCommand = ["/usr/bin/other"]
        record.isInvalidated = true
        try store.save(record)
        let read = try Self.store(scratch).load { Issue.record("warned: \($0)") }
        #expect(read.count == 1)
        var expected = record
        expected.journalSerial = read.first?.journalSerial
        #expect(read.first == expected)
        #expect(try Self.sessionFiles(scratch).keys.allSatisfy { $0.hasSuffix(".json") }, "the log was folded in on load")
    }

    @Test func aLogLargerThanItsRecordIsFoldedIn() throws {
        let scratch = try ScratchDirectory("bs")
        let store = try Self.store(scratch)
        var record = BackgroundSessionRecord(key: R.key, settings: R.settings())
        record.tasks = [BackgroundTaskRecord(spec: R.spec(1), transfer: UUID())]
        record.nextTaskIdentifier = 2
        try store.save(record)
        for round in 0..<2000 {
            record.tasks[0].bytesReceived = Int64(round)
            try store.save(record)
        }
        let sizes = try Self.sessionFiles(scratch)
        let logBytes = sizes.filter { $0.key.hasSuffix(".log") }.values.reduce(0, +)
        #expect(logBytes <= BackgroundStore.foldingThreshold, "\(sizes)")
        var expected = record
        let read = try Self.store(scratch).load { Issue.record("warned: \($0)") }
        expected.journalSerial = read.first?.journalSerial
        #expect(read.first == expected)
    }

    @Test func aTornLastLineIsDroppedAndTheRestKept() throws {
        let scratch = try ScratchDirectory("bs")
        let store = try Self.store(scratch)
        var record = BackgroundSessionRecord(key: R.key, settings: R.settings())
        try store.save(record)
        for identifier in 1...3 {
            record.tasks.append(BackgroundTaskRecord(spec: R.spec(identifier), transfer: UUID()))
            record.nextTaskIdentifier = identifier + 1
            try store.save(record)
        }
        let logName = try #require(try Self.sessionFiles(scratch).keys.first { $0.hasSuffix(".log") })
        let handle = try #require(FileHandle(forWritingAtPath: scratch.path + "/state/background/sessions/" + logName))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"serial":5,"nextSequence":1,"nextTaskIdentif"#.utf8))
        try handle.close()
        let read = try Self.store(scratch).load { Issue.record("warned: \($0)") }
        #expect(read.first?.tasks.map(\.spec.taskIdentifier) == [1, 2, 3])
        // Saved again after the tear: the next store reads the new change, not the torn line.
        let again = try Self.store(scratch)
        var reread = try #require(again.load { Issue.record("warned: \($0)") }.first)
        reread.tasks.append(BackgroundTaskRecord(spec: R.spec(4), transfer: UUID()))
        reread.nextTaskIdentifier = 5
        try again.save(reread)
        #expect(try Self.store(scratch).load { _ in }.first?.tasks.count == 4)
    }
}
