import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
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
}
