import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import LinuxSystem
import Testing
@testable import ReachabilityAgent
import TestSupport

/// The sd_notify environment.
@Suite("sd_notify")
struct SystemdNotifierTests {
    @Test func watchdogIntervalIsHalfOfWatchdogUsec() {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "20000000"], pid: 5) == .seconds(10))
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "6"], pid: 5) == nil)
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "5"], pid: 5) == .seconds(10))
        #expect(SystemdNotifier.watchdogInterval(environment: [:], pid: 5) == nil)
        #expect(!SystemdNotifier(environment: [:]).notify("READY=1"))
    }

    /// A receiver that never reads cannot hold the agent: once its queue is full, notifications
    /// are dropped at once instead of waiting.
    @Test(.timeLimit(.minutes(1))) func aReceiverThatDoesNotReadCannotBlockTheAgent() throws {
        let scratch = try ScratchDirectory("sd", permissions: 0o700)
        let path = scratch.path("notify.sock")
        let receiver = try FileDescriptor.unixSocket(datagrams: true)
        defer { receiver.close() }
        try receiver.bind(to: SocketAddress(unixPath: path))
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": path])
        let started = ContinuousClock.now
        let sent = (0..<100).map { _ in notifier.notify("WATCHDOG=1") }
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(sent.first == true && sent.last == false, "the first arrive, the rest are dropped once the queue is full")
    }
}
