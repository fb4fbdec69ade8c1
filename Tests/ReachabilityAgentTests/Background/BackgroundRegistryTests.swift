import Foundation
import Testing
@testable import ReachabilityAgent
import ResumableDownloads

/// The background registry's decisions, as actions, without an engine, files or sockets.
@Suite("Background registry")
struct BackgroundRegistryTests {
    typealias Action = BackgroundRegistry.Action
    static let key = BackgroundSessionKey(uid: 1000, identifier: "com.example.halftunes")
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let plenty: @Sendable () -> Int64? = { 1 << 40 }

    static func settings(launch: [String]? = ["/usr/bin/app"]) -> BackgroundSessionSettings {
        var settings = BackgroundSessionSettings()
        settings.launchCommand = launch
        return settings
    }

    static func spec(_ identifier: Int, _ url: String = "http://192.0.2.1/a.bin") -> BackgroundTaskSpec {
        BackgroundTaskSpec(taskIdentifier: identifier, url: url)
    }

    /// A registry with the session attached on connection 1 and `tasks` created.
    static func attached(tasks: [BackgroundTaskSpec] = [], launch: [String]? = ["/usr/bin/app"]) throws -> (BackgroundRegistry, [UUID]) {
        var registry = BackgroundRegistry()
        _ = try registry.attach(key, settings: settings(launch: launch), connection: 1, pid: 42, now: now).get()
        var transfers: [UUID] = []
        for spec in tasks {
            let transfer = UUID()
            transfers.append(transfer)
            _ = try registry.createTask(spec, in: key, connection: 1, transfer: transfer).get()
        }
        return (registry, transfers)
    }

    static func starts(_ actions: [Action]) -> [BackgroundRegistry.TransferStart] {
        actions.compactMap { if case .startTransfer(let start) = $0 { start } else { nil } }
    }

    static func delivered(_ actions: [Action]) -> [UInt64] {
        actions.compactMap { if case .deliver(_, let sequence) = $0 { sequence } else { nil } }
    }

    @Test func aSecondLiveAttachIsRefusedWithTheHoldersPid() throws {
        var (registry, _) = try Self.attached()
        let second = registry.attach(Self.key, settings: Self.settings(), connection: 2, pid: 43, now: Self.now)
        guard case .failure(let error) = second else { Issue.record("a second attach succeeded"); return }
        #expect(error.code == .sessionInUse)
        #expect(error.message.contains("process 42"))
        // Another user's session of the same name is another session.
        let other = BackgroundSessionKey(uid: 1001, identifier: Self.key.identifier)
        #expect((try? registry.attach(other, settings: Self.settings(), connection: 3, pid: 44, now: Self.now).get()) != nil)
        // Once the first detaches, the identifier is free.
        _ = registry.detach(1, now: Self.now)
        #expect((try? registry.attach(Self.key, settings: Self.settings(), connection: 2, pid: 43, now: Self.now).get()) != nil)
    }

    @Test func onlyTheAttachedConnectionMayTouchTheSession() throws {
        var (registry, _) = try Self.attached(tasks: [Self.spec(1)])
        #expect((try? registry.createTask(Self.spec(2), in: Self.key, connection: 9, transfer: UUID()).get()) == nil)
        #expect((try? registry.perform(.cancel, on: 1, in: Self.key, connection: 9, now: Self.now, availableBytes: Self.plenty).get()) == nil)
        #expect((try? registry.acknowledge(Self.key, sequence: 1, connection: 9).get()) == nil)
        #expect((try? registry.createTask(Self.spec(1), in: Self.key, connection: 1, transfer: UUID()).get()) == nil, "identifier reused")
    }

    @Test func resumeStartsTheTransferWithTheSessionsRules() throws {
        var spec = Self.spec(1)
        spec.headers = ["Authorization: Bearer x"]
        spec.priority = 0.9
        var (registry, transfers) = try Self.attached(tasks: [spec])
        var settings = Self.settings()
        settings.isDiscretionary = true
        settings.additionalHeaders = ["X-App: 1"]
        _ = registry.detach(1, now: Self.now)
        _ = try registry.attach(Self.key, settings: settings, connection: 2, pid: 42, now: Self.now).get()
        let performed = try registry.perform(.resume, on: 1, in: Self.key, connection: 2, now: Self.now, availableBytes: Self.plenty).get()
        let start = try #require(Self.starts(performed.actions).first)
        #expect(start.id == transfers[0])
        #expect(start.headers == ["X-App: 1", "Authorization: Bearer x"])
        #expect(start.priority == 0.9)
        #expect(!start.allowsExpensive, "isDiscretionary waits for a path that is not expensive")
        #expect(!start.allowsRoaming && !start.allowsConstrained, "nor roaming, nor constrained")
        #expect(start.waitsForACPower, "and for AC power (issue 32 item 3)")
        #expect(performed.actions.contains(.wake(at: Self.now.addingTimeInterval(7 * 24 * 3600))), "the resource deadline")
    }

    /// allowsRoaming false keeps the session's transfers off a roaming modem only; a client of an
    /// older version that does not send it gets roaming allowed, the default.
    @Test func roamingIsTheSessionsChoice() throws {
        var (registry, _) = try Self.attached(tasks: [Self.spec(1)])
        var settings = Self.settings()
        settings.allowsRoaming = false
        _ = registry.detach(1, now: Self.now)
        _ = try registry.attach(Self.key, settings: settings, connection: 2, pid: 42, now: Self.now).get()
        let performed = try registry.perform(.resume, on: 1, in: Self.key, connection: 2, now: Self.now, availableBytes: Self.plenty).get()
        let start = try #require(Self.starts(performed.actions).first)
        #expect(!start.allowsRoaming && start.allowsExpensive)
        let old = try JSONDecoder().decode(BackgroundSessionSettings.self, from: Data(#"{"isDiscretionary":false}"#.utf8))
        #expect(old.allowsRoaming && old.allowsExpensiveNetworkAccess && old.allowsConstrainedNetworkAccess)
        let sent = try JSONDecoder().decode(BackgroundSessionSettings.self, from: JSONEncoder().encode(settings))
        #expect(!sent.allowsRoaming)
    }

    @Test func aTaskWaitsForItsDateThenStarts() throws {
        var spec = Self.spec(1)
        spec.earliestBeginDate = Self.now.timeIntervalSince1970 + 60
        var (registry, _) = try Self.attached(tasks: [spec])
        let performed = try registry.perform(.resume, on: 1, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        #expect(Self.starts(performed.actions).isEmpty)
        #expect(performed.actions.contains(.wake(at: Self.now.addingTimeInterval(60))))
        #expect(registry.sessions[Self.key]?.waiting[1]?.description.contains("earliestBeginDate") == true)
        #expect(Self.starts(registry.timerFired(now: Self.now.addingTimeInterval(30), availableBytes: Self.plenty)).isEmpty)
        #expect(Self.starts(registry.timerFired(now: Self.now.addingTimeInterval(60), availableBytes: Self.plenty)).count == 1)
    }

    @Test func aTaskThatDoesNotFitTheDiskWaitsAndCountsWhatOthersStillExpect() throws {
        var big = Self.spec(1)
        big.expectedBytes = 600
        var second = Self.spec(2, "http://192.0.2.1/b.bin")
        second.expectedBytes = 600
        var (registry, _) = try Self.attached(tasks: [big, second])
        let free: () -> Int64? = { 1000 }
        let first = try registry.perform(.resume, on: 1, in: Self.key, connection: 1, now: Self.now, availableBytes: free).get()
        #expect(Self.starts(first.actions).count == 1)
        let held = try registry.perform(.resume, on: 2, in: Self.key, connection: 1, now: Self.now, availableBytes: free).get()
        #expect(Self.starts(held.actions).isEmpty, "600 + 600 do not fit in 1000")
        let reason = try #require(registry.sessions[Self.key]?.waiting[2])
        #expect(reason == .lowDiskSpace(free: 400, needed: 600))
        #expect(reason.description == "400 B free, needs 600 B")
        #expect(held.actions.contains(.wake(at: Self.now.addingTimeInterval(BackgroundRegistry.diskRecheckInterval))))
        // The first got its bytes: the second fits now.
        _ = registry.transferProgressed(registry.sessions[Self.key]!.task(1)!.transfer, bytes: 600, total: 600)
        #expect(Self.starts(registry.timerFired(now: Self.now.addingTimeInterval(30), availableBytes: { 700 })).count == 1)
    }

    @Test func aDuplicateRequestJoinsTheTransferInFlight() throws {
        var (registry, transfers) = try Self.attached(tasks: [Self.spec(1), Self.spec(2), Self.spec(3, "http://192.0.2.1/other")])
        let first = try registry.perform(.resume, on: 1, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        #expect(Self.starts(first.actions).map(\.id) == [transfers[0]])
        registry.transferStarted(transfers[0])
        let joined = try registry.perform(.resume, on: 2, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        #expect(Self.starts(joined.actions).isEmpty)
        #expect(registry.transfers[transfers[0]]?.tasks == [1, 2])
        let other = try registry.perform(.resume, on: 3, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        #expect(Self.starts(other.actions).count == 1, "another URL is another transfer")
        // Cancelling one rider leaves the transfer to the other.
        let cancelled = try registry.perform(.cancel, on: 2, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        #expect(!cancelled.actions.contains { if case .cancelTransfer = $0 { true } else { false } })
        #expect(registry.transfers[transfers[0]]?.tasks == [1])
        // Completion: the remaining task gets the file.
        let done = registry.transferCompleted(transfers[0], now: Self.now)
        #expect(Self.delivered(done) == [2], "sequence 1 was task 2's cancel")
    }

    @Test func eventsWaitForTheNextAttachInOrderThenFinishedEvents() throws {
        var (registry, transfers) = try Self.attached(tasks: [Self.spec(1), Self.spec(2, "http://192.0.2.1/b")])
        for task in [1, 2] {
            _ = try registry.perform(.resume, on: task, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        }
        for transfer in transfers { registry.transferStarted(transfer) }
        _ = registry.detach(1, now: Self.now)
        let completed = registry.transferCompleted(transfers[1], now: Self.now)
        #expect(Self.delivered(completed).isEmpty, "nobody attached")
        #expect(completed.contains(.wake(at: Self.now.addingTimeInterval(LaunchPolicy.batchWindow))), "a launch, batched")
        let failure = BackgroundFailure(code: -1011, message: "server answered HTTP 404", httpStatus: 404)
        _ = registry.transferFailed(transfers[0], failure, now: Self.now)
        let (attachment, actions) = try registry.attach(Self.key, settings: Self.settings(), connection: 2, pid: 50, now: Self.now).get()
        #expect(attachment.tasks.isEmpty && attachment.pendingEvents == 2)
        #expect(Self.delivered(actions) == [1, 2])
        #expect(actions.last == .push(2, BackgroundEvent(kind: .finishedEvents)))
        let pending = registry.sessions[Self.key]!.record.pending
        #expect(pending.map(\.task.taskIdentifier) == [2, 1])
        #expect(pending.map(\.kind) == [.finished, .failed])
        // Acknowledged: the delivered link and the finished file go.
        let acknowledged = try registry.acknowledge(Self.key, sequence: 1, connection: 2).get()
        #expect(acknowledged.contains(.removeFiles([pending[0].deliveryName, BackgroundRegistry.finishedFileName(transfers[1])])))
        #expect(acknowledged.contains(.persist(Self.key)), "an acknowledgement is on disk before its reply (issue 29)")
        _ = try registry.acknowledge(Self.key, sequence: 2, connection: 2).get()
        #expect(registry.sessions[Self.key]?.record.pending.isEmpty == true)
        #expect((try? registry.acknowledge(Self.key, sequence: 2, connection: 2).get()) == [], "a repeated acknowledgement is harmless")
    }

    @Test func cancelProducingResumeDataStopsTheTransferAndAnswersWithItsState() throws {
        var (registry, transfers) = try Self.attached(tasks: [Self.spec(1)])
        _ = try registry.perform(.resume, on: 1, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        registry.transferStarted(transfers[0])
        let performed = try registry.perform(.cancelProducingResumeData, on: 1, in: Self.key, connection: 1, now: Self.now,
                                             availableBytes: Self.plenty).get()
        #expect(performed.actions == [.stopTransfer(transfers[0])] && performed.awaitsStop == transfers[0])
        let state = ResumeState(id: transfers[0], url: URL(string: "http://192.0.2.1/a.bin")!, entityTag: "\"e\"", lastModified: nil,
                                totalLength: 5000, verifiedOffset: 1000)
        let (actions, answered) = registry.transferStopped(transfers[0], resumeState: state, now: Self.now)
        #expect(answered == state)
        #expect(actions.contains(.releaseTransfer(transfers[0], keepFiles: true)))
        let event = try #require(registry.sessions[Self.key]?.record.pending.first)
        #expect(event.failure?.code == -999 && event.failure?.resumeState == state)
        // A cancel of a task that never started hands back the resume data it was made from.
        var fromData = Self.spec(2)
        fromData.resumeState = ResumeState(id: UUID(), url: URL(string: fromData.url)!, entityTag: "\"e\"", lastModified: nil,
                                           totalLength: nil, verifiedOffset: 10)
        _ = try registry.createTask(fromData, in: Self.key, connection: 1, transfer: UUID()).get()
        let unstarted = try registry.perform(.cancelProducingResumeData, on: 2, in: Self.key, connection: 1, now: Self.now,
                                             availableBytes: Self.plenty).get()
        #expect(unstarted.resumeState == fromData.resumeState && unstarted.awaitsStop == nil)
    }

    /// A registry whose session has a 60 s resource timeout and task 1 (`spec`) running.
    static func runningWithAResourceTimeout(_ spec: BackgroundTaskSpec) throws -> (BackgroundRegistry, [UUID]) {
        var (registry, transfers) = try Self.attached(tasks: [spec])
        var settings = Self.settings()
        settings.timeoutIntervalForResource = 60
        _ = registry.detach(1, now: Self.now)
        _ = try registry.attach(Self.key, settings: settings, connection: 2, pid: 42, now: Self.now).get()
        _ = try registry.perform(.resume, on: 1, in: Self.key, connection: 2, now: Self.now, availableBytes: Self.plenty).get()
        registry.transferStarted(transfers[0])
        return (registry, transfers)
    }

    @Test func theResourceTimeoutEndsATaskWithMinus1001AndResumeData() throws {
        var (registry, transfers) = try Self.runningWithAResourceTimeout(Self.spec(1))
        #expect(registry.timerFired(now: Self.now.addingTimeInterval(59), availableBytes: Self.plenty)
            .allSatisfy { if case .stopTransfer = $0 { false } else { true } })
        #expect(registry.timerFired(now: Self.now.addingTimeInterval(60), availableBytes: Self.plenty).contains(.stopTransfer(transfers[0])))
        _ = registry.transferStopped(transfers[0], resumeState: nil, now: Self.now)
        #expect(registry.sessions[Self.key]?.record.pending.first?.failure?.code == -1001)
    }

    @Test func invalidateCancelsEveryTaskAndForgetsTheSessionOnceAcknowledged() throws {
        var (registry, transfers) = try Self.attached(tasks: [Self.spec(1), Self.spec(2, "http://192.0.2.1/b")])
        _ = try registry.perform(.resume, on: 1, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        registry.transferStarted(transfers[0])
        let actions = try registry.invalidate(Self.key, connection: 1, now: Self.now).get()
        #expect(actions.contains(.cancelTransfer(transfers[0])))
        #expect(Self.delivered(actions) == [1, 2])
        #expect(registry.transferFailed(transfers[0], .cancelled, now: Self.now).isEmpty, "our own cancel is not news")
        _ = try registry.acknowledge(Self.key, sequence: 1, connection: 1).get()
        let last = try registry.acknowledge(Self.key, sequence: 2, connection: 1).get()
        #expect(last.contains(.removeSession(Self.key)))
        #expect(registry.sessions[Self.key] == nil)
    }

    @Test func aRestartRestoresEachTransferOnceAndSchedulesTheRest() throws {
        var (registry, transfers) = try Self.attached(tasks: [Self.spec(1), Self.spec(2), Self.spec(3, "http://192.0.2.1/c")])
        for task in [1, 2, 3] {
            _ = try registry.perform(.resume, on: task, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
            if task == 1 { registry.transferStarted(transfers[0]) }
        }
        _ = try registry.perform(.suspend, on: 3, in: Self.key, connection: 1, now: Self.now, availableBytes: Self.plenty).get()
        let record = try #require(registry.sessions[Self.key]?.record)
        var restarted = BackgroundRegistry()
        _ = restarted.load([record], now: Self.now)
        let plan = restarted.restorePlan()
        #expect(plan.count == 2, "tasks 1 and 2 share a transfer")
        #expect(plan.first { $0.start.id == transfers[0] }?.isPaused == false)
        #expect(plan.first { $0.start.id == transfers[2] }?.isPaused == true)
        restarted.adopt(plan.first { $0.start.id == transfers[0] }!.start)
        #expect(restarted.transfers[transfers[0]]?.tasks == [1, 2])
        #expect(Self.starts(restarted.scheduleRestored(now: Self.now, availableBytes: Self.plenty)).isEmpty,
                "the suspended one waits for its resume")
    }

    @Test func recordsReadBackAreChecked() throws {
        var record = BackgroundSessionRecord(key: Self.key, settings: Self.settings())
        #expect(record.problem == nil)
        record.tasks = [BackgroundTaskRecord(spec: Self.spec(5), transfer: UUID())]
        #expect(record.problem != nil, "an identifier at or above nextTaskIdentifier")
        record.nextTaskIdentifier = 6
        #expect(record.problem == nil)
        record.tasks.append(BackgroundTaskRecord(spec: Self.spec(5), transfer: UUID()))
        #expect(record.problem?.contains("twice") == true)
        record.tasks.removeLast()
        record.settings.launchCommand = []
        #expect(record.problem != nil)
        record.settings.launchCommand = nil
        record.key.identifier = "bad\nname"
        #expect(record.problem?.contains("control characters") == true)
    }

    @Test(arguments: [
        ("", false), ("a", true), (String(repeating: "é", count: 127), true), (String(repeating: "é", count: 128), false),
        ("tab\there", false), ("com.example.app", true), ("\u{85}", false),
    ])
    func identifiers(_ identifier: String, isValid: Bool) {
        #expect((BackgroundSessionKey.problem(with: identifier) == nil) == isValid)
    }

    /// Values that would overflow or trap later are refused at the door (an Int.max identifier
    /// crashed the agent when the next identifier was computed).
    @Test func hostileNumbersAreRefused() throws {
        var (registry, _) = try Self.attached()
        for spec in [Self.spec(Int.max), Self.spec(Int(Int32.max))] {
            #expect((try? registry.createTask(spec, in: Self.key, connection: 1, transfer: UUID()).get()) == nil)
        }
        var late = Self.spec(1)
        late.earliestBeginDate = 1e300
        #expect(late.problem != nil)
        var huge = Self.spec(1)
        huge.expectedBytes = .max
        #expect(huge.problem != nil)
        var settings = Self.settings()
        settings.timeoutIntervalForResource = 1e300
        #expect(settings.problem != nil)
        // Many tasks expecting the most allowed: the sum saturates instead of trapping.
        for identifier in 1...20 {
            var big = Self.spec(identifier, "http://192.0.2.1/\(identifier)")
            big.expectedBytes = BackgroundTaskSpec.maximumExpectedBytes
            _ = try registry.createTask(big, in: Self.key, connection: 1, transfer: UUID()).get()
            _ = try registry.perform(.resume, on: identifier, in: Self.key, connection: 1, now: Self.now, availableBytes: { .max }).get()
        }
        var record = try #require(registry.sessions[Self.key]?.record)
        record.nextSequence = .max
        #expect(record.problem != nil)
    }

    @Test func taskSpecsAreChecked() {
        var spec = Self.spec(1, "ftp://h/x")
        #expect(spec.problem != nil)
        spec = Self.spec(1)
        spec.headers = ["Range: bytes=0-"]
        #expect(spec.problem?.contains("Range") == true)
        spec.headers = ["X-Bad: a\r\nInjected: b"]
        #expect(spec.problem != nil)
        spec.headers = []
        spec.priority = 1.5
        #expect(spec.problem != nil)
        spec.priority = 0.5
        spec.expectedBytes = -5
        #expect(spec.problem != nil)
        spec.expectedBytes = -1
        spec.timeout = .nan
        #expect(spec.problem != nil)
        spec.timeout = nil
        spec.resumeState = ResumeState(id: UUID(), url: URL(string: "http://192.0.2.1/other")!, entityTag: nil, lastModified: nil,
                                       totalLength: nil, verifiedOffset: 0)
        #expect(spec.problem?.contains("another URL") == true)
    }
}
