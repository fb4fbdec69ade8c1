import Synchronization

/// The durable writes a run of pipelined requests puts off until its end (issue 29: 3,000
/// background task creations each waited for a session record fdatasync of their own). The
/// control server carries out the requests that arrived together with one of these as
/// `collecting`, then calls `commit`, and only then answers them: the run shares one write per
/// session, and every reply still means that its change is durable.
package final class RunCommit: Sendable {
    /// The run being carried out in this task, when its caller commits before answering.
    @TaskLocal package static var collecting: RunCommit?

    private let pending = Mutex<(@Sendable () async -> Void)?>(nil)

    /// An empty run.
    package init() {}

    /// Asks for `commit` at the run's end. The first one asked for stands (it writes whatever
    /// every request of the run put off).
    package func putOff(_ commit: @escaping @Sendable () async -> Void) {
        pending.withLock { if $0 == nil { $0 = commit } }
    }

    /// Runs the commit put off, again while carrying it out put off more.
    package func commit() async {
        while let commit = pending.withLock({ pending in
            defer { pending = nil }
            return pending
        }) {
            await commit()
        }
    }
}
