import ResumableDownloads
import Synchronization

/// The sessions of one `download` run, shared by the job tasks, the progress loop and the
/// interrupt handler (a signal can arrive while a job is still opening).
final class SessionRegistry: Sendable {
    private struct State {
        var sessions: [DownloadSession] = []
        var alreadyComplete: [DownloadCommand.Job] = []
        var isInterrupted = false
    }

    private let state = Mutex(State())

    /// Adds a session; false (not added) once the run was interrupted.
    func add(_ session: DownloadSession) -> Bool {
        state.withLock { state in
            guard !state.isInterrupted else { return false }
            state.sessions.append(session)
            return true
        }
    }

    /// Marks the run interrupted and returns the sessions to shut down.
    func interrupt() -> [DownloadSession] {
        state.withLock { state in
            state.isInterrupted = true
            return state.sessions
        }
    }

    /// A job whose destination already held the wanted file.
    func markAlreadyComplete(_ job: DownloadCommand.Job) { state.withLock { $0.alreadyComplete.append(job) } }

    var alreadyComplete: [DownloadCommand.Job] { state.withLock { $0.alreadyComplete } }
    var isInterrupted: Bool { state.withLock { $0.isInterrupted } }
    var sessions: [DownloadSession] { state.withLock { $0.sessions } }
    var downloads: [Download] { sessions.map(\.download) }
}
