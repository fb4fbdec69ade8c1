import FoundationEssentials
import ReachabilityBase
import LinuxSystem

/// The sd_notify(3) protocol, by hand: datagrams like `READY=1` to the socket named by
/// `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). Without the variable every
/// call does nothing, so the agent runs the same outside systemd.
package struct SystemdNotifier: Sendable {
    package let socketPath: String?
    /// Half of `WATCHDOG_USEC` (systemd's advice), when the watchdog is on for this process.
    package let watchdogInterval: Duration?

    package init(environment: [String: String], pid: Int32 = CurrentProcess.id) {
        socketPath = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        watchdogInterval = Self.watchdogInterval(environment: environment, pid: pid)
    }

    /// systemd's watchdog timeout in microseconds (at most 100 years' worth).
    package static let watchdogMicroseconds = EnvironmentValue(
        "WATCHDOG_USEC", Count(1...Int(Duration.maximumCountable.milliseconds) * 1000))
    /// The process the watchdog is meant for.
    package static let watchdogProcess = EnvironmentValue("WATCHDOG_PID", Count(1...Int(Int32.max)))

    /// `WATCHDOG_USEC / 2`, if set, positive, and `WATCHDOG_PID` (when present) is this process.
    /// A value that is not a number in range turns the watchdog off, as sd_watchdog_enabled(3)
    /// does.
    package static func watchdogInterval(environment: [String: String], pid: Int32) -> Duration? {
        guard let microseconds = try? watchdogMicroseconds.value(in: environment) else { return nil }
        if environment["WATCHDOG_PID"] != nil, (try? watchdogProcess.value(in: environment)) != Int(pid) { return nil }
        return .microseconds(microseconds / 2)
    }

    /// Whether a notification socket is configured.
    package var isEnabled: Bool { socketPath != nil }

    /// Sends `state` (newline-separated `KEY=value` assignments). Errors are ignored, as
    /// sd_notify's callers do: systemd may not be listening any more. Never waits: a receiver
    /// that stops reading fills its queue (ten datagrams by default), and a blocking send would
    /// then hold the agent, its watchdog and its stop path until it reads (a test that was slow
    /// to read once kept the agent from handling SIGTERM); a notification is dropped instead.
    @discardableResult
    package func notify(_ state: String) -> Bool {
        guard let socketPath else { return false }
        guard let socket = try? FileDescriptor.unixSocket(datagrams: true) else { return false }
        defer { socket.close() }
        guard let address = try? SocketAddress(unixPath: socketPath) else { return false }
        return (try? socket.send(Array(state.utf8), to: address, nonBlocking: true)) != nil
    }
}
