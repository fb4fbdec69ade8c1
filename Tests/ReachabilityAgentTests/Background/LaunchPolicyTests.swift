import Foundation
import Testing
@testable import ReachabilityAgent

/// When the agent starts a session's program: coalesced, one at a time, backing off.
@Suite("Launch policy")
struct LaunchPolicyTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static func at(_ seconds: TimeInterval) -> Date { start.addingTimeInterval(seconds) }

    @Test func eventsAreBatchedIntoOneLaunch() {
        var policy = LaunchPolicy()
        #expect(policy.eventsPending(now: Self.at(0)) == .wake(at: Self.at(1)))
        #expect(policy.eventsPending(now: Self.at(0.5)) == .wake(at: Self.at(1)), "a second event joins the batch")
        #expect(policy.timerFired(now: Self.at(0.9), pending: true, attachedNow: false) == .wake(at: Self.at(1)))
        #expect(policy.timerFired(now: Self.at(1), pending: true, attachedNow: false) == .launch)
        #expect(policy.launched(now: Self.at(1)) == .wake(at: Self.at(61)))
        #expect(policy.eventsPending(now: Self.at(2)) == nil, "no second launch while one runs")
        policy.attached()
        policy.drained()
        #expect(policy.launchEnded(nil, pending: false, attachedNow: false, now: Self.at(3)) == nil)
        #expect(!policy.isFailing && policy.launches == 1)
    }

    @Test func aProgramThatFailsAtOnceIsRetriedWithBackoff() {
        var policy = LaunchPolicy()
        _ = policy.eventsPending(now: Self.at(0))
        var now = Self.at(1)
        var gaps: [TimeInterval] = []
        for _ in 0..<12 {
            #expect(policy.timerFired(now: now, pending: true, attachedNow: false) == .launch)
            _ = policy.launched(now: now)
            guard case .wake(let next)? = policy.launchEnded("app exited with status 1", pending: true, attachedNow: false, now: now)
            else { Issue.record("no retry scheduled"); return }
            gaps.append(next.timeIntervalSince(now))
            #expect(policy.timerFired(now: next.addingTimeInterval(-0.1), pending: true, attachedNow: false) == .wake(at: next))
            now = next
        }
        #expect(gaps == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900])
        #expect(policy.isFailing && policy.consecutiveFailures == 12 && policy.lastFailure == "app exited with status 1")
        // Someone attaches and takes the events: the launcher is fine again.
        policy.attached()
        policy.drained()
        #expect(!policy.isFailing)
    }

    @Test func aLaunchThatNobodyAttachesWithinTheDeadlineFails() {
        var policy = LaunchPolicy()
        _ = policy.eventsPending(now: Self.at(0))
        _ = policy.timerFired(now: Self.at(1), pending: true, attachedNow: false)
        _ = policy.launched(now: Self.at(1))
        #expect(policy.launchEnded(nil, pending: true, attachedNow: false, now: Self.at(2)) == .wake(at: Self.at(3)),
                "a unit that started (systemctl exit 0) but whose program ended without taking the events")
        _ = policy.timerFired(now: Self.at(3), pending: true, attachedNow: false)
        _ = policy.launched(now: Self.at(3))
        #expect(policy.timerFired(now: Self.at(63), pending: true, attachedNow: false) == .wake(at: Self.at(65)))
        #expect(policy.lastFailure?.contains("no process attached") == true)
    }

    @Test func aProgramThatDetachesWithEventsPendingFails() {
        var policy = LaunchPolicy()
        _ = policy.eventsPending(now: Self.at(0))
        _ = policy.timerFired(now: Self.at(1), pending: true, attachedNow: false)
        _ = policy.launched(now: Self.at(1))
        policy.attached()
        #expect(policy.detached(pending: true, now: Self.at(2)) == .wake(at: Self.at(3)))
        #expect(policy.consecutiveFailures == 1)
        // Its exit after the detach changes nothing.
        #expect(policy.launchEnded("killed by signal 9", pending: true, attachedNow: false, now: Self.at(2)) == nil)
        #expect(policy.consecutiveFailures == 1)
    }

    @Test func aProcessAttachingOnItsOwnIsNotALaunch() {
        var policy = LaunchPolicy()
        _ = policy.eventsPending(now: Self.at(0))
        policy.attached()
        #expect(policy.timerFired(now: Self.at(1), pending: true, attachedNow: true) == nil)
        #expect(policy.detached(pending: true, now: Self.at(2)) == .wake(at: Self.at(3)), "left events: batch again")
        #expect(policy.launches == 0 && policy.consecutiveFailures == 0)
    }
}

/// Launch units and their instance names (systemd-escape's rules).
@Suite("systemd unit names")
struct SystemdUnitNameTests {
    @Test(arguments: [
        ("halftunes.service", true), ("halftunes@.service", true), ("fetch-news@.service", true), ("a.b_c:d.service", true),
        ("halftunes", false), (".service", false), ("-x.service", false), ("a b.service", false), ("a;b.service", false),
        ("a@b@.service", false), (String(repeating: "a", count: 250) + ".service", false),
    ])
    func names(_ name: String, isValid: Bool) {
        #expect((SystemdUnitName.problem(name) == nil) == isValid)
    }

    @Test func templatesGetTheEscapedIdentifier() {
        #expect(SystemdUnitName.unit("halftunes.service", for: "com.example.halftunes") == "halftunes.service")
        #expect(SystemdUnitName.unit("fetch@.service", for: "com.example.news") == "fetch@com.example.news.service")
        #expect(SystemdUnitName.escaped("a b/c-d.é") == "a\\x20b-c\\x2dd.\\xc3\\xa9")
        #expect(SystemdUnitName.escaped(".hidden") == "\\x2ehidden")
    }
}
