import LinuxSystem
import ReachabilityBase

/// When in the week a `limit-rate=` line applies: a span of local time on some days
/// (`09:00-17:00 mon-fri`). A span that ends before it starts (`22:00-06:00`) runs past
/// midnight, and its part after midnight belongs to the day it started on.
package struct LimitWindow: Sendable, Hashable, CustomStringConvertible {
    /// Minutes since midnight; `end` is exclusive (`17:00` is not in `09:00-17:00`).
    package var start: Int
    package var end: Int
    /// The days it starts on, bit 0 Sunday ... bit 6 Saturday (all seven when none are named).
    package var days: UInt8

    package static let everyDay: UInt8 = 0x7F
    private static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    /// Whether local `weekday` (0 Sunday) and `minute` of the day fall in it.
    package func contains(weekday: Int, minute: Int) -> Bool {
        func startsOn(_ day: Int) -> Bool { days & (1 << UInt8((day + 7) % 7)) != 0 }
        if start < end { return startsOn(weekday) && minute >= start && minute < end }
        if start == end { return startsOn(weekday) }   // 00:00-00:00: the whole day
        return (startsOn(weekday) && minute >= start) || (startsOn(weekday - 1) && minute < end)
    }

    /// `09:00-17:00`, with the days when they are not all seven (`09:00-17:00 mon-fri`,
    /// `00:00-24:00 sun,sat`): runs of three or more days as a range, Sunday first.
    package var description: String {
        let span = "\(Self.clock(start))-\(Self.clock(end == 0 ? 1440 : end))"
        guard days != Self.everyDay else { return span }
        var items: [String] = []
        var day = 0
        while day < 7 {
            guard days & (1 << UInt8(day)) != 0 else { day += 1; continue }
            var last = day
            while last + 1 < 7, days & (1 << UInt8(last + 1)) != 0 { last += 1 }
            items += last - day >= 2 ? ["\(Self.dayNames[day])-\(Self.dayNames[last])"]
                : (day...last).map { Self.dayNames[$0] }
            day = last + 1
        }
        return span + " " + items.joined(separator: ",")
    }

    private static func clock(_ minutes: Int) -> String {
        let hours = minutes / 60, rest = minutes % 60
        return (hours < 10 ? "0" : "") + "\(hours):" + (rest < 10 ? "0" : "") + "\(rest)"
    }

    /// `HH:MM-HH:MM` (00:00 to 24:00), nil otherwise.
    static func span(_ text: Substring) -> (start: Int, end: Int)? {
        let ends = text.split(separator: "-", omittingEmptySubsequences: false)
        guard ends.count == 2, let start = minutes(ends[0]), let end = minutes(ends[1]), start < 1440 else { return nil }
        return (start, end == 1440 ? 0 : end)
    }

    private static func minutes(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 2, parts[1].count == 2,
              let hours = DecimalText.integer(parts[0]), let minutes = DecimalText.integer(parts[1]),
              (0...24).contains(hours), (0...59).contains(minutes), hours < 24 || minutes == 0 else { return nil }
        return Int(hours) * 60 + Int(minutes)
    }

    /// `mon-fri`, `sat,sun`, `mon,wed-fri`, `daily`: a set of days, nil otherwise.
    static func days(_ text: Substring) -> UInt8? {
        if text.lowercased() == "daily" { return everyDay }
        var days: UInt8 = 0
        for item in text.lowercased().split(separator: ",", omittingEmptySubsequences: false) {
            let ends = item.split(separator: "-", omittingEmptySubsequences: false)
            guard (1...2).contains(ends.count), let first = dayNames.firstIndex(of: String(ends[0])),
                  let last = dayNames.firstIndex(of: String(ends[ends.count - 1])) else { return nil }
            // `fri-mon` wraps over the weekend.
            var day = first
            while true {
                days |= 1 << UInt8(day)
                if day == last { break }
                day = (day + 1) % 7
            }
        }
        return days
    }
}

/// The agent's bandwidth schedule from `agent.conf` (issue 32 item 2): `limit-rate=` lines, each
/// a rate (`2M`, `500k`, or `none`) with an optional window; the first line whose window holds
/// the local time wins, and the line without a window (the last one given) applies outside every
/// window. Parsed once, evaluated with an injected clock. Pure.
package struct AgentRateLimitPolicy: Sendable, Hashable {
    /// One windowed line.
    package struct Rule: Sendable, Hashable {
        /// Bytes per second; nil is no limit.
        package var bytesPerSecond: Int64?
        package var window: LimitWindow
    }

    /// The limit in force at a moment, and the window that set it (nil: the outside value).
    package struct InForce: Sendable, Hashable {
        package var bytesPerSecond: Int64?
        package var window: LimitWindow?
    }

    /// Windowed lines in file order.
    package var rules: [Rule] = []
    /// The limit outside every window (nil: none).
    package var outside: Int64?

    package init(rules: [Rule] = [], outside: Int64? = nil) {
        self.rules = rules
        self.outside = outside
    }

    /// Whether the file set any limit at all.
    package var isEmpty: Bool { rules.isEmpty && outside == nil }

    /// The rates a line may give (1 byte/s to 1 PiB/s, as `--limit-rate`).
    package static let rate = ByteCount.rate(1...(1 << 50))

    /// Adds one `limit-rate=` value (`2M 09:00-17:00 mon-fri`, `none 22:00-06:00`, `4M`);
    /// throws the reason when it is not one.
    package mutating func add(_ value: some StringProtocol) throws(InvalidValue) {
        let words = String(value).split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard let first = words.first, words.count <= 3 else {
            throw InvalidValue(text: String(value), expectation: Self.expectation)
        }
        var bytesPerSecond: Int64?
        if first.lowercased() != "none" {
            do {
                bytesPerSecond = try Self.rate.parse(String(first))
            } catch {
                throw InvalidValue(text: String(first), expectation: Self.rate.expectation + ", or none")
            }
        }
        guard words.count > 1 else {
            outside = bytesPerSecond
            return
        }
        guard let span = LimitWindow.span(words[1]) else {
            throw InvalidValue(text: String(words[1]), expectation: "a time span like 09:00-17:00 (local time, 00:00 to 24:00)")
        }
        var days = LimitWindow.everyDay
        if words.count == 3 {
            guard let named = LimitWindow.days(words[2]) else {
                throw InvalidValue(text: String(words[2]), expectation: "days like mon-fri, sat,sun or daily")
            }
            days = named
        }
        rules.append(Rule(bytesPerSecond: bytesPerSecond, window: LimitWindow(start: span.start, end: span.end, days: days)))
    }

    private static let expectation = "RATE [HH:MM-HH:MM [DAYS]], like 2M 09:00-17:00 mon-fri"

    /// The limit at local `weekday` (0 Sunday) and `minute` of the day.
    package func limit(weekday: Int, minute: Int) -> InForce {
        if let rule = rules.first(where: { $0.window.contains(weekday: weekday, minute: minute) }) {
            return InForce(bytesPerSecond: rule.bytesPerSecond, window: rule.window)
        }
        return InForce(bytesPerSecond: outside, window: nil)
    }

    /// The limit at a wall-clock instant (seconds since the epoch), read as local time by
    /// `localTime` (the machine's time zone by default; tests give their own).
    package func limit(secondsSinceEpoch: Int64,
                       localTime: (Int64) -> (weekday: Int, minuteOfDay: Int)? = { LocalTime.weekdayAndMinute(secondsSinceEpoch: $0) }) -> InForce {
        guard !rules.isEmpty, let local = localTime(secondsSinceEpoch) else {
            return InForce(bytesPerSecond: outside, window: nil)
        }
        return limit(weekday: local.weekday, minute: local.minuteOfDay)
    }
}
