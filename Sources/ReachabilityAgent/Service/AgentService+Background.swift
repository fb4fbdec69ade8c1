import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import ReachabilityEvents

/// Background sessions in the agent (issue 17): `BackgroundRegistry` decides, this carries out
/// its actions against the engine (`DownloadAgent`), the files (`BackgroundStore`), the
/// attached connections (`ControlPeer`), the launcher and one timer.
//
// Longer than 400 lines on purpose: it applies every BackgroundRegistry action against the actor's
// state (engine, store, connections, launcher, timer); the decisions are the registry's.
extension AgentService {
    // MARK: start and restore

    /// Opens `STATE/background/` and loads the sessions; returns what they need done (launches
    /// for events that wait). Without a usable directory background sessions are refused.
    func openBackgroundSessions() -> [BackgroundRegistry.Action] {
        do {
            let state = try CheckedDirectory.open(environment.stateDirectory, policy: .privateState)
            let store = try BackgroundStore(stateDirectory: state)
            backgroundStore = store
            backgroundRecords = try? state.subdirectory("records", creating: true)
            let records = store.load { [self] warning in emitAgent("warning", [.init(key: "message", value: .string(warning))]) }
            return background.load(records, now: environment.now())
        } catch {
            emitAgent("error", [.init(key: "message", value: .string("background sessions are unavailable: \(error)"))])
            return []
        }
    }

    /// Gives the background transfers back to a new engine (at start, after a reload): each
    /// one the engine has a record of continues (paused if every task on it is), a finished one
    /// the agent had not reported yet is reported, the rest start over or wait. Then the files
    /// nobody needs go. Returns how many were restored.
    func restoreBackgroundTransfers() async -> Int {
        guard let store = backgroundStore else { return 0 }
        var restored = 0
        var actions: [BackgroundRegistry.Action] = []
        for (start, isPaused) in background.restorePlan() {
            if start.upload != nil {
                // An upload's file is reopened and checked; the server is asked its offset.
                background.adopt(start)
                if isPaused {
                    backgroundUploads[start.id] = BackgroundUploadRun(id: start.id, descriptor: nil)
                } else {
                    await startBackgroundUpload(start)
                }
                restored += 1
                continue
            }
            if let download = await agent.restoreDownload(id: start.id, options: options(start),
                                                          destination: store.destination(of: start.id)) {
                background.adopt(start)
                backgroundDownloads[start.id] = download
                backgroundEngineIDs.insert(start.id)
                downloadOwners[start.id] = start.session.uid
                observe(download, isBackground: true)
                emitDownload(.restored, download, [.init(key: "offset", value: .integer(Int(download.progress.bytesReceived))),
                                                   .init(key: "session", value: .string(start.session.identifier))])
                restored += 1
                if isPaused { await agent.pause(download) }
            } else if store.exists(BackgroundRegistry.finishedFileName(start.id)) {
                // It finished as the agent stopped, before its event was written.
                background.adopt(start)
                actions += background.transferCompleted(start.id, now: environment.now())
            }
        }
        actions += background.scheduleRestored(now: environment.now(), availableBytes: { store.availableBytes() })
        await applyBackground(actions)
        var keep = Set<String>()
        for session in background.sessions.values {
            for event in session.record.pending where event.kind == .finished {
                keep.insert(BackgroundRegistry.finishedFileName(event.task.transfer))
            }
        }
        let removed = store.purge(owned: background.ownedTransferIDs, keep: keep, records: backgroundRecords,
                                  lifetime: environment.resumeDataLifetime, now: environment.now())
        if removed > 0 {
            emitAgent("backgroundFilesRemoved", [.init(key: "count", value: .integer(removed))])
        }
        return restored
    }

    /// The engine was replaced (a reload): its downloads are gone until restored.
    func backgroundEngineReplaced() {
        background.engineReplaced()
        backgroundDownloads = [:]
    }

    // MARK: commands

    func handleBackground(_ command: ControlCommand, id: ControlRequestID?, peer: ControlPeer?) async -> ControlResponse? {
        guard let peer else { return .failure(.invalidArgument("background sessions need a control connection"), id: id) }
        guard let store = backgroundStore else {
            return .failure(.failed("background sessions are unavailable on this agent (see its log)"), id: id)
        }
        let now = environment.now()
        let available: () -> Int64? = { store.availableBytes() }
        func key(_ session: String) -> BackgroundSessionKey { BackgroundSessionKey(uid: peer.credentials.uid, identifier: session) }
        func finish(_ result: Result<[BackgroundRegistry.Action], ControlError>) async -> ControlResponse {
            switch result {
            case .failure(let error): return .failure(error, id: id)
            case .success(let actions):
                await applyBackground(actions)
                return .success(id: id)
            }
        }
        switch command {
        case .attach(let session, let settings):
            return await attachBackground(key(session), settings: settings, peer: peer, store: store, id: id, now: now)
        case .createTask(let session, let spec):
            if spec.upload != nil { return await createBackgroundUpload(spec, in: key(session), peer: peer, id: id) }
            return await finish(background.createTask(spec, in: key(session), connection: peer.id, transfer: UUID()))
        case .updateTask(let session, let identifier, let changes):
            return await finish(background.updateTask(identifier, changes, in: key(session), connection: peer.id, now: now,
                                                      availableBytes: available))
        case .taskAction(let session, let identifier, let action):
            switch background.perform(action, on: identifier, in: key(session), connection: peer.id, now: now, availableBytes: available) {
            case .failure(let error): return .failure(error, id: id)
            case .success(let performed):
                let stopped = await applyBackground(performed.actions)
                return .success(id: id, resumeState: performed.awaitsStop != nil ? stopped : performed.resumeState)
            }
        case .acknowledge(let session, let sequence):
            return await finish(background.acknowledge(key(session), sequence: sequence, connection: peer.id))
        case .invalidate(let session):
            let result = background.invalidate(key(session), connection: peer.id, now: now)
            if case .success = result { emitBackground("invalidated", key(session), []) }
            return await finish(result)
        default:
            return .failure(.unknownCommand(command.name.rawValue), id: id)
        }
    }

    /// `attach`: the session taken by this connection (a hung-up holder detached first), the
    /// reply sent before the events its actions push.
    private func attachBackground(_ key: BackgroundSessionKey, settings: BackgroundSessionSettings, peer: ControlPeer,
                                  store: BackgroundStore, id: ControlRequestID?, now: Date) async -> ControlResponse? {
        // A program relaunched at once (or started by a launch event) may attach before the
        // agent has heard that the previous process's connection ended: if that process is
        // gone, detach it now instead of refusing its successor.
        if let holder = background.sessions[key]?.attachment?.connection, holder != peer.id,
           let holderPeer = backgroundPeers[holder], holderPeer.hasHungUp {
            await connectionClosed(holderPeer)
        }
        switch background.attach(key, settings: settings, connection: peer.id, pid: peer.credentials.pid, now: now) {
        case .failure(let error):
            emitBackground("attachRefused", key, [.init(key: "pid", value: .integer(Int(peer.credentials.pid))),
                                                  .init(key: "message", value: .string(error.message))])
            return .failure(error, id: id)
        case .success(let (reply, actions)):
            var attachment = reply
            guard peer.startStreaming() else {
                await applyBackground(background.detach(peer.id, now: now))
                return .failure(.failed("too many attached background sessions for uid \(peer.credentials.uid)"), id: id)
            }
            backgroundPeers[peer.id] = peer
            attachment.downloadsDirectory = store.downloadsPath
            // The reply first: the events the actions push follow it on the connection.
            peer.send(.success(id: id, attachment: attachment))
            emitBackground("attached", key, [.init(key: "pid", value: .integer(Int(peer.credentials.pid))),
                                             .init(key: "tasks", value: .integer(attachment.tasks.count)),
                                             .init(key: "pendingEvents", value: .integer(attachment.pendingEvents))])
            await applyBackground(actions)
            return nil
        }
    }

    /// A connection ended: its session (if it held one) is detached.
    package func connectionClosed(_ peer: ControlPeer) async {
        guard backgroundPeers.removeValue(forKey: peer.id) != nil else { return }
        let key = background.sessions.first { $0.value.attachment?.connection == peer.id }?.key
        let actions = background.detach(peer.id, now: environment.now())
        if let key { emitBackground("detached", key, [.init(key: "pid", value: .integer(Int(peer.credentials.pid)))]) }
        await applyBackground(actions)
    }

    /// `queue pause|resume|cancel` of a background transfer.
    func controlBackground(_ command: ControlCommand, transfer: UUID, id: ControlRequestID?, uid: UInt32) async -> ControlResponse {
        guard let owner = background.owner(of: transfer), uid == 0 || owner.uid == uid else {
            return .failure(.notFound(transfer.uuidString.lowercased()), id: id)
        }
        let action: BackgroundTaskAction = switch command {
        case .pause: .suspend
        case .resume: .resume
        default: .cancel
        }
        let store = backgroundStore
        await applyBackground(background.control(action, transfer: transfer, now: environment.now(),
                                                 availableBytes: { store?.availableBytes() }))
        if let download = backgroundDownloads[transfer] {
            await settle(download) { action == .suspend ? ($0 == .paused || $0.isFinal) : $0 != .paused }
        }
        refreshSummary()
        let row = backgroundRows(visibleTo: uid).first { $0.id == transfer.uuidString.lowercased() }
        return .success(id: id, download: row ?? AgentDownload(
            id: transfer.uuidString.lowercased(), url: "", destination: "", state: action == .cancel ? .failed : .paused,
            bytesReceived: 0, totalBytes: nil, bytesPerSecond: 0, error: action == .cancel ? "cancelled" : nil, session: owner.identifier))
    }

    // MARK: carrying out the registry's actions

    /// Applies `actions` in order; returns the resume state a transfer stop produced for a
    /// `cancel(byProducingResumeData:)`, if one was asked for. Inside a run of pipelined
    /// requests (`RunCommit`), actions that only write records (and what only follows a write)
    /// wait for the run's end, when one write per session covers them all (issue 29: 3,000
    /// task creations each waited for an fdatasync of their own); anything else, or any call
    /// outside the run, first carries out what waits.
    @discardableResult
    func applyBackground(_ actions: [BackgroundRegistry.Action]) async -> ResumeState? {
        if !actions.isEmpty, actions.allSatisfy(\.mayWaitForTheRunsEnd), let run = RunCommit.collecting,
           run.putOff({ [weak self] in await self?.flushBackgroundSessions() }) {
            for action in actions {
                if case .persist(let key) = action { backgroundDirty.insert(key) } else { backgroundPutOff.append(action) }
            }
            return nil
        }
        await flushBackgroundSessions()
        return await carryOutBackground(actions)
    }

    /// Writes every session a run put off (also at shutdown), then carries out the actions that
    /// waited for those writes, in order.
    func flushBackgroundSessions() async {
        let waiting = backgroundPutOff
        backgroundPutOff = []
        for key in backgroundDirty.sorted() { save(key) }
        if !waiting.isEmpty { await carryOutBackground(waiting) }
    }

    private func carryOutBackground(_ actions: [BackgroundRegistry.Action]) async -> ResumeState? {
        // Each session once, first: the registry has already decided, so its records are what
        // the actions below will have done (an event on disk before it is sent, a session
        // before its transfer exists). A batch that cancels 4096 tasks writes once, not 4096 times.
        var written = Set<BackgroundSessionKey>()
        for case .persist(let key) in actions where written.insert(key).inserted { save(key) }
        var answered: ResumeState?
        for action in actions {
            if await applyToBackgroundUpload(action) { continue }
            switch action {
            case .persist:
                break
            case .removeSession(let key):
                backgroundDirty.remove(key)
                backgroundStore?.remove(key)
            case .push(let connection, let event):
                let key = event.kind == .progress ? event.task.map { "progress-\($0.taskIdentifier)" } : nil
                backgroundPeers[connection]?.send(.push(event), coalescingKey: key)
            case .deliver(let key, let sequence):
                deliver(key, sequence)
            case .startTransfer(let start):
                await startTransfer(start)
            case .resumeTransfer(let id):
                if let download = backgroundDownloads[id] { await agent.resume(download) }
            case .pauseTransfer(let id):
                if let download = backgroundDownloads[id] { await agent.pause(download) }
            case .cancelTransfer(let id):
                if let download = backgroundDownloads.removeValue(forKey: id) { await agent.cancel(download) }
            case .stopTransfer(let id):
                if let state = await stopTransfer(id) { answered = state }
            case .releaseTransfer(let id, let keepFiles):
                if let download = backgroundDownloads.removeValue(forKey: id) { await agent.forget(download) }
                if !keepFiles {
                    backgroundStore?.remove(files: [BackgroundRegistry.finishedFileName(id) + ".part"])
                    try? backgroundRecords?.remove(id.uuidString + ".json")
                }
            case .removeFiles(let names):
                backgroundStore?.remove(files: names)
            case .wake(let date):
                scheduleBackgroundWake(at: date)
            case .launch(let key):
                launch(key)
            }
        }
        refreshSummary()
        return answered
    }

    private func save(_ key: BackgroundSessionKey) {
        backgroundDirty.remove(key)
        guard let record = background.sessions[key]?.record else { return }
        do {
            try backgroundStore?.save(record)
        } catch {
            emitBackground("error", key, [.init(key: "message", value: .string("cannot save the session: \(error)"))])
        }
    }

    /// Pushes pending event `sequence`, a `finished` one with a fresh hard link of the file (the
    /// original stays the agent's until the event is acknowledged, so a process that dies inside
    /// didFinishDownloadingTo gets the file again on its next attach).
    private func deliver(_ key: BackgroundSessionKey, _ sequence: UInt64) {
        guard let session = background.sessions[key], let connection = session.attachment?.connection,
              let peer = backgroundPeers[connection],
              let pending = session.record.pending.first(where: { $0.sequence == sequence }) else { return }
        var event = BackgroundEvent(sequence: sequence, kind: pending.kind, task: pending.task, failure: pending.failure,
                                    response: pending.response)
        // An upload's outcome is the server's response it carries; there is no file to hand out.
        if pending.kind == .finished, pending.task.isUpload != true, let store = backgroundStore {
            do {
                event.location = try store.link(finished: pending.task.transfer, as: pending.deliveryName)
            } catch {
                let finishedName = BackgroundRegistry.finishedFileName(pending.task.transfer)
                event.kind = .failed
                if store.exists(finishedName) {
                    // The file is there but cannot be given a name of its own (the directory made
                    // read-only, EACCES/EPERM/EROFS): Apple's "cannot move" with the real reason,
                    // and the file itself handed out; it stays until the event is acknowledged.
                    let kept = store.downloads.child(finishedName)
                    event.location = kept
                    event.failure = BackgroundFailure(code: -3002, message: "cannot hand out the finished file under its own name: \(error); the file is kept at \(kept) until this event is acknowledged")
                } else {
                    // Removed behind the agent's back: the task fails instead of handing out nothing.
                    event.failure = BackgroundFailure(code: -3001, message: "the finished file is gone from \(store.downloadsPath): \(error)")
                }
            }
        }
        peer.send(.push(event))
    }

    private func startTransfer(_ start: BackgroundRegistry.TransferStart) async {
        if start.upload != nil { return await startBackgroundUpload(start) }
        guard let store = backgroundStore, let url = URL(string: start.url) else { return }
        let state = start.resumeState?.validated
            ?? ResumeState(id: start.id, url: url, entityTag: nil, lastModified: nil, totalLength: nil, verifiedOffset: 0)
        let download: Download
        if start.waitsForACPower { await refreshPower() }
        do {
            download = try await agent.makeDownload(from: url, to: store.destination(of: start.id), options: options(start),
                                                    resuming: state)
        } catch {
            let failure = (error as? DownloadError).map { BackgroundFailure($0, resumeState: start.resumeState) }
                ?? BackgroundFailure(code: -3000, message: "\(error)", resumeState: start.resumeState)
            await applyBackground(background.transferFailed(start.id, failure, now: environment.now()))
            return
        }
        backgroundEngineIDs.insert(start.id)
        downloadOwners[start.id] = start.session.uid
        guard background.wants(start.id) else {
            // Cancelled while it was being created.
            await agent.cancel(download)
            return
        }
        background.transferStarted(start.id)
        backgroundDownloads[start.id] = download
        observe(download, isBackground: true)
        emitDownload(.queued, download, [.init(key: "session", value: .string(start.session.identifier))])
    }

    /// Pauses a transfer and reads its resume state (`cancel(byProducingResumeData:)`, a
    /// resource timeout); a transfer that completed or failed for good meanwhile is reported so.
    private func stopTransfer(_ id: UUID) async -> ResumeState? {
        let now = environment.now()
        guard let download = backgroundDownloads[id] else {
            await applyBackground(background.transferStopped(id, resumeState: nil, now: now).actions)
            return nil
        }
        await agent.pause(download)
        switch download.state {
        case .completed:
            await applyBackground(background.transferCompleted(id, now: now))
            return nil
        case .failed(let error) where !error.isResumable:
            await applyBackground(background.transferFailed(id, BackgroundFailure(error, resumeState: nil), now: now))
            return nil
        default:
            // Ranges and seams included: a segmented transfer continued from it refetches none of them.
            let state = await agent.resumeState(of: download).flatMap { $0.isContinuable ? $0 : nil }
            let (actions, answered) = background.transferStopped(id, resumeState: state, now: now)
            await applyBackground(actions)
            return answered
        }
    }

    /// The engine's options for a background transfer: the session's rules, within the agent's
    /// own (`--no-expensive`, `--no-roaming`, agent.conf) as for queued downloads.
    func options(_ start: BackgroundRegistry.TransferStart) -> DownloadOptions {
        var options = DownloadOptions(allowsExpensive: start.allowsExpensive && settings.allowsExpensive,
                                      allowsRoaming: start.allowsRoaming && settings.allowsRoaming, allowsConstrained: start.allowsConstrained,
                                      maximumConnections: start.maximumConnections, priority: start.priority,
                                      requestHeaders: start.headers, requestTimeout: Duration(clampingTimeInterval: start.timeout))
        options.waitsForACPower = start.waitsForACPower
        return options
    }

    // MARK: the engine's news

    func backgroundTransferEvent(_ download: Download, _ event: DownloadEvent) async {
        let id = download.id
        let now = environment.now()
        switch event {
        case .resumed(let offset):
            await applyBackground(background.transferResumed(id, offset: offset))
        case .restartedFromZero:
            await applyBackground(background.transferResumed(id, offset: 0))
        case .waitingForConnectivity:
            await applyBackground(background.transferWaitingForConnectivity(id))
        case .completed:
            backgroundDownloads[id] = nil
            await applyBackground(background.transferCompleted(id, now: now))
        case .failed(let error):
            guard error != .cancelled else { return }
            var state: ResumeState?
            if error.isResumable {
                state = await agent.resumeState(of: download).flatMap { $0.isContinuable ? $0 : nil }
            }
            await applyBackground(background.transferFailed(id, BackgroundFailure(error, resumeState: state), now: now))
        case .started, .waitingForServer, .retrying, .paused, .waiting, .sourceDropped:
            break
        }
    }

    func backgroundProgressed(_ download: Download, _ progress: DownloadProgress) async {
        guard backgroundDownloads[download.id] === download else { return }
        let actions = background.transferProgressed(download.id, bytes: progress.bytesReceived, total: progress.totalBytes)
        for case .push(let connection, let event) in actions {
            backgroundPeers[connection]?.send(.push(event), coalescingKey: event.task.map { "progress-\($0.taskIdentifier)" })
        }
    }

    // MARK: timer and launches

    private func scheduleBackgroundWake(at date: Date) {
        let now = environment.now()
        if let current = backgroundWake, current.at <= date, current.at > now { return }
        backgroundWake?.task.cancel()
        let delay = max(0, date.timeIntervalSince(now))
        backgroundWake = (date, Task { [weak self] in
            try? await Task.sleep(for: Duration(clampingTimeInterval: delay) + .milliseconds(1))
            guard !Task.isCancelled else { return }
            await self?.backgroundTimerFired()
        })
    }

    private func backgroundTimerFired() async {
        backgroundWake = nil
        let store = backgroundStore
        await applyBackground(background.timerFired(now: environment.now(), availableBytes: { store?.availableBytes() }))
    }

    private func launch(_ key: BackgroundSessionKey) {
        guard let settings = background.sessions[key]?.record.settings else { return }
        let pending = background.sessions[key]?.record.pending.count ?? 0
        emitBackground("launching", key, [.init(key: "launcher", value: .string(ProgramLauncher.describe(settings) ?? "-")),
                                          .init(key: "pendingEvents", value: .integer(pending))])
        launcher.launch(key.identifier, settings: settings) { [weak self] failure in
            Task { await self?.launchEnded(key, failure: failure) }
        }
    }

    private func launchEnded(_ key: BackgroundSessionKey, failure: String?) async {
        let actions = background.launchEnded(key, failure: failure, now: environment.now())
        if let failure {
            emitBackground("launchFailed", key, [.init(key: "message", value: .string(failure)),
                                                 .init(key: "consecutiveFailures", value: .integer(background.sessions[key]?.launch.consecutiveFailures ?? 0))])
        } else {
            emitBackground("launchEnded", key, [])
        }
        await applyBackground(actions)
    }

    // MARK: reports

    private func visible(_ key: BackgroundSessionKey, to uid: UInt32) -> Bool { uid == 0 || key.uid == uid }

    /// The background transfers `uid` may name in `queue` commands.
    func backgroundTransferIDs(visibleTo uid: UInt32) -> [UUID] {
        var ids: [UUID] = []
        for (key, session) in background.sessions where visible(key, to: uid) {
            for task in session.liveTasks where !ids.contains(task.transfer) { ids.append(task.transfer) }
        }
        return ids
    }

    /// One `queue list` row per background transfer `uid` may see, with its session and tasks.
    func backgroundRows(visibleTo uid: UInt32) -> [AgentDownload] {
        var rows: [AgentDownload] = []
        for key in background.sessions.keys.sorted() where visible(key, to: uid) {
            guard let session = background.sessions[key] else { continue }
            // The live tasks once and their riders by transfer: recomputed per task, a list of
            // one session's 3,000 tasks took longer than a request may (issue 29).
            let live = session.liveTasks
            var riders: [UUID: [Int]] = [:]
            for task in live { riders[task.transfer, default: []].append(task.spec.taskIdentifier) }
            var seen = Set<UUID>()
            for task in live where seen.insert(task.transfer).inserted {
                var row: AgentDownload
                if let download = backgroundDownloads[task.transfer] {
                    row = Self.snapshot(download)
                } else {
                    let state: AgentDownload.State = task.phase == .running ? .queued : .paused
                    row = AgentDownload(id: task.transfer.uuidString.lowercased(), url: task.spec.url,
                                        destination: backgroundStore?.destination(of: task.transfer).path ?? "", state: state,
                                        bytesReceived: task.bytesReceived, totalBytes: task.totalBytes, bytesPerSecond: 0)
                }
                row.session = key.identifier
                row.taskIdentifiers = riders[task.transfer]
                row.waitingReason = session.waiting[task.spec.taskIdentifier]?.description
                row.waitingFor = session.waiting[task.spec.taskIdentifier]?.kind.rawValue
                rows.append(row)
            }
        }
        return rows
    }

    /// `agent status`'s background sessions.
    func backgroundStatuses(visibleTo uid: UInt32) -> [BackgroundSessionStatus] {
        background.sessions.keys.sorted().filter { visible($0, to: uid) }.compactMap { key in
            guard let session = background.sessions[key] else { return nil }
            let settings = session.record.settings
            return BackgroundSessionStatus(
                identifier: key.identifier, uid: key.uid, attachedPID: session.attachment?.pid,
                tasks: session.liveTasks.count, pendingEvents: session.record.pending.count,
                launcher: settings.sendsLaunchEvents ? ProgramLauncher.describe(settings) : nil,
                launches: session.launch.launches, consecutiveLaunchFailures: session.launch.consecutiveFailures,
                lastLaunchFailure: session.launch.lastFailure, nextLaunch: session.launch.nextAttempt.map(Timestamp.iso8601))
        }
    }

    func backgroundMetricFamilies() -> [MetricFamily] {
        let sessions = background.sessions.values
        let attached = sessions.filter { $0.attachment != nil }.count
        return [
            MetricFamily("reachability_background_sessions", .gauge,
                         help: "Background sessions the agent holds, by whether a process is attached.",
                         samples: [MetricSample(Double(attached), labels: [("attached", "true")]),
                                   MetricSample(Double(sessions.count - attached), labels: [("attached", "false")])]),
            MetricFamily("reachability_background_tasks", .gauge, help: "Background tasks that have not completed.",
                         value: Double(sessions.reduce(0) { $0 + $1.liveTasks.count })),
            MetricFamily("reachability_background_pending_events", .gauge,
                         help: "Background events waiting to be handled by their session's program.",
                         value: Double(sessions.reduce(0) { $0 + $1.record.pending.count })),
            MetricFamily("reachability_background_launches", .counter,
                         help: "Programs started for background sessions' events since start, and how many of those launches failed.",
                         created: startedAt, samples: [MetricSample(Double(sessions.reduce(0) { $0 + $1.launch.launches }), labels: [("result", "started")]),
                                   MetricSample(Double(sessions.reduce(0) { $0 + $1.launch.failures }), labels: [("result", "failed")])]),
            MetricFamily("reachability_background_launchers_failing", .gauge,
                         help: "Background sessions whose last launch failed (agent status says why).",
                         value: Double(sessions.filter { $0.launch.isFailing }.count)),
        ]
    }

    func emitBackground(_ event: String, _ key: BackgroundSessionKey, _ fields: [JSONValue.Member]) {
        environment.emit(EventSchema.line(.background, event, at: environment.now(),
                                          [.init(key: "session", value: .string(key.identifier)),
                                           .init(key: "uid", value: .integer(Int(key.uid)))] + fields))
    }
}

extension BackgroundRegistry.Action {
    /// Whether, inside a run of pipelined requests, the action may wait for the run's end: a
    /// record write, or what must only follow one (files an acknowledgement frees, the wake
    /// timer). Anything else goes out at once, after what waits: pushes, deliveries, stops, and
    /// a transfer's start (the registry decides the next request of the run by whether the
    /// engine has the transfer: a duplicate task joins a started transfer, a suspended one
    /// pauses it).
    var mayWaitForTheRunsEnd: Bool {
        switch self {
        case .persist, .removeFiles, .wake: true
        default: false
        }
    }
}
