import LinuxSystem

/// Detached OS threads for loops that block in poll(2) (the monitor, the transfer engine, the
/// control server), where a Dispatch queue would park one of its few worker threads for good.
///
/// Exists because Foundation's `Thread` lives in Foundation proper, not FoundationEssentials:
/// using it links all of Foundation plus ICU into every binary (about 50 MB on disk and several
/// MB resident in a static build).
package enum SystemThread {
    /// Starts `body` on a new detached thread named `name` (Linux keeps the first 15 bytes).
    /// Only failure to create a thread (EAGAIN: the process or system thread limit) traps, as
    /// Foundation's `Thread.start()` does.
    package static func detach(name: String, _ body: @escaping @Sendable () -> Void) {
        if let error = CurrentProcess.startThread({
            CurrentProcess.nameCurrentThread(name)
            body()
        }) {
            fatalError("cannot start thread '\(name)': \(error)")
        }
    }
}
