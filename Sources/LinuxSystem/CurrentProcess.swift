/// The process itself: who it runs as, its signal mask, threads, exit and exec.
package enum CurrentProcess {
    /// getpid(2).
    package static var id: Int32 { Syscall.processID }
    /// geteuid(2).
    package static var effectiveUserID: UInt32 { Syscall.effectiveUserID }
    /// getegid(2).
    package static var effectiveGroupID: UInt32 { Syscall.effectiveGroupID }
    /// The passwd entry's home directory for the effective user (when $HOME is unset).
    package static var passwordHomeDirectory: String? { Syscall.passwordHomeDirectory() }

    /// Removes `name` from this process's environment (what children inherit from now on).
    package static func removeEnvironmentVariable(_ name: String) { Syscall.unsetEnvironment(name) }

    /// Unblocks `signals` for the calling thread. The mask is inherited across fork/exec, and
    /// Dispatch and Swift-concurrency threads block every signal, so a parent that spawns us from
    /// one of them leaves them blocked; a process-directed signal needs a thread accepting it.
    package static func unblock(signals: [Int32]) { Syscall.unblockSignals(signals) }

    /// Restores the default action of `signal` (after a handler that must not outlive its owner).
    package static func restoreDefaultAction(of signal: Int32) { Syscall.restoreDefaultAction(signal) }

    /// Ignores `signal` (SIGPIPE: a vanished reader is an EPIPE error instead).
    package static func ignore(signal: Int32) { Syscall.ignore(signal) }

    /// Sends `signal` to `process`.
    package static func send(signal: Int32, to process: Int32) throws(Errno) { try Syscall.kill(process, signal) }

    /// Replaces the process with `path` (execve(2)); returns only the reason it failed.
    package static func execute(_ path: String, arguments: [String], environment: [String: String]) -> Errno {
        Syscall.execute(path, arguments, environment.map { "\($0.key)=\($0.value)" })
    }

    /// Starts `body` on a new detached thread; the error when none can be made (EAGAIN: the
    /// process or system thread limit).
    package static func startThread(_ body: @escaping @Sendable () -> Void) -> Errno? {
        let context = Unmanaged.passRetained(ThreadStart(body)).toOpaque()
        if let error = Syscall.startDetachedThread(context, runThreadStart) {
            Unmanaged<ThreadStart>.fromOpaque(context).release()
            return error
        }
        return nil
    }

    /// Sets the calling thread's nice value (-20 ... 19; Linux keeps it per thread, and the
    /// threads this one starts from now on inherit it). Below 0 needs CAP_SYS_NICE or a
    /// matching RLIMIT_NICE (systemd's `LimitNICE=`): EACCES otherwise.
    package static func setCurrentThreadNice(_ value: Int32) throws(Errno) { try Syscall.setThreadNice(value) }

    /// The calling thread's nice value.
    package static var currentThreadNice: Int32 { Syscall.threadNice }

    /// Bounds glibc's heap for a long-running process with many short-lived threads: at most
    /// `arenas` malloc arenas (glibc's default is 8 per core, each keeping the free memory of the
    /// threads that used it), and blocks of `mapThreshold` bytes or more mapped and unmapped on
    /// their own (glibc otherwise raises that threshold after the first large free, and large
    /// transient buffers stay in an arena). An operator's `MALLOC_ARENA_MAX` or
    /// `MALLOC_MMAP_THRESHOLD_` wins. Call before starting threads.
    package static func boundHeap(arenas: Int32, mapThreshold: Int32) {
        if !Syscall.hasEnvironmentVariable("MALLOC_ARENA_MAX") { _ = Syscall.setMallocArenaLimit(arenas) }
        if !Syscall.hasEnvironmentVariable("MALLOC_MMAP_THRESHOLD_") { _ = Syscall.setMallocMapThreshold(mapThreshold) }
    }

    /// Names the calling thread (ps -L, top -H and gdb show it; Linux keeps 15 bytes). Written to
    /// /proc/thread-self/comm: glibc's pthread_setname_np is hidden from Swift's Glibc module
    /// (it needs _GNU_SOURCE) and prctl is variadic. Best effort: without /proc the inherited
    /// name stays.
    package static func nameCurrentThread(_ name: String) {
        guard let file = try? FileDescriptor(rawValue: Syscall.openat(Syscall.currentDirectory, "/proc/thread-self/comm", Syscall.writeOnlyCloseOnExec, 0))
        else { return }
        defer { file.close() }
        try? file.writeAll(Array(name.utf8.prefix(15)))
    }

    /// Ends the process with `status`.
    package static func exit(_ status: Int32) -> Never { Syscall.exit(status) }

    /// Parks the calling thread for good, waking only to run signal handlers (pause(2)).
    package static func parkForever() -> Never { Syscall.pauseForever() }

    /// Blocks the calling thread, which must be one of ours (never a task's: `Task.sleep` there).
    package static func sleep(milliseconds: Int) { Syscall.sleep(microseconds: UInt32(clamping: milliseconds * 1000)) }

    /// Starts `program` as a child and returns its pid without waiting for it. The child gets
    /// exactly `environment`, a new session when `newSession` (a terminal hang-up or a signal to
    /// the caller's process group does not reach it), the given standard descriptors (nil:
    /// /dev/null), no other descriptor of this process, an empty signal mask and default signal
    /// actions. With `searchingPath`, a `program` without a slash is looked up in
    /// `environment["PATH"]`. `directory` is its working directory (nil: this process's). The
    /// caller must reap it (`waitForExit(of:)`), or it stays a zombie until this process ends.
    package static func spawn(_ program: String, arguments: [String], environment: [String: String],
                              searchingPath: Bool = true, newSession: Bool = true, directory: String? = nil,
                              standardInput: FileDescriptor? = nil, standardOutput: FileDescriptor? = nil,
                              standardError: FileDescriptor? = nil) throws(Errno) -> Int32 {
        try Syscall.spawn(program, arguments, environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" },
                          searchingPath: searchingPath, newSession: newSession, directory: directory,
                          input: standardInput?.rawValue ?? -1, output: standardOutput?.rawValue ?? -1,
                          error: standardError?.rawValue ?? -1)
    }

    /// Blocks the calling thread (one of ours, never a task's) until child `process` ends, and
    /// reaps it; nil when it is not our child (already reaped).
    package static func waitForExit(of process: Int32) -> ExitStatus? {
        guard let status = try? Syscall.wait(for: process, blocking: true) else { return nil }
        return ExitStatus(rawStatus: status)
    }

    /// The child's exit status if it has ended (reaping it), nil while it runs or when it is not ours.
    package static func exitStatusIfEnded(of process: Int32) -> ExitStatus? {
        guard let status = try? Syscall.wait(for: process, blocking: false) else { return nil }
        return ExitStatus(rawStatus: status)
    }

    /// How a child ended.
    package enum ExitStatus: Sendable, Hashable, CustomStringConvertible {
        /// exit(2) with this status.
        case exited(Int32)
        /// Killed by this signal.
        case signalled(Int32)

        /// From waitpid's status word (WIFEXITED and friends are macros Swift cannot import).
        init(rawStatus: Int32) {
            self = rawStatus & 0x7f == 0 ? .exited((rawStatus >> 8) & 0xff) : .signalled(rawStatus & 0x7f)
        }

        /// Exited with status 0.
        package var isSuccess: Bool { self == .exited(0) }

        /// `exited with status 1`, `killed by signal 9`.
        package var description: String {
            switch self {
            case .exited(let status): "exited with status \(status)"
            case .signalled(let signal): "killed by signal \(signal)"
            }
        }
    }
}

/// What a new thread runs, retained across pthread_create (its C entry point takes one pointer).
private final class ThreadStart: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// The thread entry point: takes back the retained `ThreadStart` and runs it.
private let runThreadStart: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { context in
    Unmanaged<ThreadStart>.fromOpaque(context!).takeRetainedValue().body()
    return nil
}
