import FoundationEssentials
import ReachabilityBase
import ResumableDownloads

/// Every background session the agent holds, and what happens to them: attaches and detaches,
/// tasks and their transfers, events kept until acknowledged, launches. Pure (no files, no
/// engine, no clocks): the agent feeds inputs and applies the returned actions in order, and the
/// unit tests assert those actions (AHC's request state machine is the model).
///
/// A task rides on a transfer (an engine download named by a UUID): its own, or the one of an
/// earlier task of the same session for the same request (Apple's de-duplication of in-flight
/// requests). A transfer starts when its first task is resumed and may run (not before
/// `earliestBeginDate`, not while `countOfBytesClientExpectsToReceive` does not fit the disk), is
/// paused when no task on it is running, and is cancelled when its last task is.
//
// Longer than 400 lines on purpose: one pure state machine whose inputs all read and write the same
// sessions, tasks and transfers; its task operations are in BackgroundRegistry+Tasks.swift, and the
// messages, records and launch policy are their own types.
package struct BackgroundRegistry: Sendable {
    /// A control connection of the agent (the server numbers them).
    package typealias ConnectionID = UInt64

    /// Why a resumed task does not transfer yet (`notBefore`, `lowDiskSpace`): the one typed
    /// reason every job of the agent waits with.
    package typealias WaitReason = JobWaitReason

    /// Every resumed task's reason for waiting, one per task (`reachability_downloads_waiting`).
    package var waitReasons: [JobWaitReason] { sessions.values.flatMap { Array($0.waiting.values) } }

    /// Why a transfer is being stopped for a task.
    package enum StopReason: Sendable, Hashable {
        /// `cancel(byProducingResumeData:)`.
        case cancelledProducingResumeData
        /// `timeoutIntervalForResource` ran out.
        case resourceTimeout
    }

    /// Who is attached.
    package struct Attachment: Sendable, Hashable {
        package var connection: ConnectionID
        package var pid: Int32
    }

    /// One session: what is on disk, and what lives only in this agent.
    package struct Session: Sendable {
        package var record: BackgroundSessionRecord
        package var attachment: Attachment?
        package var launch = LaunchPolicy()
        package var waiting: [Int: WaitReason] = [:]
        /// Tasks told once that they wait for connectivity (while this process is attached).
        package var announcedWaiting: Set<Int> = []
        package var stopping: [Int: StopReason] = [:]

        func task(_ identifier: Int) -> BackgroundTaskRecord? { record.tasks.first { $0.spec.taskIdentifier == identifier } }

        func index(of identifier: Int) -> Int? { record.tasks.firstIndex { $0.spec.taskIdentifier == identifier } }

        /// Tasks that have not completed, in identifier order.
        var liveTasks: [BackgroundTaskRecord] {
            record.tasks.filter { $0.phase != .completed }.sorted { $0.spec.taskIdentifier < $1.spec.taskIdentifier }
        }
    }

    /// What the agent does, in order.
    package enum Action: Sendable, Hashable {
        /// Write the session's record now, before the actions that follow (an event is on disk
        /// before it is sent; a transfer's session before the transfer exists). Inside a run of
        /// pipelined requests, once for the run, before its replies (`RunCommit`).
        case persist(BackgroundSessionKey)
        /// Remove the session's record (invalidated, every event acknowledged).
        case removeSession(BackgroundSessionKey)
        /// Push a live event to a connection.
        case push(ConnectionID, BackgroundEvent)
        /// Push pending event `sequence` to the attached connection (a `finished` one with a new
        /// hard link of its file).
        case deliver(BackgroundSessionKey, sequence: UInt64)
        /// Create the engine download (fresh, or continuing `resumeState`).
        case startTransfer(TransferStart)
        case resumeTransfer(UUID)
        case pauseTransfer(UUID)
        /// Cancel for good, deleting its files.
        case cancelTransfer(UUID)
        /// Pause it, read its resume state, then call `transferStopped`.
        case stopTransfer(UUID)
        /// The engine may forget it; its partial file and record stay when `keepFiles` (resume data
        /// was handed out; the lifetime purge removes them if nobody resumes it).
        case releaseTransfer(UUID, keepFiles: Bool)
        /// Remove these names from the background downloads directory (delivered files).
        case removeFiles([String])
        /// Call `timerFired` at this time (the earliest one asked for counts).
        case wake(at: Date)
        /// Start the session's program (its launch policy already counts it as launched).
        case launch(BackgroundSessionKey)
    }

    /// An engine download to create.
    package struct TransferStart: Sendable, Hashable {
        package var id: UUID
        package var session: BackgroundSessionKey
        package var url: String
        package var headers: [String]
        package var timeout: Double
        package var priority: Float
        package var allowsExpensive: Bool
        package var allowsRoaming: Bool
        package var allowsConstrained: Bool = true
        package var resumeState: ResumeState?
        /// The session's `httpMaximumConnectionsPerHost`.
        package var maximumConnections: Int
        /// `isDiscretionary`: waits for AC power too, as Apple's discretionary tasks do.
        package var waitsForACPower = false
        /// An upload task's transfer: the agent sends the file instead of fetching the URL.
        package var upload: BackgroundUploadSpec?
        /// Where the server holds that upload, once it does (continued after an agent restart).
        package var uploadResume: UploadResumeState?
    }

    /// How often a task waiting for disk space looks again.
    package static let diskRecheckInterval: TimeInterval = 5
    /// Sessions one user may hold.
    package static let maximumSessionsPerUser = 256

    package internal(set) var sessions: [BackgroundSessionKey: Session] = [:]
    /// Live transfers: the session and the tasks riding on each, and whether the engine has it.
    package internal(set) var transfers: [UUID: Transfer] = [:]
    /// Transfers being cancelled: their final failure is ours, not news.
    private var cancelling: Set<UUID> = []

    /// A transfer and who rides on it.
    package struct Transfer: Sendable, Hashable {
        package var session: BackgroundSessionKey
        package var tasks: Set<Int>
        /// The engine has it (started, or restored at launch).
        package var isStarted = false
    }

    package init() {}

    // MARK: loading

    /// Adds sessions read back at start (their pending events start a launch where the session
    /// wants one). The caller then restores their transfers: `restorePlan()`, `adopt` for each the
    /// engine still holds, `scheduleRestored` for the rest.
    package mutating func load(_ records: [BackgroundSessionRecord], now: Date) -> [Action] {
        var actions: [Action] = []
        for record in records where sessions[record.key] == nil {
            sessions[record.key] = Session(record: record)
            actions += launchIfNeeded(record.key, now: now)
        }
        return actions + nextWake(now: now)
    }

    /// The transfers tasks were riding on when the agent stopped: one start per transfer (made
    /// from its first task), and whether every task on it is suspended.
    package func restorePlan() -> [(start: TransferStart, isPaused: Bool)] {
        var plan: [(start: TransferStart, isPaused: Bool)] = []
        for key in sessions.keys.sorted() {
            guard let session = sessions[key] else { continue }
            var seen = Set<UUID>()
            for task in session.liveTasks where task.phase == .running || task.phase == .suspended {
                guard transfers[task.transfer] == nil, seen.insert(task.transfer).inserted else { continue }
                let riders = session.liveTasks.filter { $0.transfer == task.transfer }
                plan.append((Self.start(task, transfer: task.transfer, session: session.record),
                             !riders.contains { $0.phase == .running }))
            }
        }
        return plan
    }

    /// The engine holds transfer `start.id` again (restored from its record): its tasks ride on it.
    package mutating func adopt(_ start: TransferStart) {
        guard let session = sessions[start.session] else { return }
        let riders = session.liveTasks.filter { $0.transfer == start.id && ($0.phase == .running || $0.phase == .suspended) }
        transfers[start.id] = Transfer(session: start.session, tasks: Set(riders.map(\.spec.taskIdentifier)), isStarted: true)
    }

    /// Running tasks with no transfer in the engine (their record was lost, or they were waiting):
    /// scheduled as if just resumed.
    package mutating func scheduleRestored(now: Date, availableBytes: () -> Int64?) -> [Action] {
        var actions: [Action] = []
        for key in sessions.keys.sorted() {
            for task in sessions[key]?.liveTasks ?? [] where task.phase == .running && transfers[task.transfer] == nil {
                actions += schedule(task.spec.taskIdentifier, in: key, now: now, availableBytes: availableBytes)
            }
        }
        return actions + nextWake(now: now)
    }

    /// The engine holds `id` now (created for a start).
    package mutating func transferStarted(_ id: UUID) {
        transfers[id]?.isStarted = true
    }

    /// The engine was replaced (a reload): every transfer must be restored again.
    package mutating func engineReplaced() {
        transfers = [:]
        cancelling = []
    }

    /// The start of transfer `id` again, from its first task (an upload continued after a pause).
    package func transferStart(of id: UUID) -> TransferStart? {
        guard let key = owner(of: id), let session = sessions[key],
              let task = session.liveTasks.first(where: { $0.transfer == id }) else { return nil }
        return Self.start(task, transfer: id, session: session.record)
    }

    /// Whether the registry still wants transfer `id` (a cancel can overtake its creation).
    package func wants(_ id: UUID) -> Bool { transfers[id] != nil }

    /// Every transfer id a session still owns, live ones and those whose resume data is pending
    /// in an event (the agent's restore leaves these to the background sessions).
    package var ownedTransferIDs: Set<UUID> {
        var ids = Set(transfers.keys)
        for session in sessions.values {
            for task in session.record.tasks { ids.insert(task.transfer) }
            for event in session.record.pending { ids.insert(event.task.transfer) }
        }
        return ids
    }

    // MARK: attach, detach, acknowledge, invalidate

    /// A process attaches session `key`. Refused while another connection holds it: one live
    /// process per session, never two handling the same events.
    package mutating func attach(_ key: BackgroundSessionKey, settings: BackgroundSessionSettings, connection: ConnectionID,
                                 pid: Int32, now: Date) -> Result<(BackgroundAttachment, [Action]), ControlError> {
        if let problem = BackgroundSessionKey.problem(with: key.identifier) { return .failure(.invalidArgument(problem)) }
        if let problem = settings.problem { return .failure(.invalidArgument(problem)) }
        if let holder = sessions[key]?.attachment {
            return .failure(.sessionInUse("background session '\(key.identifier)' is already attached by process \(holder.pid); only one process may use a background session at a time (invalidate it there first, or let that process exit)"))
        }
        if sessions[key] == nil {
            guard sessions.keys.filter({ $0.uid == key.uid }).count < Self.maximumSessionsPerUser else {
                return .failure(.invalidArgument("uid \(key.uid) already has \(Self.maximumSessionsPerUser) background sessions; invalidate some (invalidateAndCancel) first"))
            }
            sessions[key] = Session(record: BackgroundSessionRecord(key: key, settings: settings))
        }
        var session = sessions[key]!
        session.record.settings = settings
        session.record.isInvalidated = false
        session.attachment = Attachment(connection: connection, pid: pid)
        session.announcedWaiting = []
        session.launch.attached()
        let attachment = BackgroundAttachment(
            tasks: session.liveTasks.map { $0.snapshot(waitingReason: session.waiting[$0.spec.taskIdentifier]?.description) },
            nextTaskIdentifier: session.record.nextTaskIdentifier, pendingEvents: session.record.pending.count,
            downloadsDirectory: "")
        sessions[key] = session
        var actions: [Action] = [.persist(key)]
        actions += session.record.pending.map { .deliver(key, sequence: $0.sequence) }
        if !session.record.pending.isEmpty {
            actions.append(.push(connection, BackgroundEvent(kind: .finishedEvents)))
        }
        return .success((attachment, actions))
    }

    /// A connection closed: the session it held (if any) has nobody attached now.
    package mutating func detach(_ connection: ConnectionID, now: Date) -> [Action] {
        guard let key = sessions.first(where: { $0.value.attachment?.connection == connection })?.key else { return [] }
        sessions[key]?.attachment = nil
        sessions[key]?.announcedWaiting = []
        let pending = !(sessions[key]?.record.pending.isEmpty ?? true)
        guard sessions[key]?.record.settings.sendsLaunchEvents == true else { return [] }
        return sessions[key]?.launch.detached(pending: pending, now: now).map { launchActions(key, $0, now: now) } ?? []
    }

    /// The attached process handled event `sequence`: it is dropped with its hard link, and the
    /// finished file once no other event hands it out.
    package mutating func acknowledge(_ key: BackgroundSessionKey, sequence: UInt64,
                                      connection: ConnectionID) -> Result<[Action], ControlError> {
        guard var session = attached(key, connection) else { return .failure(Self.notAttached(key)) }
        guard let position = session.record.pending.firstIndex(where: { $0.sequence == sequence }) else {
            return .success([])   // acknowledged already (a replay the process had handled)
        }
        sessions[key] = nil   // put back below; a copy left in the table would make the removal copy every event
        let event = session.record.pending.remove(at: position)
        var names: [String] = []
        if event.kind == .finished {
            names.append(event.deliveryName)
            let transfer = event.task.transfer
            if !session.record.pending.contains(where: { $0.kind == .finished && $0.task.transfer == transfer }),
               transfers[transfer] == nil {
                names.append(Self.finishedFileName(transfer))
            }
        }
        var actions: [Action] = names.isEmpty ? [] : [.removeFiles(names)]
        if session.record.pending.isEmpty { session.launch.drained() }
        sessions[key] = session
        if session.record.isInvalidated, session.record.pending.isEmpty, !session.record.tasks.contains(where: { $0.phase != .completed }) {
            sessions[key] = nil
            actions.append(.removeSession(key))
        } else {
            // On disk before the reply (issue 29): a process told its acknowledgement was taken
            // must not get the event again after a crash a moment later.
            actions.append(.persist(key))
        }
        return .success(actions)
    }

    /// `invalidateAndCancel()`: every task is cancelled (its event follows), and the session is
    /// forgotten once those are acknowledged.
    package mutating func invalidate(_ key: BackgroundSessionKey, connection: ConnectionID, now: Date) -> Result<[Action], ControlError> {
        guard let session = attached(key, connection) else { return .failure(Self.notAttached(key)) }
        var actions: [Action] = []
        for task in session.liveTasks {
            if case .success(let cancelled) = perform(.cancel, on: task.spec.taskIdentifier, in: key, connection: connection,
                                                      now: now, availableBytes: { nil }) {
                actions += cancelled.actions
            }
        }
        sessions[key]?.record.isInvalidated = true
        if let current = sessions[key], current.record.pending.isEmpty, current.liveTasks.isEmpty {
            sessions[key] = nil
            return .success(actions + [.removeSession(key)])
        }
        return .success(actions + [.persist(key)])
    }

    // MARK: timers and launches

    /// Time-driven work: tasks whose date came, disk space to look at again, resource deadlines,
    /// launches. `availableBytes` reads the free space now.
    package mutating func timerFired(now: Date, availableBytes: () -> Int64?) -> [Action] {
        var actions: [Action] = []
        for key in sessions.keys.sorted() {
            guard let session = sessions[key] else { continue }
            for task in session.liveTasks {
                let identifier = task.spec.taskIdentifier
                if let deadline = task.deadline, now.timeIntervalSince1970 >= deadline, task.phase != .created,
                   session.stopping[identifier] == nil {
                    actions += expire(identifier, in: key, now: now)
                } else if task.phase == .running, session.waiting[identifier] != nil {
                    actions += schedule(identifier, in: key, now: now, availableBytes: availableBytes)
                }
            }
            if let current = sessions[key], current.record.settings.sendsLaunchEvents,
               let action = sessions[key]?.launch.timerFired(now: now, pending: !current.record.pending.isEmpty,
                                                            attachedNow: current.attachment != nil) {
                actions += launchActions(key, action, now: now)
            }
        }
        return actions + nextWake(now: now)
    }

    /// The launcher failed, or the launched program ended (`failure` nil: it exited with 0, or a
    /// unit started).
    package mutating func launchEnded(_ key: BackgroundSessionKey, failure: String?, now: Date) -> [Action] {
        guard let session = sessions[key] else { return [] }
        let action = sessions[key]?.launch.launchEnded(failure, pending: !session.record.pending.isEmpty,
                                                       attachedNow: session.attachment != nil, now: now)
        return action.map { launchActions(key, $0, now: now) } ?? []
    }

    /// The earliest time something is due (a task's date, a disk check, a deadline, a launch).
    package func nextWake(now: Date) -> [Action] {
        var earliest: Date?
        func consider(_ date: Date) { earliest = min(earliest ?? date, date) }
        for session in sessions.values {
            // Not `liveTasks`: sorting a copy per resume made 3,000 creations quadratic in copies.
            for task in session.record.tasks where task.phase != .completed && task.phase != .created {
                if let deadline = task.deadline { consider(Date(timeIntervalSince1970: deadline)) }
                switch session.waiting[task.spec.taskIdentifier] {
                case .notBefore(let date): consider(date)
                case .lowDiskSpace: consider(now.addingTimeInterval(Self.diskRecheckInterval))
                default: break
                }
            }
            if session.record.settings.sendsLaunchEvents, let next = session.launch.nextAttempt { consider(next) }
            if case .launched(_, let deadline) = session.launch.phase { consider(deadline) }
        }
        return earliest.map { [.wake(at: $0)] } ?? []
    }

    // MARK: helpers shared with the task half

    /// The session when `connection` is the one attached to it.
    func attached(_ key: BackgroundSessionKey, _ connection: ConnectionID) -> Session? {
        guard let session = sessions[key], session.attachment?.connection == connection else { return nil }
        return session
    }

    static func notAttached(_ key: BackgroundSessionKey) -> ControlError {
        .invalidArgument("background session '\(key.identifier)' is not attached on this connection (attach first)")
    }

    /// `TRANSFER.download`: where the engine puts a finished file.
    package static func finishedFileName(_ transfer: UUID) -> String { transfer.uuidString + ".download" }

    /// Changes session `key` in place. Taken out of the table while it changes: a copy left
    /// in it would share the tasks' array, and the change would copy all of it (at 3,000 tasks
    /// each creation copied the session's tasks twice: over half of the agent's CPU, perf).
    mutating func update(_ key: BackgroundSessionKey, _ body: (inout Session) -> Void) {
        guard var session = sessions.removeValue(forKey: key) else { return }
        body(&session)
        sessions[key] = session
    }

    mutating func removeTransfer(_ id: UUID) { transfers[id] = nil }

    mutating func setTransfer(_ id: UUID, _ transfer: Transfer) { transfers[id] = transfer }

    mutating func markCancelling(_ id: UUID) { cancelling.insert(id) }

    /// Whether a failure of `id` is the cancel asked for (consumed once).
    mutating func consumeCancelling(_ id: UUID) -> Bool { cancelling.remove(id) != nil }

    /// Adds event `kind` for a task that just completed, and says how it reaches the session:
    /// delivered now when attached, else by a launch when the session wants them.
    mutating func addEvent(_ kind: BackgroundEvent.Kind, task: BackgroundTaskRecord, failure: BackgroundFailure?,
                           response: BackgroundUploadResponse? = nil, in key: BackgroundSessionKey, now: Date) -> [Action] {
        // Taken out while it changes (see `update`).
        guard var session = sessions.removeValue(forKey: key) else { return [] }
        let sequence = session.record.nextSequence
        session.record.nextSequence += 1
        var snapshot = task.snapshot(waitingReason: nil)
        snapshot.state = .completed
        var pending = BackgroundPendingEvent(sequence: sequence, kind: kind, task: snapshot, failure: failure)
        pending.response = response
        session.record.pending.append(pending)
        session.record.tasks.removeAll { $0.spec.taskIdentifier == task.spec.taskIdentifier }
        session.waiting[task.spec.taskIdentifier] = nil
        session.stopping[task.spec.taskIdentifier] = nil
        sessions[key] = session
        if session.attachment != nil { return [.persist(key), .deliver(key, sequence: sequence)] }
        return [.persist(key)] + launchIfNeeded(key, now: now)
    }

    mutating func launchIfNeeded(_ key: BackgroundSessionKey, now: Date) -> [Action] {
        guard let session = sessions[key], session.record.settings.sendsLaunchEvents, session.attachment == nil,
              session.record.settings.launchCommand != nil || session.record.settings.launchUnit != nil,
              !session.record.pending.isEmpty else { return [] }
        return sessions[key]?.launch.eventsPending(now: now).map { launchActions(key, $0, now: now) } ?? []
    }

    private mutating func launchActions(_ key: BackgroundSessionKey, _ action: LaunchPolicy.Action, now: Date) -> [Action] {
        switch action {
        case .wake(let date): return [.wake(at: date)]
        case .launch:
            guard let session = sessions[key], session.record.settings.launchCommand != nil || session.record.settings.launchUnit != nil else {
                return []
            }
            let wake = sessions[key]?.launch.launched(now: now)
            return [.launch(key)] + (wake.map { launchActions(key, $0, now: now) } ?? [])
        }
    }

    /// The engine download for `task` on `transfer`.
    static func start(_ task: BackgroundTaskRecord, transfer: UUID, session: BackgroundSessionRecord) -> TransferStart {
        let settings = session.settings
        var start = TransferStart(id: transfer, session: session.key, url: task.spec.url,
                             headers: settings.additionalHeaders + task.spec.headers,
                             timeout: task.spec.timeout ?? settings.timeoutIntervalForRequest, priority: task.spec.priority,
                             allowsExpensive: settings.allowsExpensiveNetworkAccess && !settings.isDiscretionary,
                             allowsRoaming: settings.allowsRoaming && !settings.isDiscretionary,
                             allowsConstrained: settings.allowsConstrainedNetworkAccess && !settings.isDiscretionary,
                             resumeState: task.spec.resumeState, maximumConnections: settings.maximumConnectionsPerHost)
        start.waitsForACPower = settings.isDiscretionary
        start.upload = task.spec.upload
        start.uploadResume = task.uploadResume
        return start
    }
}
