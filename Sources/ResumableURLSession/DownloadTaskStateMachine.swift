import Foundation
import ResumableDownloads

/// What one download task does next, given what happened: the caller's commands, the resume
/// engine's events and progress, and the outcomes of the asynchronous steps it asked for.
/// Pure: no I/O, no clocks, no Foundation errors; the task applies the returned actions.
///
/// URLSession's contract, on an engine that would rather keep going:
/// - Without `waitsForConnectivity`, the first failure ends the task: the engine's
///   `waitingForConnectivity` (no path, or the path died under the transfer) and `retrying`
///   (a reset, a refused connection, a 5xx) stop the transfer, and the task completes with the
///   `URLError` and, when stored bytes can be continued, resume data.
/// - With it, the engine's recovery runs (wait for a path, reconnect, back off) and the task
///   fails only when that gives up.
/// - Progress is monotonic: `notifyWrote` never goes back, except after a `notifyResumed` (the
///   bytes start over from that offset, as `didResumeAtOffset` means on Apple platforms).
struct DownloadTaskStateMachine: Sendable {
    struct Options: Sendable, Hashable {
        var waitsForConnectivity: Bool
        /// The resume data the task was created from, if any (handed back by a cancel before start).
        var originalResumeData: Data?
        /// Whether it continues stored bytes (then the delegate hears `didResumeAtOffset`).
        var isResumingStoredBytes: Bool { originalResumeData != nil }
    }

    /// Why a task ends without its file, as the delegate will hear it.
    struct Failure: Error, Sendable, Hashable {
        var code: URLError.Code
        var description: String
        var underlying: Underlying?
        var networkUnavailableReason: URLError.NetworkUnavailableReason?
        /// What continues an upload task that ended this way (`uploadTask(withResumeData:)`).
        var uploadResumeData: Data? = nil

        enum Underlying: Sendable, Hashable {
            case download(DownloadError)
            case resumeData(ResumeDataError)
            case storage(SessionStorageError)
        }

        static let cancelled = Failure(code: .cancelled, description: "cancelled")

        /// The `URLError` a task completes with: this failure's code and description, the URL,
        /// the reason the path was unusable, the underlying error, and the resume data that
        /// continues it (`downloadResumeData`, or the upload's own) under Apple's keys.
        func urlError(url: URL?, downloadResumeData: Data? = nil) -> URLError {
            var info: [String: Any] = [NSLocalizedDescriptionKey: description]
            if let url { info[NSURLErrorFailingURLErrorKey] = url }
            if let downloadResumeData { info[NSURLSessionDownloadTaskResumeData] = downloadResumeData }
            if let uploadResumeData { info[NSURLSessionUploadTaskResumeData] = uploadResumeData }
            if let networkUnavailableReason { info[NSURLErrorNetworkUnavailableReasonKey] = networkUnavailableReason.rawValue }
            switch underlying {
            case .download(let error): info[NSUnderlyingErrorKey] = error
            case .resumeData(let error): info[NSUnderlyingErrorKey] = error
            case .storage(let error): info[NSUnderlyingErrorKey] = error
            case nil: break
            }
            return URLError(code, userInfo: info)
        }

    }

    /// How `didCompleteWithError` is called: success, or a failure with optional resume data.
    struct Completion: Sendable, Hashable {
        var failure: Failure
        var resumeData: Data?
    }

    enum Input: Sendable, Hashable {
        case resume, suspend, cancel, cancelByProducingResumeData
        /// The engine created no download (bad resume data, locked, storage trouble).
        case startFailed(Failure)
        case event(DownloadEvent)
        /// The engine is waiting for a usable path; `reason` when the configuration's access
        /// rules (expensive, cellular) are why.
        case waitingForConnectivity(reason: URLError.NetworkUnavailableReason?)
        case progress(bytesReceived: Int64, totalBytes: Int64?)
        /// The grace after a first `waitingForConnectivity` ran out.
        case connectivityGraceExpired
        /// A `stopTransfer` finished.
        case stopped(StopOutcome)
        /// The delegate returned from `didFinishDownloadingTo`.
        case fileDelivered
    }

    enum StopOutcome: Sendable, Hashable {
        /// Paused; resume data when the stored bytes can be continued.
        case paused(resumeData: Data?)
        /// It completed before the pause took effect.
        case finished(URL)
        /// It failed for good before the pause took effect.
        case failed(DownloadError)
    }

    enum Action: Sendable, Hashable {
        /// Create the engine download (fresh, or from the resume data) and run it.
        case start
        case pauseTransfer
        case resumeTransfer
        case cancelTransfer
        /// Pause, make resume data from the durable state, report `.stopped`.
        case stopTransfer
        case notifyWaitingForConnectivity
        /// Report `.connectivityGraceExpired` after `DownloadTaskStateMachine.connectivityGrace`.
        case startConnectivityGrace
        case notifyResumed(offset: Int64, expectedTotal: Int64)
        case notifyWrote(bytes: Int64, total: Int64, expected: Int64)
        /// Call `didFinishDownloadingTo`, then remove the file if still there, then `.fileDelivered`.
        case deliverFile(URL)
        /// Answer every pending `cancel(byProducingResumeData:)`.
        case answerResumeData(Data?)
        /// `didCompleteWithError`: nil is success.
        case complete(Completion?)
        /// Drop the engine's download and the lock; delete the files unless resume data went out.
        case release(keepFiles: Bool)
    }

    /// Task states as URLSession names them.
    enum PublicState: Sendable, Hashable { case running, suspended, canceling, completed }

    private enum Phase: Sendable, Hashable {
        case idle, running, suspended, canceling, deliveringFile, completed
        case stopping(StopReason)
    }

    private enum StopReason: Sendable, Hashable {
        case failure(Failure)
        case cancelledByProducingResumeData
    }

    /// How long a task with no path at its start waits before failing with -1009.
    static let connectivityGrace = Duration.milliseconds(500)

    let options: Options
    private var phase = Phase.idle
    private var isGraceRunning = false
    private var unavailableReason: URLError.NetworkUnavailableReason?
    private var pendingResumeDataRequests = 0
    private var hasAttemptStarted = false
    private var hasAnnouncedWaiting = false
    /// Where the current run of bytes started (set by the first attempt, a restart, or a loss).
    private var anchor: Int64?
    private var needsResumeNotice = false
    /// `totalBytesWritten` as last reported.
    private(set) var bytesWritten: Int64 = 0
    private(set) var expectedBytes: Int64?
    /// How the task failed, once it has (nil while it runs and after success).
    private(set) var failure: Completion?

    init(options: Options, storedBytes: Int64 = 0, expectedBytes: Int64? = nil) {
        self.options = options
        bytesWritten = storedBytes
        self.expectedBytes = expectedBytes
    }

    var publicState: PublicState {
        switch phase {
        case .idle, .suspended: .suspended
        case .running, .deliveringFile, .stopping(.failure): .running
        case .canceling, .stopping(.cancelledByProducingResumeData): .canceling
        case .completed: .completed
        }
    }

    mutating func handle(_ input: Input) -> [Action] {
        switch input {
        case .resume: resumed()
        case .suspend: suspended()
        case .cancel: cancelled()
        case .cancelByProducingResumeData: resumeDataRequested()
        case .startFailed(let failure): startFailed(failure)
        case .waitingForConnectivity(let reason): waitingForConnectivity(reason)
        case .connectivityGraceExpired: connectivityGraceExpired()
        case .event(let event): handle(event)
        case .progress(let bytes, let total): progressed(to: bytes, of: total)
        case .stopped(let outcome): stopped(outcome)
        case .fileDelivered: fileDelivered()
        }
    }

    private mutating func resumed() -> [Action] {
        switch phase {
        case .idle: phase = .running; return [.start]
        case .suspended: phase = .running; return [.resumeTransfer]
        default: return []
        }
    }

    private mutating func suspended() -> [Action] {
        guard phase == .running else { return [] }
        phase = .suspended
        return [.pauseTransfer]
    }

    private mutating func cancelled() -> [Action] {
        switch phase {
        case .idle:
            return finish(.init(failure: .cancelled, resumeData: nil), keepFiles: false)
        case .running, .suspended:
            phase = .canceling
            return [.cancelTransfer]
        default:
            return []
        }
    }

    private mutating func resumeDataRequested() -> [Action] {
        pendingResumeDataRequests += 1
        switch phase {
        case .idle:
            // Never started: the data it was made from is still good.
            let data = options.originalResumeData
            return finish(.init(failure: .cancelled, resumeData: data), keepFiles: data != nil)
        case .running, .suspended:
            phase = .stopping(.cancelledByProducingResumeData)
            return [.stopTransfer]
        case .stopping:
            return []   // answered when the stop completes
        case .canceling, .deliveringFile, .completed:
            return answer(nil)
        }
    }

    /// Nothing was started, so nothing of this task's is on disk: files under the id (if any)
    /// belong to the resume data, which stays usable or is someone else's.
    private mutating func startFailed(_ failure: Failure) -> [Action] {
        switch phase {
        case .running, .suspended, .stopping(.failure):
            return finish(.init(failure: failure, resumeData: nil), keepFiles: true)
        case .canceling, .stopping(.cancelledByProducingResumeData):
            return finish(.init(failure: .cancelled, resumeData: nil), keepFiles: true)
        case .idle, .deliveringFile, .completed:
            return []
        }
    }

    private mutating func waitingForConnectivity(_ reason: URLError.NetworkUnavailableReason?) -> [Action] {
        guard phase == .running else { return [] }
        if options.waitsForConnectivity {
            guard !hasAnnouncedWaiting else { return [] }
            hasAnnouncedWaiting = true
            return [.notifyWaitingForConnectivity]
        }
        if hasAttemptStarted {
            // The path went away under a transfer: Apple's -1005.
            return stop(.failure(Failure(code: .networkConnectionLost, description: "the network connection was lost")))
        }
        // No path before the first attempt: -1009, after a short grace. An app that resumes
        // the moment its Reachability says "reachable" can be a few milliseconds ahead of
        // the engine's own view of the same change.
        unavailableReason = reason
        guard !isGraceRunning else { return [] }
        isGraceRunning = true
        return [.startConnectivityGrace]
    }

    private mutating func connectivityGraceExpired() -> [Action] {
        isGraceRunning = false
        guard phase == .running, !hasAttemptStarted, !options.waitsForConnectivity else { return [] }
        let reason = unavailableReason
        return stop(.failure(Failure(code: .notConnectedToInternet,
                                     description: reason == nil ? "not connected to the network"
                                         : "no network path this configuration may use (\(reason == .cellular ? "cellular" : "expensive") access is not allowed)",
                                     networkUnavailableReason: reason)))
    }

    private mutating func progressed(to bytes: Int64, of total: Int64?) -> [Action] {
        if let total { expectedBytes = total }
        switch phase {
        case .running, .suspended, .stopping: break
        default: return []
        }
        guard anchor != nil, bytes > bytesWritten else { return [] }
        return write(upTo: bytes)
    }

    private mutating func stopped(_ outcome: StopOutcome) -> [Action] {
        guard case .stopping(let reason) = phase else { return [] }
        switch outcome {
        case .paused(let data):
            switch reason {
            case .failure(let failure):
                return finish(.init(failure: failure, resumeData: data), keepFiles: data != nil)
            case .cancelledByProducingResumeData:
                return finish(.init(failure: .cancelled, resumeData: data), keepFiles: data != nil)
            }
        case .finished(let url):
            return answer(nil) + deliver(url)
        case .failed(let error):
            let failure = reason == .cancelledByProducingResumeData ? Failure.cancelled : Failure(error)
            return finish(.init(failure: failure, resumeData: nil), keepFiles: false)
        }
    }

    private mutating func fileDelivered() -> [Action] {
        guard phase == .deliveringFile else { return [] }
        phase = .completed
        return [.complete(nil), .release(keepFiles: false)]
    }

    private mutating func handle(_ event: DownloadEvent) -> [Action] {
        switch phase {
        case .running, .suspended, .canceling, .stopping: break
        case .idle, .deliveringFile, .completed: return []
        }
        switch event {
        case .started:
            begin(at: 0)
            return []
        case .resumed(let offset):
            begin(at: offset)
            return []
        case .restartedFromZero:
            // The stored bytes were dropped (the resource changed): the count starts over, and
            // the delegate is told through didResumeAtOffset(0) before the next write.
            if bytesWritten > 0 || options.isResumingStoredBytes { needsResumeNotice = true }
            anchor = 0
            bytesWritten = 0
            return []
        case .waitingForConnectivity, .waiting:
            return []   // the task turns this into `.waitingForConnectivity(reason:)`
        case .retrying(_, let error), .waitingForServer(let error):
            // A server that does not answer is a failure to URLSession (-1004, -1001, ...);
            // with waitsForConnectivity the agent waits for it like for a path.
            guard phase == .running, !options.waitsForConnectivity else { return [] }
            return stop(.failure(Failure(error)))
        case .paused, .sourceDropped:
            return []
        case .completed(let url):
            switch phase {
            case .running, .suspended, .canceling: return deliver(url)
            default: return []   // a stop in flight reports it
            }
        case .failed(let error):
            switch phase {
            case .canceling:
                return finish(.init(failure: .cancelled, resumeData: nil), keepFiles: false)
            case .running, .suspended:
                if error.isResumable { return stop(.failure(Failure(error))) }
                return finish(.init(failure: Failure(error), resumeData: nil), keepFiles: false)
            default:
                return []
            }
        }
    }

    private mutating func begin(at offset: Int64) {
        hasAttemptStarted = true
        if anchor == nil {
            anchor = offset
            bytesWritten = offset
            needsResumeNotice = options.isResumingStoredBytes
        } else if offset < bytesWritten {
            // Fewer bytes survived than were reported: say where counting restarts.
            anchor = offset
            bytesWritten = offset
            needsResumeNotice = true
        }
    }

    private mutating func write(upTo bytes: Int64) -> [Action] {
        var actions: [Action] = []
        if needsResumeNotice {
            needsResumeNotice = false
            actions.append(.notifyResumed(offset: anchor ?? 0, expectedTotal: expectedBytes ?? -1))
        }
        if bytes > bytesWritten {
            actions.append(.notifyWrote(bytes: bytes - bytesWritten, total: bytes, expected: expectedBytes ?? -1))
            bytesWritten = bytes
        }
        return actions
    }

    private mutating func stop(_ reason: StopReason) -> [Action] {
        phase = .stopping(reason)
        return [.stopTransfer]
    }

    /// Progress caught up to the full length, then the file.
    private mutating func deliver(_ url: URL) -> [Action] {
        phase = .deliveringFile
        var actions: [Action] = []
        if anchor == nil { anchor = bytesWritten }
        actions += write(upTo: max(bytesWritten, expectedBytes ?? bytesWritten))
        return actions + [.deliverFile(url)]
    }

    private mutating func answer(_ data: Data?) -> [Action] {
        guard pendingResumeDataRequests > 0 else { return [] }
        pendingResumeDataRequests = 0
        return [.answerResumeData(data)]
    }

    private mutating func finish(_ completion: Completion, keepFiles: Bool) -> [Action] {
        phase = .completed
        failure = completion
        return answer(completion.resumeData) + [.complete(completion), .release(keepFiles: keepFiles)]
    }
}

extension DownloadTaskStateMachine.Failure {
    /// The engine's error with its URLError code; an outage longer than the resource timeout
    /// is `.timedOut`, as on Apple platforms. (In an extension, so that the struct keeps the
    /// memberwise initializer Swift writes.)
    init(_ error: DownloadError) {
        self.init(code: error == .connectivityTimeout ? .timedOut : error.urlErrorCode, description: error.description,
                  underlying: .download(error))
    }
}
