import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import Synchronization

/// Finished downloads put in place in groups (issue 29): the files that finish while a group is
/// being written form the next one, and share its barriers.
///
/// Alone, a finished file cost five fsyncs (its data, its record, the state directory, the
/// destination's directory, the state directory again after the record's removal): at 10,000
/// small files that was most of the agent's time, where `aria2c -i` syncs nothing. A group
/// starts write-back of every file first, then runs their fdatasyncs side by side
/// (`SideBySideSync`: one after another each waited for its own journal commit); then
/// writes every record at once (`CheckedDirectory.writeAtomically(group:)`, one directory fsync),
/// renames every file and fsyncs each destination directory once. The order per file is the one
/// a file alone had: data durable, then the record naming the finished file, then the rename; a
/// file is reported in place only once its rename is durable. The writing happens on a thread of
/// its own: fsync blocks, and the cooperative pool has a thread per core.
final class CompletionGroupCommit: Sendable {
    /// One per process: files of several agents may share a group.
    static let shared = CompletionGroupCommit()

    private struct Member: Sendable {
        var file: PartialFile
        var done: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var groups = StagedGroups<Member>()
        /// Files staged or being written.
        var inFlight = 0
    }

    private let state = Mutex(State())

    /// Files waiting for their group (staged or being written): each holds its descriptors.
    var inFlight: Int { state.withLock { $0.inFlight } }

    /// Puts `file` (verified, its transfer over) in place with the next group; returns once its
    /// rename is durable, or throws why it is not (the file then stays as it was).
    func commit(_ file: PartialFile) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let startsWriter = state.withLock { state in
                state.inFlight += 1
                return state.groups.stage(Member(file: file, done: continuation))
            }
            if startsWriter { SystemThread.detach(name: "completion-commit") { [self] in writeGroups() } }
        }
    }

    private func writeGroups() {
        while let group = state.withLock({ $0.groups.next() }) {
            let failures = Self.write(group.map(\.file))
            state.withLock { $0.inFlight -= group.count }
            for (member, failure) in zip(group, failures) {
                if let failure { member.done.resume(throwing: failure) } else { member.done.resume() }
            }
        }
    }

    /// One group's steps; the failure of each file (nil: in place).
    private static func write(_ files: [PartialFile]) -> [(any Error)?] {
        for file in files { file.startFinishingWriteBack() }
        // Data durable (the fdatasyncs side by side), then each state directory's records at once.
        var failures = PartialFile.syncFinishedData(of: files)
        var records: [String: [(index: Int, name: String, bytes: [UInt8])]] = [:]
        for (index, file) in files.enumerated() where failures[index] == nil {
            do {
                let record = try file.finishedRecord()
                records[file.recordDirectory.path, default: []].append((index, record.name, record.bytes))
            } catch {
                failures[index] = error
            }
        }
        for members in records.values {
            let results = files[members[0].index].recordDirectory.writeAtomically(group: members.map { ($0.name, $0.bytes) })
            for (member, result) in zip(members, results) where result != nil {
                failures[member.index] = result.map { DownloadError.file($0) }
            }
        }
        // The renames, then each destination directory's fsync once.
        var placed: [String: [Int]] = [:]
        for (index, file) in files.enumerated() where failures[index] == nil {
            do {
                try file.placeFinishedFile()
                placed[file.placementDirectory.path, default: []].append(index)
            } catch {
                failures[index] = error
            }
        }
        for indices in placed.values {
            do throws(FileTrustError) {
                try files[indices[0]].placementDirectory.sync()
            } catch {
                for index in indices { failures[index] = DownloadError.file(error) }
            }
        }
        for (index, file) in files.enumerated() where failures[index] == nil { file.finishPlacement() }
        return failures
    }
}
