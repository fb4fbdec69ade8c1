#if canImport(Glibc)
import Glibc
#endif

/// Detached OS threads for loops that block in poll(2) (the monitor, the transfer engine, the
/// control server), where a Dispatch queue would park one of its few worker threads for good.
///
/// Exists because Foundation's `Thread` lives in Foundation proper, not FoundationEssentials:
/// using it links all of Foundation plus ICU into every binary (about 50 MB on disk and several
/// MB resident in a static build).
package enum SystemThread {
    private final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts `body` on a new detached thread named `name` (Linux keeps the first 15 bytes).
    /// Only failure to create a thread (EAGAIN: the process or system thread limit) traps, as
    /// Foundation's `Thread.start()` does.
    package static func detach(name: String, _ body: @escaping @Sendable () -> Void) {
        let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, runStart, start)
        if result != 0 {
            Unmanaged<Start>.fromOpaque(start).release()
            fatalError("cannot start thread '\(name)': \(String(cString: strerror(result)))")
        }
        pthread_detach(thread)
    }

    /// The thread entry point: takes back the retained `Start` and runs it.
    private static let runStart: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { context in
        let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
        setCurrentThreadName(start.name)
        start.body()
        return nil
    }

    /// Names the calling thread (shown by ps -L, top -H, gdb). Written to /proc/thread-self/comm:
    /// glibc's pthread_setname_np is hidden from Swift's Glibc module (it needs _GNU_SOURCE) and
    /// prctl is variadic. Best effort: a missing /proc leaves the inherited name.
    private static func setCurrentThreadName(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
