import ReachabilityAgent

/// A background session's task as this process mirrors it, as a plain value: what the process
/// asks of it and what the agent reports go in, what to send to the agent and what to tell the
/// delegate come out. `BackgroundTask` owns one under its lock and applies the actions after
/// releasing it, like `DownloadTaskStateMachine` for a task this process runs itself.
struct BackgroundTaskStateMachine: Sendable {
    enum Input: Sendable, Equatable {
        // The process
        case resume, suspend
        /// `cancel()`, or with `producingResumeData` `cancel(byProducingResumeData:)`.
        case cancel(producingResumeData: Bool)
        // The agent
        /// Its snapshot of the task (at attach, or with an event).
        case snapshot(BackgroundTaskSnapshot.State, bytes: Int64, total: Int64?)
        case progressed(bytes: Int64, total: Int64?)
        /// An attempt began at `offset`: 0 after the resource changed, or where a task from resume
        /// data continues.
        case resumed(offset: Int64, total: Int64?)
        case waitingForConnectivity
        /// The file is ready (its event carries the length).
        case finished(total: Int64?)
        /// The task ended without its file: the agent said so, or the session lost the agent for good.
        case failed
    }

    enum Action: Sendable, Equatable {
        /// Ask the agent (in order, over the session's connection).
        case send(BackgroundTaskAction)
        /// A resume data request on a task that is already over: its handlers get nil.
        case answerResumeDataWithNothing
        case notifyResumed(offset: Int64, expected: Int64)
        case notifyWrote(bytes: Int64, total: Int64, expected: Int64)
        case notifyWaitingForConnectivity
    }

    private(set) var publicState = ResumableDownloadTask.State.suspended
    private(set) var bytesReceived: Int64 = 0
    private(set) var expectedBytes: Int64 = -1
    /// The `totalBytesWritten` last told with didWriteData.
    private var reported: Int64?
    private var announcedWaiting = false
    /// A task from resume data announces its offset before its first bytes.
    private var needsResumeNotice: Bool

    init(isFromResumeData: Bool) {
        needsResumeNotice = isFromResumeData
    }

    /// Whether the task has not ended (its hints still reach the agent).
    var isLive: Bool { publicState != .completed }

    mutating func handle(_ input: Input) -> [Action] {
        switch input {
        case .resume:
            guard publicState == .suspended else { return [] }
            publicState = .running
            return [.send(.resume)]
        case .suspend:
            guard publicState == .running else { return [] }
            publicState = .suspended
            return [.send(.suspend)]
        case .cancel(let producingResumeData):
            guard publicState == .running || publicState == .suspended else {
                return producingResumeData && publicState == .completed ? [.answerResumeDataWithNothing] : []
            }
            publicState = .canceling
            return [.send(producingResumeData ? .cancelProducingResumeData : .cancel)]
        case .snapshot(let state, let bytes, let total):
            if publicState != .completed, publicState != .canceling {
                publicState = state == .running ? .running : state == .completed ? .completed : .suspended
            }
            bytesReceived = max(bytesReceived, bytes)
            if let total { expectedBytes = total }
            return []
        case .progressed(let bytes, let total):
            return progressed(to: bytes, of: total)
        case .resumed(let offset, let total):
            if let total { expectedBytes = total }
            guard needsResumeNotice || (reported.map { offset < $0 } ?? false) else { return [] }
            needsResumeNotice = false
            reported = offset
            bytesReceived = offset
            return [.notifyResumed(offset: offset, expected: expectedBytes)]
        case .waitingForConnectivity:
            defer { announcedWaiting = true }
            return announcedWaiting ? [] : [.notifyWaitingForConnectivity]
        case .finished(let total):
            publicState = .completed
            if let total { expectedBytes = total; bytesReceived = total }
            // Progress tops up to the length before the file is handed over.
            guard let last = reported, bytesReceived > last else { return [] }
            reported = bytesReceived
            return [.notifyWrote(bytes: bytesReceived - last, total: bytesReceived, expected: expectedBytes)]
        case .failed:
            publicState = .completed
            return []
        }
    }

    private mutating func progressed(to bytes: Int64, of total: Int64?) -> [Action] {
        guard publicState == .running || publicState == .suspended else { return [] }
        if let total { expectedBytes = total }
        bytesReceived = bytes
        if needsResumeNotice || (reported.map { bytes < $0 } ?? false) {
            // From resume data, or fewer bytes survived than were told: where counting restarts.
            needsResumeNotice = false
            reported = bytes
            return [.notifyResumed(offset: bytes, expected: expectedBytes)]
        }
        let previous = reported ?? 0
        guard bytes > previous else { return [] }
        reported = bytes
        return [.notifyWrote(bytes: bytes - previous, total: bytes, expected: expectedBytes)]
    }
}
