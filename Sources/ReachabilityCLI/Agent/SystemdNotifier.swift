import FoundationEssentials
import Glibc

/// The sd_notify(3) protocol, by hand: datagrams like `READY=1` to the socket named by
/// `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). Without the variable every
/// call does nothing, so the agent runs the same outside systemd.
struct SystemdNotifier: Sendable {
    let socketPath: String?
    /// Half of `WATCHDOG_USEC` (systemd's advice), when the watchdog is on for this process.
    let watchdogInterval: Duration?

    init(environment: [String: String], pid: Int32 = getpid()) {
        socketPath = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        watchdogInterval = Self.watchdogInterval(environment: environment, pid: pid)
    }

    /// `WATCHDOG_USEC / 2`, if set, positive, and `WATCHDOG_PID` (when present) is this process.
    static func watchdogInterval(environment: [String: String], pid: Int32) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = Int64(text), microseconds > 0 else { return nil }
        if let owner = environment["WATCHDOG_PID"], Int32(owner) != pid { return nil }
        return .microseconds(microseconds / 2)
    }

    /// Whether a notification socket is configured.
    var isEnabled: Bool { socketPath != nil }

    /// Sends `state` (newline-separated `KEY=value` assignments). Errors are ignored, as
    /// sd_notify's callers do: systemd may not be listening any more.
    @discardableResult
    func notify(_ state: String) -> Bool {
        guard let socketPath else { return false }
        guard let descriptor = try? UnixSocketSyscalls.makeSocket(SOCK_DGRAM) else { return false }
        defer { UnixSocketSyscalls.close(descriptor) }
        return (try? UnixSocketSyscalls.sendDatagram(descriptor, Array(state.utf8), to: socketPath)) != nil
    }
}
