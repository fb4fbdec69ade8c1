import Synchronization

/// The durable writes a run of pipelined requests puts off until its end (issue 29: 3,000
/// background task creations each waited for a session record fdatasync of their own). The
/// control server carries out the requests that arrived together with one of these as
/// `collecting`, then calls `commit`, and only then answers them: the run shares one write per
/// session, and every reply still means that its change is durable.
///
/// A task started while the run is carried out (a transfer's, a timer's) inherits `collecting`
/// and outlives the run: once `commit` has begun the run takes nothing more (`putOff` is false),
/// so such a task writes at once instead of for a commit that already ran.
package final class RunCommit: Sendable {
    /// The run being carried out in this task, when its caller commits before answering.
    @TaskLocal package static var collecting: RunCommit?

    private struct State {
        var commit: (@Sendable () async -> Void)?
        var isClosed = false
    }

    private let state = Mutex(State())

    /// An empty run.
    package init() {}

    /// Asks for `commit` at the run's end; false when the run has ended (write at once). The
    /// first one asked for stands: it writes whatever every request of the run put off.
    package func putOff(_ commit: @escaping @Sendable () async -> Void) -> Bool {
        state.withLock { state in
            guard !state.isClosed else { return false }
            if state.commit == nil { state.commit = commit }
            return true
        }
    }

    /// Ends the run and runs the commit put off, if any.
    package func commit() async {
        let commit = state.withLock { state in
            state.isClosed = true
            defer { state.commit = nil }
            return state.commit
        }
        await commit?()
    }
}
