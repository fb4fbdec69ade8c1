import Foundation
import Synchronization
import Testing
@testable import ReachabilityAgent
@testable import ReachabilityEvents

/// `limit-rate=` lines (issue 32 item 2): parsed once, evaluated at any hour with a test clock.
@Suite struct AgentRateLimitPolicyTests {
    static let mebibyte: Int64 = 1 << 20
    // Days: 0 Sunday, 1 Monday ... 6 Saturday.

    func policy(_ lines: String...) throws -> AgentRateLimitPolicy {
        let text = lines.map { "limit-rate=\($0)" }.joined(separator: "\n")
        return try AgentSettings.parse(text, base: AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true),
                                       path: "agent.conf").rateLimit
    }

    @Test func theFirstMatchingWindowWinsAndTheOutsideValueHoldsElsewhere() throws {
        let policy = try policy("2M 09:00-17:00 mon-fri", "none 12:00-13:00", "8m 00:00-24:00 sat,sun", "500k")
        #expect(policy.limit(weekday: 1, minute: 9 * 60) == .init(bytesPerSecond: 2 * Self.mebibyte, window: policy.rules[0].window))
        #expect(policy.limit(weekday: 5, minute: 16 * 60 + 59).bytesPerSecond == 2 * Self.mebibyte)
        #expect(policy.limit(weekday: 5, minute: 17 * 60).bytesPerSecond == 500 << 10, "17:00 is outside 09:00-17:00")
        // 12:30 on a Monday is in the first window too: it comes first.
        #expect(policy.limit(weekday: 1, minute: 12 * 60 + 30).bytesPerSecond == 2 * Self.mebibyte)
        #expect(policy.limit(weekday: 6, minute: 12 * 60 + 30) == .init(bytesPerSecond: nil, window: policy.rules[1].window))
        #expect(policy.limit(weekday: 0, minute: 8 * 60).bytesPerSecond == 8 * Self.mebibyte)
        #expect(policy.limit(weekday: 3, minute: 3 * 60) == .init(bytesPerSecond: 500 << 10, window: nil))
        #expect(policy.rules[0].window.description == "09:00-17:00 mon-fri")
        #expect(policy.rules[2].window.description == "00:00-24:00 sun,sat")
        #expect(policy.rules[1].window.description == "12:00-13:00")
    }

    @Test func aWindowPastMidnightBelongsToTheDayItStarts() throws {
        let policy = try policy("1m 22:00-06:00 fri")
        #expect(policy.limit(weekday: 5, minute: 23 * 60).bytesPerSecond == Self.mebibyte)
        #expect(policy.limit(weekday: 6, minute: 5 * 60 + 59).bytesPerSecond == Self.mebibyte, "Saturday morning is Friday night's")
        #expect(policy.limit(weekday: 6, minute: 6 * 60).bytesPerSecond == nil)
        #expect(policy.limit(weekday: 5, minute: 5 * 60).bytesPerSecond == nil, "Friday morning is Thursday night's")
        let wrapping = try self.policy("1m 00:00-24:00 fri-mon")
        #expect((0...6).filter { wrapping.limit(weekday: $0, minute: 600).bytesPerSecond != nil } == [0, 1, 5, 6])
    }

    @Test(arguments: [
        ("limit-rate=2Q", "agent.conf:1: limit-rate: expected bytes per second"),
        ("# ok\nlimit-rate=2M 9-17", "agent.conf:2: limit-rate: expected a time span like 09:00-17:00"),
        ("limit-rate=2M 09:00-25:00", "agent.conf:1: limit-rate: expected a time span"),
        ("limit-rate=2M 09:00-17:60", "agent.conf:1: limit-rate: expected a time span"),
        ("limit-rate=2M 09:00-17:00 weekdays", "agent.conf:1: limit-rate: expected days like mon-fri"),
        ("limit-rate=2M 09:00-17:00 mon extra", "agent.conf:1: limit-rate: expected RATE [HH:MM-HH:MM [DAYS]]"),
        ("limit-rate=", "agent.conf:1: expected key=value"),
        ("limit-rate=0", "agent.conf:1: limit-rate: expected bytes per second"),
    ])
    func aBadLineNamesItsFileAndLine(text: String, message: String) {
        do {
            _ = try AgentSettings.parse(text, base: AgentSettings(maximumConcurrentDownloads: 4, allowsExpensive: true),
                                        path: "agent.conf")
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.message.hasPrefix(message), "\(error.message)")
            #expect(error.kind == .configuration, "exit 78")
        }
    }

    @Test func theControlFollowsTheClockAndAgentLimitOverridesUntilAReload() throws {
        let policy = try policy("2M 09:00-17:00 mon-fri", "none")
        // A test clock: seconds since the epoch read as minutes of a Monday.
        let clock = Mutex<Int64>(8 * 60)
        let control = AgentRateLimitControl(policy: policy, now: { Date(timeIntervalSince1970: TimeInterval(clock.withLock { $0 })) },
                                            localTime: { (weekday: 1, minuteOfDay: Int($0)) })
        #expect(control.evaluate() == .init(bytesPerSecond: nil, window: nil, isOverride: false))
        #expect(control.state.text == "no limit")
        #expect(control.evaluate() == nil, "no change, no report")
        clock.withLock { $0 = 9 * 60 }
        let inWindow = try #require(control.evaluate())
        #expect(inWindow.text == "limit 2 MiB/s (09:00-17:00 mon-fri)")
        #expect(control.limit.bytesPerSecond == 2 << 20, "the transfers' limit follows")
        #expect(control.set(.rate(4 << 20))?.text == "limit 4 MiB/s (agent limit)")
        clock.withLock { $0 = 18 * 60 }
        #expect(control.evaluate() == nil, "agent limit holds past the window")
        #expect(control.limit.bytesPerSecond == 4 << 20)
        #expect(control.reload(policy)?.text == "no limit", "a reload goes back to the file")
        #expect(control.limit.bytesPerSecond == nil)
        #expect(control.set(.rate(nil))?.text == "no limit (agent limit)")
    }

    @Test func ratesPrintInWholeUnitsOrTenths() {
        typealias S = AgentRateLimitControl.State
        #expect(S.rateText(2 << 20) == "2 MiB/s")
        #expect(S.rateText(3 << 19) == "1.5 MiB/s")
        #expect(S.rateText(500 << 10) == "500 KiB/s")
        #expect(S.rateText(100) == "100 B/s")
        #expect(S.rateText(1 << 30) == "1 GiB/s")
    }
}
