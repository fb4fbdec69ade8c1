import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ReachabilityEvents
import ResumableDownloads
import Synchronization

/// Upload jobs (`queue add --upload FILE URL`): the agent sends a file the caller opened and
/// passed over the control socket (SCM_RIGHTS), on `DownloadAgent.upload`, so the job follows
/// the path (stops the moment it goes, asks the server its offset when it is back), outlives the
/// caller, and continues from the server's offset after an agent restart (its record in
/// `STATE_DIR/uploads/`). Uploads do not take the downloads' transfer slots: a job starts at once.
extension AgentService {
    // MARK: control commands

    /// Queues and starts an upload job for `addUpload`; the file is the descriptor `peer` passed
    /// with the request, never the path it names (the agent reads only what the caller could).
    func addUpload(_ url: URL, _ request: UploadJobRequest, id: ControlRequestID?, peer: ControlPeer?, uid: UInt32) -> ControlResponse {
        let descriptor: FileDescriptor, status: FileStatus
        switch takeUploadFile(from: peer, named: request.file, missing:
            "an upload request must carry the open file (SCM_RIGHTS): the agent uploads only what the caller could read; use 'reachability queue add --upload FILE URL'") {
        case .failure(let error): return .failure(error, id: id)
        case .success(let file): (descriptor, status) = file
        }
        guard let store = uploadStore() else {
            descriptor.close()
            return .failure(.failed("cannot keep upload jobs: STATE_DIR/uploads cannot be opened or created"), id: id)
        }
        let record = UploadJobRecord(id: UUID(), url: url, filePath: request.file, file: UploadFileIdentity(status),
                                     protocolChoice: request.protocolChoice ?? .auto, method: (request.requestMethod ?? .post).description,
                                     allowsPlainRetry: request.restartPlain ?? false, owner: uid)
        do {
            try store.save(record)
        } catch {
            descriptor.close()
            return .failure(.failed("cannot write the upload job's record in \(environment.stateDirectory)/uploads: \(error)"), id: id)
        }
        let job = UploadJob(record: record, descriptor: descriptor)
        uploadJobs.jobs.withLock { $0[job.id] = job }
        emitUpload("queued", job)
        startUploadJob(job)
        return .success(id: id, download: job.report())
    }

    /// Upload job IDs `uid` may see and act on (its own; root sees all).
    func uploadJobIDs(visibleTo uid: UInt32) -> [UUID] {
        uploadJobs.all.filter { uid == 0 || $0.record.owner == uid }.map(\.id)
    }

    /// `queue list`'s rows of upload jobs for `uid`.
    nonisolated func uploadRows(visibleTo uid: UInt32) -> [AgentDownload] {
        uploadJobs.all.filter { uid == 0 || $0.record.owner == uid }.sorted { $0.id.uuidString < $1.id.uuidString }.map { $0.report() }
    }

    /// `pause`, `resume` or `cancel` of upload job `uuid`; nil when it is not one.
    func controlUploadJob(_ command: ControlCommand, _ uuid: UUID, id: ControlRequestID?) async -> ControlResponse? {
        guard let job = uploadJobs.jobs.withLock({ $0[uuid] }) else { return nil }
        let short = Self.shortID(uuid)
        let state = job.state
        switch command {
        case .pause:
            if state.isFinal { return .failure(.invalidArgument("upload \(short) has already finished"), id: id) }
            if state != .paused {
                _ = job.updateRecord(in: uploadStore()) { $0.isPaused = true }
                if await stopUploadTask(job, .pause) == false {
                    job.live.withLock { $0.state = .paused }
                    emitUpload("paused", job)
                }
            }
        case .resume:
            let record = job.record
            guard state == .paused || (state == .failed && record.failure != nil) else {
                return .failure(.invalidArgument(state.isFinal ? "upload \(short) has ended and cannot be continued; add it again"
                                                                : "upload \(short) is not paused"), id: id)
            }
            _ = job.updateRecord(in: uploadStore()) { record in
                record.isPaused = false
                record.failure = nil
            }
            startUploadJob(job)
        case .cancel:
            if state == .completed { return .failure(.invalidArgument("upload \(short) has already completed; there is nothing to cancel"), id: id) }
            if await stopUploadTask(job, .cancel) == false {
                finishUploadJob(job, failed: "cancelled", code: DownloadError.cancelled.errorCode)
            }
        default:
            return nil
        }
        return .success(id: id, download: job.report())
    }

    // MARK: running

    /// The records' directory, opened (and created) on first use.
    func uploadStore() -> UploadJobStore? {
        uploadJobs.store.withLock { store in
            if store == nil { store = try? UploadJobStore(stateDirectory: environment.stateDirectory) }
            return store
        }
    }

    /// Sends the job's file on the current download agent, from the server's offset when the
    /// server holds part of it; the file must still be the one queued.
    func startUploadJob(_ job: UploadJob) {
        let record = job.record
        if record.resume == nil, let chosen = record.protocolInUse, chosen != .tus,
           !(record.allowsPlainRetry && record.method == HTTPMethod.put.description) {
            // Stopped (a pause, an agent restart) without a resource the server made: tus makes
            // one before any byte, the draft names it in a 104; without it the file went as one
            // plain request, and starting again would send it twice.
            finishUploadJob(job, failed: "\(record.filePath) went as one plain request (the server made no resumable upload of it), which cannot be continued without sending the file again; add it again (a PUT with --restart-plain is sent again by itself)",
                            code: DownloadError.networkConnectionLost.errorCode)
            return
        }
        let descriptor: FileDescriptor
        switch openFile(of: job) {
        case .success(let opened): descriptor = opened
        case .failure(let problem):
            finishUploadJob(job, failed: problem.message, code: DownloadError.fileSystem.errorCode)
            return
        }
        var options = UploadOptions()
        options.protocolChoice = record.protocolChoice
        options.method = HTTPMethod(record.method) ?? .post
        options.allowsPlainRetry = record.allowsPlainRetry
        options.waitsForConnectivity = true
        job.live.withLock { live in
            live.state = .running
            live.stop = nil
            live.error = nil
            live.position = record.resume?.acknowledgedOffset ?? 0
        }
        emitUpload("started", job, [.init(key: "offset", value: .integer(Int(record.resume?.acknowledgedOffset ?? 0)))])
        let handlers = uploadHandlers(job)
        let agent = agent
        let task = Task { [weak self] in
            let outcome: Result<UploadResult, UploadFailure>
            do throws(UploadFailure) {
                outcome = .success(try await agent.upload(file: descriptor, path: record.filePath, to: record.url, options: options,
                                                          resuming: record.resume, handlers: handlers))
            } catch {
                outcome = .failure(error)
            }
            await self?.uploadEnded(job, outcome)
        }
        job.live.withLock { $0.task = task }
    }

    /// The job's open file: the caller's descriptor, or after a restart the path reopened, which
    /// must be the very file queued (device, inode, size, modification time); or why not.
    private func openFile(of job: UploadJob) -> Result<FileDescriptor, UploadJobProblem> {
        let (record, kept) = job.live.withLock { ($0.record, $0.descriptor) }
        if let kept {
            if let now = try? kept.status(), let change = record.file.change(to: now) {
                return .failure(UploadJobProblem("\(record.filePath) changed while the upload waited (\(change)); add it again"))
            }
            return .success(kept)
        }
        let reopened: FileDescriptor
        do {
            reopened = try FileDescriptor.openForReading(record.filePath, nonBlocking: true)
        } catch {
            return .failure(UploadJobProblem("cannot open \(record.filePath) again after the agent restarted: \(error); add it again with 'reachability queue add --upload'"))
        }
        guard let now = try? reopened.status(), now.kind == .regular, record.file.change(to: now) == nil else {
            let change = (try? reopened.status()).flatMap { record.file.change(to: $0) } ?? "it is not a regular file"
            reopened.close()
            return .failure(UploadJobProblem("\(record.filePath) is not the file that was queued any more (\(change)); add it again"))
        }
        job.live.withLock { $0.descriptor = reopened }
        return .success(reopened)
    }

    /// The upload's handlers: progress and events become event lines, and the server's hold on
    /// the upload (`created`, `resumed`) is written to the record before the next byte goes.
    private func uploadHandlers(_ job: UploadJob) -> UploadHandlers {
        let store = uploadStore()
        let emit = environment.emit
        let now = environment.now
        let interval = environment.progressInterval
        let table = uploadJobs
        return UploadHandlers(progress: { sent, length in
            let (delta, due) = job.live.withLock { live -> (Int64, Bool) in
                let delta = max(0, sent - live.position)
                live.position = sent
                // Bytes flowing again after a wait for a path (a fresh attempt with no `resumed`).
                if delta > 0, live.state == .waitingForConnectivity { live.state = .running }
                let due = live.state == .running && (live.lastProgressLine.map { ContinuousClock.now - $0 >= interval } ?? true)
                if due { live.lastProgressLine = .now }
                return (delta, due)
            }
            if delta > 0 { table.counters.withLock { $0.sentBytes += delta } }
            if due { emit(Self.uploadLine("progress", job, at: now())) }
        }, event: { event in
            let (name, fields) = Self.noteUploadEvent(event, job, store: store)
            emit(Self.uploadLine(name, job, at: now(), fields))
        })
    }

    /// What an upload event means for the job: its live state and record updated (the server's
    /// hold written before the next byte goes), and its event line's name and fields.
    private static func noteUploadEvent(_ event: UploadEvent, _ job: UploadJob,
                                        store: UploadJobStore?) -> (name: String, fields: [JSONValue.Member]) {
        var fields: [JSONValue.Member] = []
        let name: String
        switch event {
        case .protocolChosen(let chosen):
            job.live.withLock { $0.protocolInUse = chosen }
            _ = job.updateRecord(in: store) { $0.protocolInUse = chosen }
            name = "protocol"
            fields = [.init(key: "protocol", value: .string(chosen.rawValue))]
        case .created(let uploadURL):
            // Written before anything more is sent: a restart asks this resource its offset.
            let chosen = job.live.withLock { $0.protocolInUse }
            if let chosen, chosen == .ietf || chosen == .tus {
                _ = job.updateRecord(in: store) { record in
                    record.resume = UploadResumeState(url: record.url, uploadURL: uploadURL, protocolInUse: chosen,
                                                      acknowledgedOffset: 0, length: record.file.size, file: record.file,
                                                      filePath: record.filePath)
                }
            }
            name = "created"
            fields = [.init(key: "uploadURL", value: .string(URLRedaction.redacted(uploadURL)))]
        case .interrupted(let error):
            name = "interrupted"
            fields = [.init(key: "code", value: .integer(error.errorCode)), .init(key: "message", value: .string(error.description))]
        case .resumed(let offset):
            job.live.withLock { live in
                live.position = offset
                live.state = .running
            }
            _ = job.updateRecord(in: store) { record in
                guard var resume = record.resume else { return }
                resume.acknowledgedOffset = max(resume.acknowledgedOffset, offset)
                record.resume = resume
            }
            name = "resumed"
            fields = [.init(key: "offset", value: .integer(Int(offset)))]
        case .waitingForConnectivity:
            job.live.withLock { $0.state = .waitingForConnectivity }
            name = "waiting"
        }
        return (name, fields)
    }

    /// Stops the job's task for `reason` and waits (bounded) until it has ended; false when it
    /// had none running.
    private func stopUploadTask(_ job: UploadJob, _ reason: UploadJob.Stop) async -> Bool {
        await stopUploadTasks([job], reason).contains { $0 === job }
    }

    /// Stops the tasks of `jobs` at once, then waits (2 s for all together, so a shutdown with
    /// many jobs stays within its bound) until they have ended; the jobs that had one running.
    private func stopUploadTasks(_ jobs: [UploadJob], _ reason: UploadJob.Stop) async -> [UploadJob] {
        let stopped = jobs.filter { job in
            let task = job.live.withLock { live -> Task<Void, Never>? in
                guard let task = live.task else { return nil }
                live.stop = reason
                return task
            }
            task?.cancel()
            return task != nil
        }
        let deadline = ContinuousClock.now + .seconds(2)
        while stopped.contains(where: { job in job.live.withLock { $0.task != nil } }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        return stopped
    }

    /// What the upload's task ended with.
    private func uploadEnded(_ job: UploadJob, _ outcome: Result<UploadResult, UploadFailure>) {
        let stop = job.live.withLock { live -> UploadJob.Stop? in
            live.task = nil
            return live.stop
        }
        switch outcome {
        case .success(let result):
            job.live.withLock { live in
                live.state = .completed
                live.position = result.length
                live.protocolInUse = result.protocolUsed
            }
            uploadStore()?.remove(job.id)
            job.closeFile()
            uploadJobs.counters.withLock { $0.completed += 1 }
            emitUpload("completed", job, [.init(key: "status", value: .integer(result.response.statusCode)),
                                          .init(key: "protocol", value: .string(result.protocolUsed.rawValue)),
                                          .init(key: "allBytesSent", value: .integer(Int(result.bytesSent))),
                                          .init(key: "bytesResent", value: .integer(Int(result.bytesResent)))])
        case .failure(let failure):
            let kept = failure.resumeState
            switch stop {
            case .pause:
                _ = job.updateRecord(in: uploadStore()) { record in
                    record.isPaused = true
                    if let kept { record.resume = kept }
                }
                job.live.withLock { $0.state = .paused }
                emitUpload("paused", job)
            case .shutdown:
                // Kept for the next start, which asks the server its offset.
                _ = job.updateRecord(in: uploadStore()) { record in if let kept { record.resume = kept } }
            case .cancel:
                finishUploadJob(job, failed: "cancelled", code: DownloadError.cancelled.errorCode)
            case nil:
                if let kept {
                    // The server holds what it received: `queue resume` continues from there.
                    _ = job.updateRecord(in: uploadStore()) { record in
                        record.resume = kept
                        record.failure = failure.error.description
                    }
                    job.live.withLock { live in
                        live.state = .failed
                        live.error = failure.error.description
                    }
                    uploadJobs.counters.withLock { $0.failed += 1 }
                    emitUpload("failed", job, [.init(key: "code", value: .integer(failure.error.errorCode)),
                                               .init(key: "message", value: .string(failure.error.description)),
                                               .init(key: "resumable", value: .bool(true))])
                } else {
                    finishUploadJob(job, failed: failure.error.description, code: failure.error.errorCode)
                }
            }
        }
    }

    /// Ends a job for good: its record removed, its file closed, a `failed` line.
    private func finishUploadJob(_ job: UploadJob, failed message: String, code: Int) {
        job.live.withLock { live in
            live.state = .failed
            live.error = message
        }
        uploadStore()?.remove(job.id)
        job.closeFile()
        uploadJobs.counters.withLock { $0.failed += 1 }
        emitUpload("failed", job, [.init(key: "code", value: .integer(code)), .init(key: "message", value: .string(message)),
                                   .init(key: "resumable", value: .bool(false))])
    }

    // MARK: start and stop of the agent

    /// Continues every upload job found in `STATE_DIR/uploads/` (paused ones stay paused, failed
    /// ones are listed); returns how many.
    @discardableResult
    func restoreUploadJobs() -> Int {
        guard let store = uploadStore() else { return 0 }
        let records = store.load { warning in emitAgent("warning", [.init(key: "message", value: .string(warning))]) }
        for record in records {
            let job = UploadJob(record: record, descriptor: nil)
            uploadJobs.jobs.withLock { $0[job.id] = job }
            emitUpload("restored", job, [.init(key: "offset", value: .integer(Int(record.resume?.acknowledgedOffset ?? 0)))])
            if let failure = record.failure {
                job.live.withLock { live in
                    live.state = .failed
                    live.error = failure
                }
            } else if record.isPaused {
                job.live.withLock { $0.state = .paused }
            } else {
                startUploadJob(job)
            }
        }
        return records.count
    }

    /// Stops every running upload job for a shutdown (or a reload, which replaces the download
    /// agent they run on), keeping its server offset in its record; returns the jobs stopped.
    @discardableResult
    func stopUploadJobs() async -> [UploadJob] {
        await stopUploadTasks(uploadJobs.all, .shutdown)
    }

    /// Starts again the jobs `stopUploadJobs` stopped, on the new download agent of a reload.
    func restartUploadJobs(_ jobs: [UploadJob]) {
        for job in jobs where !job.state.isFinal && job.state != .paused { startUploadJob(job) }
    }

    // MARK: reports

    /// Upload job families for `metrics`.
    func uploadMetricFamilies() -> [MetricFamily] {
        var counts: [String: Int] = [:]
        for job in uploadJobs.all { counts[job.state.rawValue, default: 0] += 1 }
        let counters = uploadJobs.counters.withLock { $0 }
        return [
            MetricFamily("reachability_uploads", .gauge, help: "Upload jobs the agent knows, by state (every state listed, 0 included).",
                         samples: DownloadMetrics.stateNames.map { MetricSample(Double(counts[$0] ?? 0), labels: [("state", $0)]) }),
            MetricFamily("reachability_upload_sent_bytes", .counter, unit: "bytes",
                         help: "File bytes upload jobs handed to connections since start (bytes sent again after an outage included).",
                         created: startedAt, value: Double(counters.sentBytes)),
            MetricFamily("reachability_uploads_finished", .counter, help: "Upload jobs that ended since start, by result.",
                         created: startedAt, samples: [MetricSample(Double(counters.completed), labels: [("result", "completed")]),
                                                       MetricSample(Double(counters.failed), labels: [("result", "failed")])]),
        ]
    }

    private func emitUpload(_ event: String, _ job: UploadJob, _ fields: [JSONValue.Member] = []) {
        environment.emit(Self.uploadLine(event, job, at: environment.now(), fields))
    }

    /// An upload line: `id`, `url`, `file`, `bytesSent` and `total`, then the event's fields.
    static func uploadLine(_ event: String, _ job: UploadJob, at time: Date, _ fields: [JSONValue.Member] = []) -> String {
        let (record, position) = job.live.withLock { ($0.record, $0.position) }
        return EventSchema.line(.upload, event, at: time, [
            .init(key: "id", value: .string(job.id.uuidString.lowercased())),
            .init(key: "url", value: .string(URLRedaction.redacted(record.url))),
            .init(key: "file", value: .string(record.filePath)),
            .init(key: "bytesSent", value: .integer(Int(position))),
            .init(key: "total", value: .integer(Int(record.file.size))),
        ] + fields)
    }
}

/// Why an upload job cannot go on with its file.
struct UploadJobProblem: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

extension AgentService {
    /// The open file a request passed for an upload (SCM_RIGHTS), checked by the agent itself (a
    /// regular file, open for reading): one check for `addUpload` and background upload tasks.
    /// On failure the descriptor is closed.
    func takeUploadFile(from peer: ControlPeer?, named file: String, missing: String) -> Result<(FileDescriptor, FileStatus), ControlError> {
        guard let descriptor = peer?.takeDescriptor() else { return .failure(.invalidArgument(missing)) }
        let status: FileStatus
        do {
            status = try descriptor.status()
        } catch {
            descriptor.close()
            return .failure(.failed("cannot examine the file passed for \(file): \(error)"))
        }
        guard status.kind == .regular else {
            descriptor.close()
            return .failure(.invalidArgument("\(file) is \(status.kindDescription); only regular files can be uploaded (they can be resumed)"))
        }
        guard descriptor.isOpenForReading else {
            descriptor.close()
            return .failure(.invalidArgument("the file passed for \(file) is not open for reading"))
        }
        return .success((descriptor, status))
    }
}
