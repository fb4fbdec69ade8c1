import Dispatch
import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import Synchronization

/// The record writes an add started, for a caller that answers several adds together and must
/// answer each only once its record is durable (the agent's control server, for pipelined adds).
///
/// Set as `collecting` around an add: `DownloadAgent` then stages the new download's record
/// for the next group commit instead of fsyncing it alone, and starts the download once the
/// record is in place. Without it (the public API, background sessions), the record is written
/// durably before the add returns, as always.
package final class DurableWrites: Sendable {
    /// The writes of the add being carried out in this task, when its caller waits for them.
    @TaskLocal package static var collecting: DurableWrites?

    private struct State {
        var begun = 0
        var failure: String?
    }

    private let state = Mutex(State())
    private let ended = DispatchSemaphore(value: 0)

    /// An empty set of writes.
    package init() {}

    func begin() { state.withLock { $0.begun += 1 } }

    func end(failure: String?) {
        state.withLock { state in
            if state.failure == nil { state.failure = failure }
        }
        ended.signal()
    }

    /// Blocks the calling thread (a plain thread, never one of the cooperative pool's) until
    /// every write begun is durable; returns the first failure, if any.
    package func waitUntilDurable() -> String? {
        let begun = state.withLock { $0.begun }
        for _ in 0..<begun { ended.wait() }
        return state.withLock { $0.failure }
    }
}

/// New downloads' records written in groups: records staged while a group is being written
/// form the next one, so the adds that arrive together share its fsyncs
/// (`CheckedDirectory.writeAtomically(group:)`). The writing happens on a thread of its own:
/// fsync blocks, and the cooperative pool has a thread per core.
final class RecordGroupCommit: Sendable {
    /// One per process: groups are made per directory, so agents may share it.
    static let shared = RecordGroupCommit()

    private struct Staged: Sendable {
        var id: UUID
        var directory: CheckedDirectory
        var name: String
        var bytes: [UInt8]
        var written: @Sendable (FileTrustError?) -> Void
    }

    private struct State {
        var groups = StagedGroups<Staged>()
        /// Records staged and not yet written, with the tasks waiting for them.
        var pending: [UUID: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())

    /// Writes `bytes` as `name` in `directory` with the next group; `written` is called (on the
    /// writing thread) once it is durable, or with why it is not.
    func stage(id: UUID, bytes: [UInt8], as name: String, in directory: CheckedDirectory,
               written: @escaping @Sendable (FileTrustError?) -> Void) {
        let startsWriter = state.withLock { state in
            if state.pending[id] == nil { state.pending[id] = [] }
            return state.groups.stage(Staged(id: id, directory: directory, name: name, bytes: bytes, written: written))
        }
        if startsWriter { SystemThread.detach(name: "record-commit") { [self] in writeGroups() } }
    }

    /// Whether download `id`'s record is staged and not yet written.
    func isPending(_ id: UUID) -> Bool { state.withLock { $0.pending[id] != nil } }

    /// Returns once download `id`'s record is written (or failed), at once when none is staged.
    func waitUntilWritten(_ id: UUID) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let isWaiting = state.withLock { state in
                guard state.pending[id] != nil else { return false }
                state.pending[id]?.append(continuation)
                return true
            }
            if !isWaiting { continuation.resume() }
        }
    }

    private func writeGroups() {
        while let group = state.withLock({ $0.groups.next() }) {
            // Agents in one process may use different directories: one group commit for each.
            var byDirectory: [ObjectIdentifier: [Staged]] = [:]
            for staged in group { byDirectory[ObjectIdentifier(staged.directory), default: []].append(staged) }
            for members in byDirectory.values {
                let results = members[0].directory.writeAtomically(group: members.map { ($0.name, $0.bytes) })
                for (member, result) in zip(members, results) {
                    let waiting = state.withLock { $0.pending.removeValue(forKey: member.id) } ?? []
                    member.written(result)
                    for continuation in waiting { continuation.resume() }
                }
            }
        }
    }
}

/// The staging both group commits share (`RecordGroupCommit`, `CompletionGroupCommit`): members
/// staged while a group is being written form the next one, drained by one writer at a time.
struct StagedGroups<Member> {
    private var staged: [Member] = []
    private var isWriting = false

    /// Stages `member`; true when no writer runs and the caller must start one.
    mutating func stage(_ member: Member) -> Bool {
        staged.append(member)
        defer { isWriting = true }
        return !isWriting
    }

    /// The next group for the writer, or nil when none is staged (the writer ends).
    mutating func next() -> [Member]? {
        guard !staged.isEmpty else {
            isWriting = false
            return nil
        }
        defer { staged = [] }
        return staged
    }
}
