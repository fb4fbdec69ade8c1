import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// Background sessions' upload tasks (issue 28): the registry owns them as it owns download
/// tasks (records, events kept until acknowledged, launches); this runs their transfers on
/// `DownloadAgent.upload`, from the file the session passed open with `createTask` (or, after an
/// agent restart, the same file reopened by path and checked to be the very one), following the
/// path and continuing from the server's offset.
extension AgentService {
    /// `createTask` of an upload: the request must carry the open file (SCM_RIGHTS); the agent
    /// records what it saw through it, and sends only that.
    func createBackgroundUpload(_ spec: BackgroundTaskSpec, in key: BackgroundSessionKey, peer: ControlPeer,
                                id: ControlRequestID?) async -> ControlResponse {
        guard var upload = spec.upload else { return .failure(.invalidArgument("not an upload task"), id: id) }
        let descriptor: FileDescriptor, status: FileStatus
        switch takeUploadFile(from: peer, named: upload.file, missing:
            "a background upload task must carry its open file (SCM_RIGHTS): the agent sends only what the program could read") {
        case .failure(let error): return .failure(error, id: id)
        case .success(let file): (descriptor, status) = file
        }
        upload.identity = UploadFileIdentity(status)
        var checked = spec
        checked.upload = upload
        let transfer = UUID()
        switch background.createTask(checked, in: key, connection: peer.id, transfer: transfer) {
        case .failure(let error):
            descriptor.close()
            return .failure(error, id: id)
        case .success(let actions):
            backgroundUploads[transfer] = BackgroundUploadRun(id: transfer, descriptor: descriptor)
            await applyBackground(actions)
            return .success(id: id)
        }
    }

    /// Starts (or continues) an upload transfer: the passed file, or after a restart the path
    /// reopened, which must still be the file the task was made with.
    func startBackgroundUpload(_ start: BackgroundRegistry.TransferStart) async {
        guard let upload = start.upload, let url = URL(string: start.url) else { return }
        let run = backgroundUploads[start.id] ?? BackgroundUploadRun(id: start.id, descriptor: nil)
        backgroundUploads[start.id] = run
        guard run.live.withLock({ $0.task == nil }) else { return }
        let descriptor: FileDescriptor
        switch run.file(path: upload.file, identity: upload.identity) {
        case .success(let opened): descriptor = opened
        case .failure(let refusal):
            backgroundUploads[start.id] = nil
            run.close()
            await applyBackground(background.transferFailed(start.id, refusal.failure, now: environment.now()))
            return
        }
        var options = UploadOptions()
        options.method = HTTPMethod(upload.method) ?? .post
        options.headerFields = start.headers
        options.idleTimeout = Duration(clampingTimeInterval: start.timeout)
        options.waitsForConnectivity = true
        background.transferStarted(start.id)
        let handlers = backgroundUploadHandlers(run, url: url, upload: upload)
        let agent = agent
        // What the server holds (from the record, or resume data the task was made from): its
        // offset is asked first, and what it acknowledges next is kept on the same state.
        let resume = run.live.withLock { live -> UploadResumeState? in
            if live.resume == nil { live.resume = start.uploadResume }
            return live.resume
        }
        let task = Task { [weak self] in
            let outcome: Result<UploadResult, UploadFailure>
            do throws(UploadFailure) {
                outcome = .success(try await agent.upload(file: descriptor, path: upload.file, to: url, options: options,
                                                          resuming: resume, handlers: handlers))
            } catch {
                outcome = .failure(error)
            }
            await self?.backgroundUploadEnded(run, outcome)
        }
        run.live.withLock { live in
            live.task = task
            live.stop = nil
        }
        emitBackground("uploadStarted", start.session, [.init(key: "transfer", value: .string(start.id.uuidString.lowercased())),
                                                        .init(key: "file", value: .string(upload.file)),
                                                        .init(key: "offset", value: .integer(Int(resume?.acknowledgedOffset ?? 0)))])
    }

    /// Progress goes to the attached process (at most every 100 ms, and the last byte), and the
    /// server's hold on the upload to the task's record before more is sent.
    private func backgroundUploadHandlers(_ run: BackgroundUploadRun, url: URL, upload: BackgroundUploadSpec) -> UploadHandlers {
        UploadHandlers(progress: { [weak self] sent, length in
            let due = run.live.withLock { live -> Bool in
                guard sent > live.pushed else { return false }
                let now = ContinuousClock.now
                guard sent == length || live.lastPush.map({ now - $0 >= .milliseconds(100) }) ?? true else { return false }
                live.pushed = sent
                live.lastPush = now
                return true
            }
            if due { Task { await self?.backgroundUploadProgressed(run.id, sent: sent, length: length) } }
        }, event: { [weak self] event in
            let held = run.live.withLock { live -> UploadResumeState? in
                switch event {
                case .protocolChosen(let chosen):
                    live.protocolInUse = chosen
                case .created(let uploadURL):
                    guard let chosen = live.protocolInUse, chosen == .ietf || chosen == .tus, let identity = upload.identity else { return nil }
                    live.resume = UploadResumeState(url: url, uploadURL: uploadURL, protocolInUse: chosen, acknowledgedOffset: 0,
                                                    length: identity.size, file: identity, filePath: upload.file)
                    return live.resume
                case .resumed(let offset):
                    Task { await self?.backgroundUploadResumed(run.id, offset: offset) }
                    guard var resume = live.resume else { return nil }
                    resume.acknowledgedOffset = max(resume.acknowledgedOffset, offset)
                    live.resume = resume
                    return resume
                case .interrupted, .waitingForConnectivity:
                    break
                }
                return nil
            }
            if let held { Task { await self?.backgroundUploadHeld(run.id, held) } }
        })
    }

    private func backgroundUploadProgressed(_ id: UUID, sent: Int64, length: Int64) {
        for case .push(let connection, let event) in background.transferProgressed(id, bytes: sent, total: length) {
            backgroundPeers[connection]?.send(.push(event), coalescingKey: event.task.map { "progress-\($0.taskIdentifier)" })
        }
    }

    private func backgroundUploadResumed(_ id: UUID, offset: Int64) {
        guard let key = background.owner(of: id) else { return }
        emitBackground("uploadResumed", key, [.init(key: "transfer", value: .string(id.uuidString.lowercased())),
                                              .init(key: "offset", value: .integer(Int(offset)))])
    }

    private func backgroundUploadHeld(_ id: UUID, _ resume: UploadResumeState) async {
        await applyBackground(background.uploadHeld(id, resume))
    }

    /// The upload's task ended: answered (the `finished` event carries the response), failed,
    /// or stopped by a pause, a cancel or a shutdown (then the registry has already decided).
    private func backgroundUploadEnded(_ run: BackgroundUploadRun, _ outcome: Result<UploadResult, UploadFailure>) async {
        let stop = run.live.withLock { live -> BackgroundUploadRun.Stop? in
            live.task = nil
            return live.stop
        }
        if stop != nil { return }
        let now = environment.now()
        switch outcome {
        case .success(let result):
            backgroundUploads[run.id] = nil
            run.close()
            let response = BackgroundUploadResponse(statusCode: result.response.statusCode, headers: result.response.fields, body: result.body)
            await applyBackground(background.transferCompleted(run.id, now: now, response: response))
        case .failure(let failure):
            // The engine's own cancel (a shutdown) is no outcome: the task continues at the next start.
            guard failure.error != .cancelled else { return }
            backgroundUploads[run.id] = nil
            run.close()
            var ended = BackgroundFailure(failure.error, resumeState: nil)
            // Where the server still holds it: the error's uploadTaskResumeData continues it.
            ended.uploadResume = failure.resumeState
            await applyBackground(background.transferFailed(run.id, ended, now: now))
        }
    }

    /// Carries out a registry action on an upload transfer; false when `id` is not one.
    func applyToBackgroundUpload(_ action: BackgroundRegistry.Action) async -> Bool {
        switch action {
        case .resumeTransfer(let id):
            guard backgroundUploads[id] != nil else { return false }
            if let start = background.transferStart(of: id) { await startBackgroundUpload(start) }
        case .pauseTransfer(let id):
            guard let run = backgroundUploads[id] else { return false }
            await run.stopTask(.pause)
        case .cancelTransfer(let id), .releaseTransfer(let id, _):
            guard let run = backgroundUploads.removeValue(forKey: id) else { return false }
            await run.stopTask(.cancel)
            run.close()
        case .stopTransfer(let id):
            guard let run = backgroundUploads[id] else { return false }
            await run.stopTask(.pause)
            let now = environment.now()
            await applyBackground(background.transferStopped(id, resumeState: nil, now: now).actions)
        default:
            return false
        }
        return true
    }

    /// Stops every background upload for a shutdown: the server keeps what it acknowledged, and
    /// the next start continues from its offset.
    func stopBackgroundUploads() async {
        for run in backgroundUploads.values { await run.stopTask(.shutdown) }
    }
}

/// One background upload transfer while the agent runs: the file passed by the session (closed
/// when the transfer ends), the task sending it, and what the server holds of it. Shared by the
/// service's actor and the upload's handlers (the engine's thread): everything under one lock.
final class BackgroundUploadRun: Sendable {
    /// Why its task is being stopped.
    enum Stop: Sendable { case pause, cancel, shutdown }

    /// Why its file cannot be sent (any more): the task's failure, with Apple's code.
    struct Refusal: Error {
        var failure: BackgroundFailure
        init(code: Int, message: String) { failure = BackgroundFailure(code: code, message: message) }
    }

    struct Live: Sendable {
        var descriptor: FileDescriptor?
        var task: Task<Void, Never>?
        var stop: Stop?
        var protocolInUse: UploadProtocol?
        var resume: UploadResumeState?
        var pushed: Int64 = 0
        var lastPush: ContinuousClock.Instant?
    }

    let id: UUID
    let live: Mutex<Live>

    init(id: UUID, descriptor: FileDescriptor?) {
        self.id = id
        live = Mutex(Live(descriptor: descriptor))
    }

    /// The open file, checked against the identity the task was made with; reopened by path
    /// after an agent restart. A changed or replaced file is a clear failure, never a mixed upload.
    func file(path: String, identity: UploadFileIdentity?) -> Result<FileDescriptor, Refusal> {
        let kept = live.withLock { $0.descriptor }
        let descriptor: FileDescriptor
        if let kept {
            descriptor = kept
        } else {
            do {
                descriptor = try FileDescriptor.openForReading(path, nonBlocking: true)
            } catch {
                return .failure(Refusal(code: -1100, message: "cannot open \(path) again after the agent restarted: \(error); upload it again"))
            }
            live.withLock { $0.descriptor = descriptor }
        }
        guard let status = try? descriptor.status(), status.kind == .regular else {
            return .failure(Refusal(code: -1102, message: "\(path) is not a regular file any more; upload it again"))
        }
        if let identity, let change = identity.change(to: status) {
            return .failure(Refusal(code: -3001, message: "\(path) changed since its upload task was made (\(change)); nothing more of it is sent: upload it again"))
        }
        return .success(descriptor)
    }

    /// Stops the task for `reason` and waits (2 s at most) until it has ended.
    func stopTask(_ reason: Stop) async {
        let task = live.withLock { live -> Task<Void, Never>? in
            guard let task = live.task else { return nil }
            live.stop = reason
            return task
        }
        guard let task else { return }
        task.cancel()
        let deadline = ContinuousClock.now + .seconds(2)
        while live.withLock({ $0.task != nil }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    func close() {
        live.withLock { live in
            live.descriptor?.close()
            live.descriptor = nil
        }
    }
}
