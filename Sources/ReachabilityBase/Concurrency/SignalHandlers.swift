import Dispatch
import LinuxSystem
import Synchronization

/// Signals (SIGINT, SIGTERM, SIGHUP) delivered to a closure through Dispatch, without losing one
/// while the handler is being set up. For programs that must checkpoint before they exit, like
/// the ones that follow a `PathMonitor` with downloads.
///
/// On Linux, libdispatch reads signal sources from a signalfd and, when it registers one,
/// replaces the disposition with its own handler. Registration happens later, on its manager
/// thread, after `resume()`. The common recipe `signal(SIGINT, SIG_IGN)` first (right on Darwin,
/// where kqueue sees ignored signals) therefore opens a window on Linux in which a signal is
/// silently dropped: here the default action stays until dispatch has taken over, and `install`
/// returns only then, so the program can announce readiness afterwards.
public final class SignalHandlers: Sendable {
    private let signals: [Int32]
    // Dispatch sources are not Sendable on Linux; the mutex owns them until `remove()`.
    private let sources: Mutex<[any DispatchSourceSignal]>

    private init(signals: [Int32], sources: sending [any DispatchSourceSignal]) {
        self.signals = signals
        self.sources = Mutex(sources)
    }

    /// Calls `handler` with the signal's number on `queue` whenever one of `signals` arrives;
    /// returns once every handler is registered. The signals are also unblocked on the calling
    /// thread: a parent may hand down a mask blocking them (Foundation's `Process` started from
    /// a dispatch thread does), and a process-directed signal needs a thread that accepts it.
    public static func install(_ signals: [Int32], queue: DispatchQueue? = nil,
                               handler: @escaping @Sendable (Int32) -> Void) async -> SignalHandlers {
        unblock(signals)
        let registrationQueue = DispatchQueue(label: "LinuxReachability.signals")
        var sources: [any DispatchSourceSignal] = []
        for number in signals {
            let source = DispatchSource.makeSignalSource(signal: number, queue: registrationQueue)
            source.setEventHandler {
                if let queue { queue.async { handler(number) } } else { handler(number) }
            }
            await withCheckedContinuation { (registered: CheckedContinuation<Void, Never>) in
                source.setRegistrationHandler { registered.resume() }
                source.resume()
            }
            sources.append(source)
        }
        return SignalHandlers(signals: signals, sources: sources)
    }

    /// The same, blocking the calling thread until the handlers are registered: for top-level
    /// code that goes on to `dispatchMain()`. Do not call it from `queue` or a cooperative thread.
    public static func installBlocking(_ signals: [Int32], queue: DispatchQueue? = nil,
                                       handler: @escaping @Sendable (Int32) -> Void) -> SignalHandlers {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<SignalHandlers?>(nil)
        unblock(signals)   // on this thread; the task below runs elsewhere
        Task.detached {
            let handlers = await install(signals, queue: queue, handler: handler)
            result.withLock { $0 = handlers }
            done.signal()
        }
        done.wait()
        return result.withLock { $0! }
    }

    /// Stops the handlers and restores the default dispositions.
    public func remove() {
        sources.withLock { sources in
            for source in sources { source.cancel() }
            sources = []
        }
        // Dispatch's handler stays installed after cancel and would swallow later signals.
        for number in signals { CurrentProcess.restoreDefaultAction(of: number) }
    }

    private static func unblock(_ signals: [Int32]) {
        CurrentProcess.unblock(signals: signals)
    }
}
