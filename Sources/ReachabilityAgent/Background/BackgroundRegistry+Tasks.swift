import FoundationEssentials
import ResumableDownloads

/// The task half of the registry: creating and changing tasks, what resume, suspend and cancel
/// do to their transfers, and what the engine's outcomes mean for the tasks riding on them.
extension BackgroundRegistry {
    /// What a task action leads to: the actions, and for a cancel producing resume data that
    /// needs no transfer stop, the state to answer with at once.
    package struct Performed: Sendable, Hashable {
        package var actions: [Action]
        package var resumeState: ResumeState?
        /// The stop of this transfer was asked for: the answer comes with `transferStopped`.
        package var awaitsStop: UUID?
    }

    // MARK: tasks

    /// Creates a task (suspended until resumed). `transfer` names its download unless the task
    /// continues resume data (which names its own).
    package mutating func createTask(_ spec: BackgroundTaskSpec, in key: BackgroundSessionKey, connection: ConnectionID,
                                     transfer: UUID) -> Result<[Action], ControlError> {
        let id = spec.resumeState?.id ?? transfer
        // A scope of its own: the copy of the session must be gone before `update` appends, or
        // the append copies every task (perf, issue 29).
        do {
            guard let session = attached(key, connection) else { return .failure(Self.notAttached(key)) }
            if let problem = spec.problem { return .failure(.invalidArgument(problem)) }
            guard session.task(spec.taskIdentifier) == nil,
                  !session.record.pending.contains(where: { $0.task.taskIdentifier == spec.taskIdentifier }) else {
                return .failure(.invalidArgument("task \(spec.taskIdentifier) already exists in background session '\(key.identifier)'"))
            }
            guard session.record.tasks.count < BackgroundSessionRecord.maximumTasks else {
                return .failure(.invalidArgument("background session '\(key.identifier)' already has \(BackgroundSessionRecord.maximumTasks) tasks"))
            }
            if spec.resumeState != nil, transfers[id] != nil
                || session.record.tasks.contains(where: { $0.transfer == id }) {
                return .failure(.sessionInUse("another task is already resuming this download"))
            }
        }
        var record = BackgroundTaskRecord(spec: spec, transfer: id)
        // Made from resume data: the server holds the upload already (its offset is asked).
        record.uploadResume = spec.upload?.resume
        update(key) { session in
            session.record.tasks.append(record)
            session.record.nextTaskIdentifier = max(session.record.nextTaskIdentifier, spec.taskIdentifier + 1)
        }
        return .success([.persist(key)])
    }

    /// Changes a task's description, date, expected size or priority; a date or size that now
    /// lets a waiting task go (or holds it) takes effect at once.
    package mutating func updateTask(_ identifier: Int, _ changes: BackgroundTaskChanges, in key: BackgroundSessionKey,
                                     connection: ConnectionID, now: Date, availableBytes: () -> Int64?) -> Result<[Action], ControlError> {
        guard let session = attached(key, connection), let position = session.index(of: identifier),
              session.record.tasks[position].phase != .completed else {
            return .failure(attached(key, connection) == nil ? Self.notAttached(key)
                : .invalidArgument("no task \(identifier) that has not completed in background session '\(key.identifier)'"))
        }
        var spec = session.record.tasks[position].spec
        spec.taskDescription = changes.taskDescription
        spec.earliestBeginDate = changes.earliestBeginDate
        spec.expectedBytes = changes.expectedBytes
        spec.priority = changes.priority
        if let problem = spec.problem { return .failure(.invalidArgument(problem)) }
        update(key) { $0.record.tasks[position].spec = spec }
        var actions: [Action] = [.persist(key)]
        if sessions[key]?.waiting[identifier] != nil {
            actions += schedule(identifier, in: key, now: now, availableBytes: availableBytes) + nextWake(now: now)
        }
        return .success(actions)
    }

    /// resume, suspend, cancel, or cancel producing resume data.
    package mutating func perform(_ action: BackgroundTaskAction, on identifier: Int, in key: BackgroundSessionKey,
                                  connection: ConnectionID, now: Date, availableBytes: () -> Int64?) -> Result<Performed, ControlError> {
        guard let session = attached(key, connection) else { return .failure(Self.notAttached(key)) }
        guard let task = session.task(identifier), task.phase != .completed else {
            // Completed already (its event says how): nothing to do, as URLSession ignores it.
            return .success(Performed(actions: []))
        }
        switch action {
        case .resume:
            return .success(Performed(actions: resume(identifier, in: key, now: now, availableBytes: availableBytes) + nextWake(now: now)))
        case .suspend:
            return .success(Performed(actions: suspend(identifier, in: key)))
        case .cancel:
            return .success(Performed(actions: cancel(identifier, in: key, now: now, producingResumeData: false).actions))
        case .cancelProducingResumeData:
            return .success(cancel(identifier, in: key, now: now, producingResumeData: true))
        }
    }

    /// `queue pause|resume|cancel` on a transfer, for whoever owns it (or root).
    package mutating func control(_ action: BackgroundTaskAction, transfer id: UUID, now: Date,
                                  availableBytes: () -> Int64?) -> [Action] {
        guard let key = owner(of: id), let session = sessions[key] else { return [] }
        let identifiers = session.liveTasks.filter { $0.transfer == id }.map(\.spec.taskIdentifier)
        var actions: [Action] = []
        for identifier in identifiers {
            switch action {
            case .resume: actions += resume(identifier, in: key, now: now, availableBytes: availableBytes)
            case .suspend: actions += suspend(identifier, in: key)
            case .cancel, .cancelProducingResumeData: actions += cancel(identifier, in: key, now: now, producingResumeData: false).actions
            }
        }
        return actions + nextWake(now: now)
    }

    /// The session a transfer (live, or of a task not started yet) belongs to.
    package func owner(of transfer: UUID) -> BackgroundSessionKey? {
        if let live = transfers[transfer] { return live.session }
        return sessions.first { $0.value.record.tasks.contains { $0.transfer == transfer && $0.phase != .completed } }?.key
    }

    private mutating func resume(_ identifier: Int, in key: BackgroundSessionKey, now: Date, availableBytes: () -> Int64?) -> [Action] {
        guard let position = sessions[key]?.index(of: identifier), let task = sessions[key]?.record.tasks[position] else { return [] }
        guard task.phase == .created || task.phase == .suspended else { return [] }
        let wasSuspended = task.phase == .suspended
        update(key) { session in
            session.record.tasks[position].phase = .running
            if session.record.tasks[position].deadline == nil {
                session.record.tasks[position].deadline = now.timeIntervalSince1970 + session.record.settings.timeoutIntervalForResource
            }
        }
        if wasSuspended, let transfer = transfers[task.transfer], transfer.isStarted {
            // Its transfer exists (paused, or still running for another task).
            let othersRunning = transfer.tasks.contains { $0 != identifier && sessions[key]?.task($0)?.phase == .running }
            return [.persist(key)] + (othersRunning ? [] : [.resumeTransfer(task.transfer)])
        }
        return [.persist(key)] + schedule(identifier, in: key, now: now, availableBytes: availableBytes)
    }

    /// Starts a resumed task's transfer when it may run, or records why it waits: not before its
    /// date; not while its expected size (less what it already has, plus what other running
    /// tasks still expect) exceeds the free space. Joins an in-flight transfer of the same
    /// session for the same request.
    mutating func schedule(_ identifier: Int, in key: BackgroundSessionKey, now: Date, availableBytes: () -> Int64?) -> [Action] {
        guard let session = sessions[key], let task = session.task(identifier), task.phase == .running else { return [] }
        if let date = task.spec.earliestBeginDate, date > now.timeIntervalSince1970 {
            update(key) { $0.waiting[identifier] = .notBefore(Date(timeIntervalSince1970: date)) }
            return []
        }
        if task.spec.expectedBytes > 0 {
            let needed = max(0, task.spec.expectedBytes - task.bytesReceived)
            let promised = sessions.values.flatMap { other in
                other.record.tasks.filter { $0.phase == .running && other.waiting[$0.spec.taskIdentifier] == nil
                    && !($0.spec.taskIdentifier == identifier && other.record.key == key) }
            }.reduce(Int64(0)) { sum, task in
                // Saturating: each term is at most 2^60, but a million of them are not.
                let (total, overflow) = sum.addingReportingOverflow(max(0, task.spec.expectedBytes - task.bytesReceived))
                return overflow ? .max : total
            }
            if let available = availableBytes(), promised > available || needed > available - promised {
                update(key) { $0.waiting[identifier] = .lowDiskSpace(free: max(0, available - promised), needed: needed) }
                return []
            }
        }
        update(key) { $0.waiting[identifier] = nil }
        if task.spec.resumeState == nil, let joined = joinableTransfer(for: task, in: key) {
            update(key) { session in
                if let position = session.index(of: identifier) { session.record.tasks[position].transfer = joined }
            }
            transfers[joined]?.tasks.insert(identifier)
            return [.persist(key)]
        }
        if transfers[task.transfer]?.isStarted == true { return [] }
        setTransfer(task.transfer, Transfer(session: key, tasks: (transfers[task.transfer]?.tasks ?? []).union([identifier])))
        return [.startTransfer(Self.start(task, transfer: task.transfer, session: session.record))]
    }

    /// A running transfer of the same session for the same request (URL and headers).
    private func joinableTransfer(for task: BackgroundTaskRecord, in key: BackgroundSessionKey) -> UUID? {
        guard let session = sessions[key] else { return nil }
        // Two uploads are two bodies, never one request sent once (only downloads share).
        guard task.spec.upload == nil else { return nil }
        return session.record.tasks.first { other in
            other.spec.upload == nil && other.spec.taskIdentifier != task.spec.taskIdentifier && other.phase == .running && other.transfer != task.transfer
                && session.waiting[other.spec.taskIdentifier] == nil && other.spec.url == task.spec.url
                && other.spec.headers == task.spec.headers && transfers[other.transfer]?.isStarted == true
        }?.transfer
    }

    private mutating func suspend(_ identifier: Int, in key: BackgroundSessionKey) -> [Action] {
        guard let session = sessions[key], let position = session.index(of: identifier),
              session.record.tasks[position].phase == .running else { return [] }
        let transfer = session.record.tasks[position].transfer
        update(key) { session in
            session.record.tasks[position].phase = .suspended
            session.waiting[identifier] = nil
        }
        guard let live = transfers[transfer], live.isStarted else { return [.persist(key)] }
        let othersRunning = live.tasks.contains { $0 != identifier && sessions[key]?.task($0)?.phase == .running }
        return [.persist(key)] + (othersRunning ? [] : [.pauseTransfer(transfer)])
    }

    private mutating func cancel(_ identifier: Int, in key: BackgroundSessionKey, now: Date, producingResumeData: Bool) -> Performed {
        guard let session = sessions[key], let task = session.task(identifier) else { return Performed(actions: []) }
        guard let live = transfers[task.transfer], live.tasks.contains(identifier) else {
            // Never started (or waiting): resume data it was made from is still good.
            let state = producingResumeData ? task.spec.resumeState : nil
            var failure = BackgroundFailure.cancelled
            failure.resumeState = state
            if producingResumeData { failure.uploadResume = task.uploadResume }
            return Performed(actions: addEvent(.failed, task: task, failure: failure, in: key, now: now), resumeState: state)
        }
        let others = live.tasks.subtracting([identifier])
        if !others.isEmpty {
            // Others ride on the transfer: this task leaves it, without resume data (the bytes are theirs).
            transfers[task.transfer]?.tasks = others
            let remainingRunning = others.contains { sessions[key]?.task($0)?.phase == .running }
            let actions = addEvent(.failed, task: task, failure: .cancelled, in: key, now: now)
            return Performed(actions: actions + (remainingRunning || !live.isStarted ? [] : [.pauseTransfer(task.transfer)]))
        }
        if producingResumeData, live.isStarted, task.spec.upload == nil {
            update(key) { $0.stopping[identifier] = .cancelledProducingResumeData }
            return Performed(actions: [.stopTransfer(task.transfer)], awaitsStop: task.transfer)
        }
        removeTransfer(task.transfer)
        var actions: [Action] = []
        if live.isStarted {
            markCancelling(task.transfer)
            actions.append(.cancelTransfer(task.transfer))
        }
        var failure = BackgroundFailure.cancelled
        if producingResumeData, task.spec.upload != nil {
            // The server keeps what it acknowledged: a new task asks its offset (the transfer is
            // stopped before this event goes out, so that offset is settled).
            failure.uploadResume = task.uploadResume
            if task.uploadResume == nil {
                failure.message = "cancelled; no resume data: the server holds nothing of this upload to continue (it took it as one plain request, or had not named it yet)"
            }
        }
        return Performed(actions: actions + addEvent(.failed, task: task, failure: failure, in: key, now: now))
    }

    /// `timeoutIntervalForResource` ran out: -1001, with resume data where the bytes are the task's alone.
    mutating func expire(_ identifier: Int, in key: BackgroundSessionKey, now: Date) -> [Action] {
        guard let session = sessions[key], let task = session.task(identifier) else { return [] }
        var failure = BackgroundFailure(code: -1001, message: "the resource did not arrive within timeoutIntervalForResource (\(Int(session.record.settings.timeoutIntervalForResource)) s)",
                                        resumeState: task.spec.resumeState)
        // An upload the server holds (or that resume data named) continues from the error's uploadTaskResumeData.
        failure.uploadResume = task.uploadResume
        guard let live = transfers[task.transfer], live.tasks.contains(identifier) else {
            return addEvent(.failed, task: task, failure: failure, in: key, now: now)
        }
        let others = live.tasks.subtracting([identifier])
        if !others.isEmpty || !live.isStarted {
            if others.isEmpty { removeTransfer(task.transfer) } else { transfers[task.transfer]?.tasks = others }
            var plain = failure
            plain.resumeState = nil
            return addEvent(.failed, task: task, failure: plain, in: key, now: now)
        }
        update(key) { $0.stopping[identifier] = .resourceTimeout }
        return [.stopTransfer(task.transfer)]
    }

    // MARK: the engine's news

    /// Bytes arrived: pushed to the attached process, for each running task on the transfer.
    package mutating func transferProgressed(_ id: UUID, bytes: Int64, total: Int64?) -> [Action] {
        guard let transfer = transfers[id], let session = sessions[transfer.session] else { return [] }
        var actions: [Action] = []
        for identifier in transfer.tasks.sorted() {
            guard let position = session.index(of: identifier) else { continue }
            update(transfer.session) { session in
                session.record.tasks[position].bytesReceived = bytes
                if let total { session.record.tasks[position].totalBytes = total }
            }
            guard let connection = session.attachment?.connection, session.record.tasks[position].phase == .running else { continue }
            let snapshot = sessions[transfer.session]!.record.tasks[position].snapshot(waitingReason: nil)
            actions.append(.push(connection, BackgroundEvent(kind: .progress, task: snapshot, bytes: bytes, total: total)))
        }
        return actions
    }

    /// An attempt began at `offset` (0 after the resource changed).
    package func transferResumed(_ id: UUID, offset: Int64) -> [Action] {
        guard let transfer = transfers[id], let session = sessions[transfer.session],
              let connection = session.attachment?.connection else { return [] }
        return transfer.tasks.sorted().compactMap { identifier in
            guard let task = session.task(identifier) else { return nil }
            return .push(connection, BackgroundEvent(kind: .resumed, task: task.snapshot(waitingReason: nil), bytes: offset,
                                                     total: task.totalBytes))
        }
    }

    /// No usable path for the transfer: each attached task hears it once.
    package mutating func transferWaitingForConnectivity(_ id: UUID) -> [Action] {
        guard let transfer = transfers[id], let session = sessions[transfer.session],
              let connection = session.attachment?.connection else { return [] }
        var actions: [Action] = []
        for identifier in transfer.tasks.sorted() where !session.announcedWaiting.contains(identifier) {
            guard let task = session.task(identifier) else { continue }
            update(transfer.session) { _ = $0.announcedWaiting.insert(identifier) }
            actions.append(.push(connection, BackgroundEvent(kind: .waitingForConnectivity, task: task.snapshot(waitingReason: nil))))
        }
        return actions
    }

    /// The server holds upload transfer `id` (or acknowledged more of it): kept in its task's
    /// record, so an agent restart asks that resource its offset instead of sending it again.
    package mutating func uploadHeld(_ id: UUID, _ resume: UploadResumeState) -> [Action] {
        guard let transfer = transfers[id], let session = sessions[transfer.session] else { return [] }
        for identifier in transfer.tasks {
            guard let position = session.index(of: identifier) else { continue }
            update(transfer.session) { $0.record.tasks[position].uploadResume = resume }
        }
        return [.persist(transfer.session)]
    }

    /// The engine finished the file (`TRANSFER.download`), or the server answered an upload
    /// (`response`): every task on it gets `finished`.
    package mutating func transferCompleted(_ id: UUID, now: Date, response: BackgroundUploadResponse? = nil) -> [Action] {
        guard let transfer = transfers[id] else { return [] }
        removeTransfer(id)
        var actions: [Action] = []
        for identifier in transfer.tasks.sorted() {
            guard let task = sessions[transfer.session]?.task(identifier) else { continue }
            var done = task
            if let total = done.totalBytes { done.bytesReceived = total }
            actions += addEvent(.finished, task: done, failure: nil, response: response, in: transfer.session, now: now)
        }
        if transfer.tasks.isEmpty || actions.isEmpty { actions.append(.removeFiles([Self.finishedFileName(id)])) }
        return actions + nextWake(now: now)
    }

    /// The engine gave up on the transfer (`resumeState` when its bytes can be continued).
    package mutating func transferFailed(_ id: UUID, _ failure: BackgroundFailure, now: Date) -> [Action] {
        if consumeCancelling(id) { return [] }
        guard let transfer = transfers[id] else { return [] }
        removeTransfer(id)
        var actions: [Action] = []
        for identifier in transfer.tasks.sorted() {
            guard let task = sessions[transfer.session]?.task(identifier) else { continue }
            actions += addEvent(.failed, task: task, failure: failure, in: transfer.session, now: now)
        }
        return actions + [.releaseTransfer(id, keepFiles: failure.resumeState != nil)] + nextWake(now: now)
    }

    /// A stop asked for (`stopTransfer`) is done: the transfer paused with `resumeState`, or it
    /// completed or failed meanwhile (then those outcomes were reported too, and this is moot).
    package mutating func transferStopped(_ id: UUID, resumeState: ResumeState?, now: Date) -> (actions: [Action], resumeState: ResumeState?) {
        guard let transfer = transfers[id], let session = sessions[transfer.session] else { return ([], nil) }
        var actions: [Action] = []
        var answered: ResumeState?
        for identifier in transfer.tasks.sorted() {
            guard let reason = session.stopping[identifier], let task = session.task(identifier) else { continue }
            var failure: BackgroundFailure
            switch reason {
            case .cancelledProducingResumeData:
                failure = .cancelled
                answered = resumeState
            case .resourceTimeout:
                failure = BackgroundFailure(code: -1001, message: "the resource did not arrive within timeoutIntervalForResource (\(Int(session.record.settings.timeoutIntervalForResource)) s)")
                // The upload's transfer is stopped, not cancelled: the server keeps what it took,
                // and the error's uploadTaskResumeData continues it from there.
                failure.uploadResume = task.uploadResume
            }
            failure.resumeState = resumeState
            actions += addEvent(.failed, task: task, failure: failure, in: transfer.session, now: now)
        }
        removeTransfer(id)
        return (actions + [.releaseTransfer(id, keepFiles: resumeState != nil)] + nextWake(now: now), answered)
    }
}
