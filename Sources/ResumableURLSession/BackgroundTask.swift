import Foundation
import ReachabilityAgent
import Synchronization

/// A background session's task as this process sees it: the agent owns the transfer; this
/// mirrors its state from the agent's events, sends what the process asks of it (in order, over
/// the session's one connection), and turns the agent's events into delegate calls. The
/// decisions are `BackgroundTaskStateMachine`'s; this applies its actions outside the lock.
final class BackgroundTask: DownloadTaskBackend {
    private struct State {
        weak var owner: ResumableDownloadTask?
        var machine: BackgroundTaskStateMachine
        var error: URLError?
        var resumeDataCallbacks: [@Sendable (Data?) -> Void] = []
    }

    let link: BackgroundSessionLink
    let identifier: Int
    private let state: Mutex<State>

    init(link: BackgroundSessionLink, identifier: Int, isFromResumeData: Bool) {
        self.link = link
        self.identifier = identifier
        state = Mutex(State(machine: BackgroundTaskStateMachine(isFromResumeData: isFromResumeData)))
    }

    func adopt(_ owner: ResumableDownloadTask) {
        state.withLock { $0.owner = owner }
    }

    private var owner: ResumableDownloadTask? { state.withLock { $0.owner } }

    var publicState: ResumableDownloadTask.State { state.withLock { $0.machine.publicState } }
    var bytesReceived: Int64 { state.withLock { $0.machine.bytesReceived } }
    var expectedBytes: Int64 { state.withLock { $0.machine.expectedBytes } }
    var error: URLError? { state.withLock { $0.error } }
    var isLive: Bool { state.withLock { $0.machine.isLive } }

    /// Feeds the machine under the lock, then applies its actions.
    private func handle(_ input: BackgroundTaskStateMachine.Input,
                        _ body: (inout State) -> Void = { _ in }) {
        let (actions, owner, unanswered) = state.withLock { state in
            body(&state)
            let actions = state.machine.handle(input)
            var unanswered: [@Sendable (Data?) -> Void] = []
            if actions.contains(.answerResumeDataWithNothing) { swap(&unanswered, &state.resumeDataCallbacks) }
            return (actions, state.owner, unanswered)
        }
        for action in actions {
            switch action {
            case .send(let request): link.perform(request, on: identifier)
            case .answerResumeDataWithNothing: link.session?.enqueue { for callback in unanswered { callback(nil) } }
            case .notifyResumed(let offset, let expected): owner?.notifyResumed(at: offset, expected: expected)
            case .notifyWrote(let bytes, let total, let expected): owner?.notifyWrote(bytes, total: total, expected: expected)
            case .notifyWaitingForConnectivity: owner?.notifyWaitingForConnectivity()
            }
        }
    }

    /// The agent's snapshot (at attach, or in an event).
    func update(from snapshot: BackgroundTaskSnapshot) {
        handle(.snapshot(snapshot.state, bytes: snapshot.bytesReceived, total: snapshot.totalBytes))
    }

    // MARK: what the process asks

    func resume() { handle(.resume) }

    func suspend() { handle(.suspend) }

    /// Cancels; with a callback, producing resume data, which the callback gets (on the delegate
    /// queue, before didCompleteWithError) when the agent's event arrives.
    func cancel(producingResumeData callback: (@Sendable (Data?) -> Void)?) {
        handle(.cancel(producingResumeData: callback != nil)) { state in
            if let callback { state.resumeDataCallbacks.append(callback) }
        }
    }

    func hintsChanged(_ hints: ResumableDownloadTask.Hints) {
        guard isLive else { return }
        link.update(identifier, hints)
    }

    // MARK: what the agent says (on the connection's reader thread)

    func progressed(to bytes: Int64, of total: Int64?) {
        handle(.progressed(bytes: bytes, total: total))
    }

    func resumed(at offset: Int64, of total: Int64?) {
        handle(.resumed(offset: offset, total: total))
    }

    func waitingForConnectivity() {
        handle(.waitingForConnectivity)
    }

    /// The file is at `location` until the event is acknowledged: handed to the delegate (or the
    /// completion handler), then didCompleteWithError(nil), then the acknowledgement.
    func finished(at location: URL, sequence: UInt64, total: Int64?) {
        guard let owner else { return }
        let (actions, callbacks) = state.withLock { state in
            defer { state.resumeDataCallbacks = [] }
            return (state.machine.handle(.finished(total: total)), state.resumeDataCallbacks)
        }
        let link = link
        link.session?.enqueue {
            for callback in callbacks { callback(nil) }
            for case .notifyWrote(let bytes, let total, let expected) in actions {
                owner.notifyWrote(bytes, total: total, expected: expected)
            }
            owner.deliverFile(at: location, expectedLength: total)
            owner.complete(with: nil)
            link.acknowledge(sequence, completing: owner)
        }
    }

    /// The task ended without its file.
    func failed(_ error: URLError, resumeData: Data?, sequence: UInt64) {
        guard let owner, let callbacks = end(with: error, always: true) else { return }
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
        guard let owner, let callbacks = end(with: error, always: false) else { return }
        link.session?.enqueue { [link] in
            for callback in callbacks { callback(nil) }
            owner.complete(with: error)
            link.session?.unregister(owner)
        }
    }

    /// Ends the task with `error` (unless it had ended and `always` is false); the resume data
    /// handlers waiting, or nil when nothing ended.
    private func end(with error: URLError, always: Bool) -> [@Sendable (Data?) -> Void]? {
        state.withLock { state in
            guard always || state.machine.isLive else { return nil }
            _ = state.machine.handle(.failed)
            state.error = error
            defer { state.resumeDataCallbacks = [] }
            return state.resumeDataCallbacks
        }
    }
}
