import CLinuxSystem
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Process, thread, signal and namespace system calls (see Syscalls.swift for the rules).
extension Syscall {
    static var processID: Int32 { getpid() }
    static func hasEnvironmentVariable(_ name: String) -> Bool { getenv(name) != nil }
    #if canImport(Glibc)
    /// mallopt(3); false when glibc refused the value.
    static func setMallocArenaLimit(_ arenas: Int32) -> Bool { mallopt(CLINUX_M_ARENA_MAX, arenas) == 1 }
    static func setMallocMapThreshold(_ bytes: Int32) -> Bool { mallopt(CLINUX_M_MMAP_THRESHOLD, bytes) == 1 }
    #else
    // musl has one heap and no mallopt.
    static func setMallocArenaLimit(_ arenas: Int32) -> Bool { false }
    static func setMallocMapThreshold(_ bytes: Int32) -> Bool { false }
    #endif
    static func unsetEnvironment(_ name: String) { unsetenv(name) }

    /// The passwd entry's home directory for the effective user.
    static func passwordHomeDirectory() -> String? {
        guard let entry = getpwuid(geteuid()), let home = entry.pointee.pw_dir else { return nil }
        return String(cString: home)
    }

    static func setNetworkNamespace(_ descriptor: Int32) throws(Errno) {
        try valueOrErrno { clinux_setns_net(descriptor) }
    }

    static func openPrivateSysfs() throws(Errno) -> Int32 {
        try valueOrErrno { clinux_open_private_sysfs() }
    }

    /// pthread_create + pthread_detach; the error number when no thread can be made.
    static func startDetachedThread(_ context: UnsafeMutableRawPointer,
                                    _ entry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer?) -> Errno? {
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, entry, context)
        if result != 0 { return Errno(result) }
        pthread_detach(thread)
        return nil
    }

    /// Unblocks `signals` for the calling thread.
    static func unblockSignals(_ signals: [Int32]) {
        var mask = sigset_t()
        sigemptyset(&mask)
        for number in signals { sigaddset(&mask, number) }
        pthread_sigmask(SIG_UNBLOCK, &mask, nil)
    }

    static let currentDirectory = AT_FDCWD
    static let writeOnlyCloseOnExec = O_WRONLY | O_CLOEXEC

    static func restoreDefaultAction(_ number: Int32) { _ = Glibc.signal(number, SIG_DFL) }

    static func ignore(_ number: Int32) { _ = Glibc.signal(number, SIG_IGN) }

    /// execve(2); returns only on failure, with the error.
    static func execute(_ path: String, _ arguments: [String], _ environment: [String]) -> Errno {
        func cStrings(_ strings: [String]) -> [UnsafeMutablePointer<CChar>?] { strings.map { strdup($0) } + [nil] }
        let argv = cStrings(arguments), envp = cStrings(environment)
        defer { for pointer in argv + envp { free(pointer) } }
        Glibc.execve(path, argv, envp)
        return Errno(errno)
    }

    static func exit(_ status: Int32) -> Never { Glibc.exit(status) }

    /// Parks the calling thread until a signal handler runs (pause(2)), for ever.
    static func pauseForever() -> Never {
        while true { Glibc.pause() }
    }

    /// Blocks the calling thread (never a task's: use Task.sleep there).
    static func sleep(microseconds: UInt32) { _ = usleep(microseconds) }

    static var threadNice: Int32 { clinux_thread_nice() }

    static func setThreadNice(_ value: Int32) throws(Errno) {
        _ = try valueOrErrno { clinux_set_thread_nice(value) }
    }

    static func kill(_ process: Int32, _ signal: Int32) throws(Errno) {
        try valueOrErrno { Glibc.kill(process, signal) }
    }
    /// posix_spawn(3) through `clinux_spawn` (new session, descriptors above 2 closed, clean
    /// signal state; see the shim). Returns the child's pid.
    static func spawn(_ program: String, _ arguments: [String], _ environment: [String], searchingPath: Bool,
                      newSession: Bool, directory: String?, input: Int32, output: Int32, error: Int32) throws(Errno) -> Int32 {
        func cStrings(_ strings: [String]) -> [UnsafeMutablePointer<CChar>?] { strings.map { strdup($0) } + [nil] }
        let argv = cStrings(arguments), envp = cStrings(environment)
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let result = directory.withOptionalCString { directory in
            clinux_spawn(program, argv, envp, searchingPath ? 1 : 0, newSession ? 1 : 0, directory, input, output, error, &pid)
        }
        if result != 0 { throw Errno(result) }
        return pid
    }

    /// waitpid(2) for one child: blocks until it ends (EINTR retried), or with `blocking` false
    /// returns nil while it runs. The raw status word.
    static func wait(for process: Int32, blocking: Bool) throws(Errno) -> Int32? {
        var status: Int32 = 0
        let result = try valueOrErrno { waitpid(process, &status, blocking ? 0 : WNOHANG) }
        return result == 0 ? nil : status
    }

    /// Bytes an unprivileged writer may still use on the file system of `descriptor`.
    static func availableBytes(_ descriptor: Int32) throws(Errno) -> Int64 {
        Int64(try valueOrErrno { clinux_available_bytes(descriptor) })
    }
}

extension Optional where Wrapped == String {
    /// The C string, or NULL for nil, for the duration of `body`.
    fileprivate func withOptionalCString<Result>(_ body: (UnsafePointer<CChar>?) -> Result) -> Result {
        guard let self else { return body(nil) }
        return self.withCString { body($0) }
    }
}

extension Syscall {
    /// localtime_r(3) (the process's time zone: TZ, else /etc/localtime): the day of the week
    /// (0 is Sunday) and the minute of the day; nil when the C library cannot convert.
    static func localWeekdayAndMinute(secondsSinceEpoch: Int64) -> (weekday: Int, minuteOfDay: Int)? {
        var seconds = time_t(secondsSinceEpoch)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return nil }
        return (Int(parts.tm_wday), Int(parts.tm_hour) * 60 + Int(parts.tm_min))
    }
}
