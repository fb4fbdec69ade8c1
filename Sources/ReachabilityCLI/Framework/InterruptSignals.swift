import Dispatch
import LinuxReachability
import Synchronization
import Glibc
import LinuxSystem

/// SIGINT/SIGTERM delivered as a callback through DispatchSource, so `watch` can cancel its
/// monitor and exit 0 instead of dying mid-line.
enum InterruptSignals {
    /// Installs handlers for SIGINT and SIGTERM and returns once both are registered with the
    /// system; the returned closure removes them and restores the default dispositions.
    ///
    /// On Linux, libdispatch reads signal sources from a signalfd and, when it registers one,
    /// replaces the disposition with its own handler (which forwards the signal to its manager
    /// thread). Registration happens later, on that thread, after `resume()`. Setting SIG_IGN
    /// first, as on Darwin, would therefore open a window in which a signal is silently dropped,
    /// so on Linux the default action stays until dispatch takes over, and callers announce
    /// readiness only after this returns. On Darwin kqueue sees ignored signals, and SIG_IGN is
    /// what stops the default action.
    @Sendable static func install(_ handler: @escaping @Sendable () -> Void) async -> (@Sendable () -> Void) {
        await installReportingNumber { _ in handler() }
    }

    /// Like `install`, but tells the handler which signal arrived, so `download` can exit
    /// 128 + signal (130 for SIGINT, 143 for SIGTERM) as a shell reports an interrupted job.
    static func installReportingNumber(for signals: [Int32] = [SIGINT, SIGTERM],
                                       _ handler: @escaping @Sendable (Int32) -> Void) async -> (@Sendable () -> Void) {
        let handlers = await SignalHandlers.install(signals, handler: handler)
        return { handlers.remove() }
    }

    /// Unblocks SIGINT and SIGTERM for the calling thread; call it on the main thread at start-up.
    ///
    /// The signal mask is inherited across fork/exec, and Dispatch and Swift-concurrency threads
    /// block every signal, so a parent that spawns us from one of them (Foundation's `Process`
    /// does) leaves SIGINT/SIGTERM blocked in every thread here. libdispatch reads its signal
    /// sources through signalfd, so `watch` would still see them, but `status` and `wait` install
    /// no handler: the signals would stay pending and never take their default action.
    static func unblockOnCurrentThread() {
        CurrentProcess.unblock(signals: [SIGINT, SIGTERM, SIGHUP])   // SIGHUP: the agent's reload
    }
}
