import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// SIGINT/SIGTERM delivered as a callback through DispatchSource, so `watch` can cancel its
/// monitor and exit 0 instead of dying mid-line.
enum InterruptSignals {
    /// Installs handlers for SIGINT and SIGTERM; the returned closure removes them and restores
    /// the default dispositions.
    @Sendable static func install(_ handler: @escaping @Sendable () -> Void) -> (@Sendable () -> Void) {
        installReportingNumber { _ in handler() }
    }

    /// Like `install`, but tells the handler which signal arrived, so `download` can exit
    /// 128 + signal (130 for SIGINT, 143 for SIGTERM) as a shell reports an interrupted job.
    static func installReportingNumber(_ handler: @escaping @Sendable (Int32) -> Void) -> (@Sendable () -> Void) {
        let queue = DispatchQueue(label: "reachability.signals")
        let sources = [SIGINT, SIGTERM].map { number -> any DispatchSourceSignal in
            // A DispatchSource only sees the signal if the default action (terminate) is off.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { handler(number) }
            source.resume()
            return source
        }
        // Dispatch sources are not Sendable on Linux; the mutex owns them for the removal closure.
        let owner = Mutex(sources)
        return {
            owner.withLock { sources in
                for source in sources { source.cancel() }
            }
            signal(SIGINT, SIG_DFL)
            signal(SIGTERM, SIG_DFL)
        }
    }
}
