import Foundation
import ReachabilityAgent
import Synchronization

/// A background session's task as this process sees it: the agent owns the transfer; this
/// mirrors its state from the agent's events, sends what the process asks of it (in order, over
/// the session's one connection), and turns the agent's events into delegate calls.
final class BackgroundTask: Sendable {
    private struct State {
        weak var owner: ResumableDownloadTask?
        var phase = ResumableDownloadTask.State.suspended
        var bytesReceived: Int64 = 0
        var expectedBytes: Int64 = -1
        /// The `totalBytesWritten` last told with didWriteData.
        var reported: Int64?
        var announcedWaiting = false
        /// A task from resume data announces its offset before its first bytes.
        var needsResumeNotice = false
        var error: URLError?
        var resumeDataCallbacks: [@Sendable (Data?) -> Void] = []
    }

    let link: BackgroundSessionLink
    let identifier: Int
    private let state: Mutex<State>

    init(link: BackgroundSessionLink, identifier: Int, isFromResumeData: Bool) {
        self.link = link
        self.identifier = identifier
        state = Mutex(State(needsResumeNotice: isFromResumeData))
    }

    func adopt(_ owner: ResumableDownloadTask) {
        state.withLock { $0.owner = owner }
    }

    private var owner: ResumableDownloadTask? { state.withLock { $0.owner } }

    var publicState: ResumableDownloadTask.State { state.withLock { $0.phase } }
    var bytesReceived: Int64 { state.withLock { $0.bytesReceived } }
    var expectedBytes: Int64 { state.withLock { $0.expectedBytes } }
    var error: URLError? { state.withLock { $0.error } }
    var isLive: Bool { state.withLock { $0.phase != .completed } }

    /// The agent's snapshot (at attach, or in an event).
    func update(from snapshot: BackgroundTaskSnapshot) {
        state.withLock { state in
            if state.phase != .completed, state.phase != .canceling {
                state.phase = snapshot.state == .running ? .running : snapshot.state == .completed ? .completed : .suspended
            }
            state.bytesReceived = max(state.bytesReceived, snapshot.bytesReceived)
            if let total = snapshot.totalBytes { state.expectedBytes = total }
        }
    }

    // MARK: what the process asks

    func resume() {
        let send = state.withLock { state -> Bool in
            guard state.phase == .suspended else { return false }
            state.phase = .running
            return true
        }
        if send { link.perform(.resume, on: identifier) }
    }

    func suspend() {
        let send = state.withLock { state -> Bool in
            guard state.phase == .running else { return false }
            state.phase = .suspended
            return true
        }
        if send { link.perform(.suspend, on: identifier) }
    }

    /// Cancels; with a callback, producing resume data, which the callback gets (on the delegate
    /// queue, before didCompleteWithError) when the agent's event arrives.
    func cancel(producingResumeData callback: (@Sendable (Data?) -> Void)?) {
        let send = state.withLock { state -> Bool in
            if let callback { state.resumeDataCallbacks.append(callback) }
            guard state.phase == .running || state.phase == .suspended else { return false }
            state.phase = .canceling
            return true
        }
        if send {
            link.perform(callback == nil ? .cancel : .cancelProducingResumeData, on: identifier)
        } else if let callback, publicState == .completed {
            link.session?.enqueue { callback(nil) }
        }
    }

    func hintsChanged(_ hints: ResumableDownloadTask.Hints) {
        guard isLive else { return }
        link.update(identifier, hints)
    }

    // MARK: what the agent says (on the connection's reader thread)

    func progressed(to bytes: Int64, of total: Int64?) {
        guard let owner else { return }
        let notices = state.withLock { state -> (resume: Int64?, write: (Int64, Int64)?, expected: Int64) in
            guard state.phase == .running || state.phase == .suspended else { return (nil, nil, -1) }
            if let total { state.expectedBytes = total }
            state.bytesReceived = bytes
            var resume: Int64?
            if state.needsResumeNotice || (state.reported.map { bytes < $0 } ?? false) {
                // From resume data, or fewer bytes survived than were told: where counting restarts.
                state.needsResumeNotice = false
                resume = bytes
                state.reported = bytes
                return (resume, nil, state.expectedBytes)
            }
            let previous = state.reported ?? 0
            guard bytes > previous else { return (nil, nil, state.expectedBytes) }
            state.reported = bytes
            return (resume, (bytes - previous, bytes), state.expectedBytes)
        }
        if let offset = notices.resume { owner.notifyResumed(at: offset, expected: notices.expected) }
        if let (delta, total) = notices.write { owner.notifyWrote(delta, total: total, expected: notices.expected) }
    }

    /// An attempt began at `offset`: 0 after the resource changed, or the offset a task from
    /// resume data continues at.
    func resumed(at offset: Int64, of total: Int64?) {
        guard let owner else { return }
        let notify = state.withLock { state -> Bool in
            if let total { state.expectedBytes = total }
            guard state.needsResumeNotice || (state.reported.map { offset < $0 } ?? false) else { return false }
            state.needsResumeNotice = false
            state.reported = offset
            state.bytesReceived = offset
            return true
        }
        if notify { owner.notifyResumed(at: offset, expected: expectedBytes) }
    }

    func waitingForConnectivity() {
        let first = state.withLock { state -> Bool in
            defer { state.announcedWaiting = true }
            return !state.announcedWaiting
        }
        if first { owner?.notifyWaitingForConnectivity() }
    }

    /// The file is at `location` until the event is acknowledged: handed to the delegate (or the
    /// completion handler), then didCompleteWithError(nil), then the acknowledgement.
    func finished(at location: URL, sequence: UInt64, total: Int64?) {
        guard let owner else { return }
        let callbacks = state.withLock { state -> [@Sendable (Data?) -> Void] in
            state.phase = .completed
            if let total { state.expectedBytes = total; state.bytesReceived = total }
            defer { state.resumeDataCallbacks = [] }
            return state.resumeDataCallbacks
        }
        let (bytes, expected) = (bytesReceived, expectedBytes)
        let link = link
        link.session?.enqueue {
            for callback in callbacks { callback(nil) }
            if owner.completionHandler == nil, let reported = self.state.withLock({ $0.reported }), bytes > reported {
                owner.notifyWrote(bytes - reported, total: bytes, expected: expected)
            }
            owner.deliverFile(at: location, expectedLength: total)
            owner.complete(with: nil)
            link.acknowledge(sequence, completing: owner)
        }
    }

    /// The task ended without its file.
    func failed(_ error: URLError, resumeData: Data?, sequence: UInt64) {
        guard let owner else { return }
        let callbacks = state.withLock { state -> [@Sendable (Data?) -> Void] in
            state.phase = .completed
            state.error = error
            defer { state.resumeDataCallbacks = [] }
            return state.resumeDataCallbacks
        }
        let link = link
        link.session?.enqueue {
            for callback in callbacks { callback(resumeData) }
            owner.complete(with: error)
            link.acknowledge(sequence, completing: owner)
        }
    }

    /// The session can no longer reach the agent for good (another process holds it, or no
    /// agent could be started): the task ends with that error, without its file.
    func abandoned(_ error: URLError) {
        guard let owner else { return }
        let callbacks = state.withLock { state -> [@Sendable (Data?) -> Void]? in
            guard state.phase != .completed else { return nil }
            state.phase = .completed
            state.error = error
            defer { state.resumeDataCallbacks = [] }
            return state.resumeDataCallbacks
        }
        guard let callbacks else { return }
        link.session?.enqueue { [link] in
            for callback in callbacks { callback(nil) }
            owner.complete(with: error)
            link.session?.unregister(owner)
        }
    }
}
