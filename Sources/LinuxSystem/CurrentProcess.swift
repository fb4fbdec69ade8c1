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
