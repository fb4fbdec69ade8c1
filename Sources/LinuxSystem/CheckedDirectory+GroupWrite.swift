import Synchronization

/// Atomic writes of many small files at once (a group commit).
extension CheckedDirectory {
    /// `writeAtomically` for several files whose durability may be shared: every file is written
    /// to its own hidden temporary (created with `O_EXCL`, exactly `mode`) and its write-back
    /// started, then each is fsynced, renamed over its name, and the directory is fsynced once
    /// for all of them. Returns, per file in order, nil when it is in place and durable, or why not.
    ///
    /// Why: a file's fsync followed by the directory's costs two journal commits each (10-14 ms
    /// an add on the shared ext4 disk here, most of an add at 10,000 queued); started together,
    /// the first commit carries the others' data and metadata, so the later fsyncs find little
    /// left to do and the directory is committed once. Every file is still fsynced before its
    /// rename, as POSIX asks, whatever the file system.
    package func writeAtomically(group files: [(name: String, bytes: [UInt8])], mode: UInt32 = 0o600) -> [FileTrustError?] {
        var results = [FileTrustError?](repeating: nil, count: files.count)
        var opened: [(index: Int, temporary: String, file: FileDescriptor)] = []
        for (index, item) in files.enumerated() {
            let temporary = Self.uniqueTemporaryName(for: item.name)
            do throws(FileTrustError) {
                try Self.checkName(item.name, in: path)
                let file = try openOwnedFile(temporary, creating: .exclusive, mode: mode).descriptor
                do throws(Errno) {
                    try file.setPermissions(mode)
                    try file.writeAll(item.bytes)
                    // Not a barrier: lets the first fsync's commit find the others written.
                    try? file.startWriteBack(offset: 0, count: 0)
                } catch {
                    file.close()
                    try? remove(temporary)
                    throw .system(child(temporary), "write", error)
                }
                opened.append((index, temporary, file))
            } catch {
                results[index] = error
            }
        }
        var renamed: [Int] = []
        for entry in opened {
            do throws(FileTrustError) {
                do throws(Errno) {
                    // Closed exactly once, here (a second close could hit a reused number).
                    defer { entry.file.close() }
                    try entry.file.sync()
                } catch {
                    throw .system(child(entry.temporary), "write", error)
                }
                try rename(entry.temporary, to: files[entry.index].name, replacing: true)
                renamed.append(entry.index)
            } catch {
                try? remove(entry.temporary)
                results[entry.index] = error
            }
        }
        guard !renamed.isEmpty else { return results }
        do { try sync() } catch {
            // The renames may not survive a crash: none of them is reported durable.
            for index in renamed { results[index] = error }
        }
        return results
    }
}

/// fsyncs of several files side by side: a completion group's data barriers (issue 29).
///
/// Why: one after another, a group's fdatasyncs each wait for their own journal commit and
/// device flush; in flight together, the file system carries several in one commit and the
/// device queues their writes, so the group waits about as long as its slowest file, not the
/// sum. A few threads are enough for that (each mostly waits in the kernel), and a bound keeps
/// a group of a thousand files from starting a thousand threads.
package enum SideBySideSync {
    /// The most syncs in flight at once by default (the calling thread and three helpers).
    package static let defaultWidth = 4

    /// Makes each of `files` durable: fdatasync (data and size), or fsync with
    /// `includingMetadata`. Up to `width` run at once on short-lived threads, the calling thread
    /// one of them; returns when all have ended. Per file in order: nil once durable, else the
    /// errno of its own sync (one file failing says nothing about the others). When no thread or
    /// wake-up descriptor can be made the syncs run one after another on the calling thread.
    package static func sync(_ files: [FileDescriptor], includingMetadata: Bool = false,
                             width: Int = defaultWidth) -> [Errno?] {
        let work = Work(files, includingMetadata: includingMetadata)
        let helpers = min(max(0, width - 1), files.count - 1)
        guard helpers > 0, let done = try? WakeSignal() else {
            work.run()
            return work.results
        }
        defer { done.close() }
        var started = 0
        for _ in 0..<helpers {
            let failed = CurrentProcess.startThread {
                CurrentProcess.nameCurrentThread("side-sync")
                work.run()
                work.helperEnded()
                done.signal()
            }
            guard failed == nil else { break }   // the calling thread takes the rest
            started += 1
        }
        work.run()
        // Every file is taken once the calling thread runs out; wait for the helpers' last syncs.
        var entries = [PollEntry(done.pollDescriptor, .readable)]
        while work.helpersEnded < started {
            entries[0].isReady = false
            try? Poll.wait(&entries, timeoutMilliseconds: 1000)
            done.reset()
        }
        return work.results
    }

    /// The files, the next one to take and the results, shared by the threads.
    private final class Work: Sendable {
        private struct State {
            var next = 0
            var results: [Errno?]
            var helpersEnded = 0
        }

        private let files: [FileDescriptor]
        private let includingMetadata: Bool
        private let state: Mutex<State>

        init(_ files: [FileDescriptor], includingMetadata: Bool) {
            self.files = files
            self.includingMetadata = includingMetadata
            state = Mutex(State(results: [Errno?](repeating: nil, count: files.count)))
        }

        var results: [Errno?] { state.withLock { $0.results } }
        var helpersEnded: Int { state.withLock { $0.helpersEnded } }

        func helperEnded() { state.withLock { $0.helpersEnded += 1 } }

        /// Takes files until none is left, syncing each outside the lock.
        func run() {
            while true {
                let index = state.withLock { state -> Int? in
                    guard state.next < files.count else { return nil }
                    defer { state.next += 1 }
                    return state.next
                }
                guard let index else { return }
                var failure: Errno?
                do throws(Errno) {
                    if includingMetadata { try files[index].sync() } else { try files[index].syncData() }
                } catch {
                    failure = error
                }
                state.withLock { $0.results[index] = failure }
            }
        }
    }
}
