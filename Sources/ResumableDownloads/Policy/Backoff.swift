import FoundationEssentials
import LinuxReachability
import ReachabilityBase
#if canImport(Glibc)
import Glibc
#endif

/// Exponential backoff with jitter, and `Retry-After` parsing.
struct Backoff: Sendable, Hashable {
    /// Delay before the first backed-off retry.
    var initial: Duration
    /// Upper bound for any computed delay.
    var maximum: Duration
    /// Upper bound for a server's `Retry-After` (a hostile server must not park us for a day).
    var maximumRetryAfter: Duration

    /// The delay before retry number `failures` (1-based count of consecutive failures):
    /// `initial * 2^(failures-1)` capped at `maximum`, scaled by `jitter` in 0.5...1.0
    /// ("equal jitter": never less than half the step, so retries still spread out).
    func delay(afterFailures failures: Int, jitter: Double) -> Duration {
        guard failures > 0 else { return .zero }
        let exponent = min(failures - 1, 30)
        let base = min(initial.timeInterval * Double(1 << exponent), maximum.timeInterval)
        let factor = 0.5 + 0.5 * min(max(jitter, 0), 1)
        return Duration(clampingTimeInterval: base * factor)
    }

    /// The delay for an HTTP status answer: the server's `Retry-After` when present (capped),
    /// otherwise the jittered backoff.
    func delay(afterFailures failures: Int, retryAfter: Duration?, jitter: Double) -> Duration {
        if let retryAfter { return min(max(retryAfter, .zero), maximumRetryAfter) }
        return delay(afterFailures: failures, jitter: jitter)
    }
}

/// When to try a server again while it does not answer on a working path (refused, reset,
/// timed out, DNS failing): quickly at first, since most such failures are blips (a restart, a
/// failover), then at a steady, cheap pace that still notices the server's return within a
/// fraction of a second, slowing down only after minutes. Shared by every download of a host, so
/// the pace is per host, however many downloads wait.
///
/// A server that comes back at a random moment is seen at the next probe, so the wait after its
/// return is half the spacing on average, whatever the schedule: the cheapest schedule for a given
/// rate is an even one. So once settled, probes are exactly `interval` apart, and they are held to
/// one per `interval` on average from the start of the wait, the attempt that failed and the quick
/// first probe included: attempt number k of a wait starts no earlier than k intervals (plus a
/// small random phase) after it began. With 500 ms that is at most two attempts a second over any
/// wait, and a server that is back is noticed 0.25 s later on average.
struct ServerWaitSchedule: Sendable, Hashable {
    /// Delay before the first probe after the server stopped answering.
    var firstProbe: Duration = .milliseconds(100)
    /// Spacing between probe starts once settled, and the average spacing over the whole wait.
    var interval: Duration = .milliseconds(500)
    /// After waiting this long, probe every `slowInterval`...
    var slowAfter: Duration = .seconds(120)
    var slowInterval: Duration = .seconds(1)
    /// ...and after this long, every `slowestInterval`.
    var slowestAfter: Duration = .seconds(600)
    var slowestInterval: Duration = .seconds(2)
    /// Spread, as a share of the interval: each wait's probes are offset by a random phase of up
    /// to `jitter * interval` (0.1: 0-50 ms), and the slow intervals vary by ±`jitter`, so many
    /// clients of one server do not probe in lockstep. A phase rather than a jittered spacing keeps
    /// the settled probes evenly spaced, which is what keeps the average wait at half the interval.
    var jitter: Double = 0.1

    /// The spacing before the probe that follows `probesSoFar` probes, after `waited` of waiting;
    /// `random` in 0...1. For the settled phase this is the spacing from the previous probe's
    /// start; `due(attempt:phase:)` is the floor that keeps the average.
    func delay(afterProbes probesSoFar: Int, waited: Duration, random: Double) -> Duration {
        if probesSoFar == 0 { return firstProbe }
        let base = settledInterval(waited: waited)
        guard base > interval else { return base }
        let factor = 1 - jitter + 2 * jitter * min(max(random, 0), 1)
        return base.scaled(by: factor)
    }

    /// How long after the start of a wait its attempt number `attempt` (1-based, the failed
    /// attempt that began the wait being the first) may start at the earliest: `attempt`
    /// intervals plus the wait's phase (`random` in 0...1, drawn once per wait), so that any
    /// stretch from the start of the wait holds at most one attempt per interval on average.
    func earliestStart(ofAttempt attempt: Int, random: Double) -> Duration {
        interval * attempt + phase(random: random)
    }

    /// The wait's random phase: 0 to `jitter * interval`.
    func phase(random: Double) -> Duration {
        interval.scaled(by: jitter * min(max(random, 0), 1))
    }

    /// The settled spacing after `waited` of waiting.
    func settledInterval(waited: Duration) -> Duration {
        if waited >= slowestAfter { return slowestInterval }
        if waited >= slowAfter { return slowInterval }
        return interval
    }

    /// How long a probe may take to connect: 90 % of the spacing (`1 - jitter`; a probe that has
    /// not connected by the time the next is due is as good as lost, and its SYN would only be
    /// retransmitted after a second anyway; ending it just before the next is due keeps probes of
    /// a blackholed server on the interval rather than on interval + timeout slack), but never
    /// less than four connect round trips seen on this host, nor less than 2 s before any
    /// connection to the host succeeded (so a distant server is not cut off before it could
    /// answer).
    func connectTimeout(waited: Duration, connectTime: Duration?) -> Duration {
        let settled = settledInterval(waited: waited)
        guard let connectTime else { return max(settled, .seconds(2)) }
        let beforeTheNext = settled.scaled(by: 1 - jitter)
        return max(beforeTheNext, connectTime * 4)
    }
}

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
enum RetryAfter {
    /// Parses the header relative to `now`; nil when malformed. Dates in the past give zero.
    static func parse(_ value: String, now: Date = Date()) -> Duration? {
        let text = value.trimmingWhitespace()
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            guard let seconds = Int64(text) else { return nil }
            return .seconds(seconds)
        }
        guard let date = HTTPDate.parse(text) else { return nil }
        let interval = date.timeIntervalSince(now)
        return Duration(clampingTimeInterval: interval)
    }
}

/// IMF-fixdate and the two obsolete HTTP date forms (RFC 9110 §5.6.7), always GMT.
///
/// Parsed by hand: the fixed English names and the fixed layout need no locale, and Foundation's
/// DateFormatter would link ICU into every binary for three header formats.
enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let shortDays = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    private static let longDays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT` or
    /// `Sun Nov  6 08:49:37 1994`; nil for anything else.
    static func parse(_ text: String) -> Date? {
        let lower = text.lowercased()
        if let comma = lower.firstIndex(of: ",") {
            let day = String(lower[..<comma])
            let rest = lower[lower.index(after: comma)...].split(separator: " ", omittingEmptySubsequences: true)
            if shortDays.contains(day), rest.count == 5, rest[4] == "gmt" {
                // IMF-fixdate: dd MMM yyyy HH:mm:ss GMT
                guard rest[0].count == 2, rest[2].count == 4, let mday = Int(rest[0]), let month = month(rest[1]),
                      let year = Int(rest[2]), let time = clock(rest[3]) else { return nil }
                return date(year: year, month: month, day: mday, time: time)
            }
            if longDays.contains(day), rest.count == 3, rest[2] == "gmt" {
                // RFC 850: dd-MMM-yy HH:mm:ss GMT; a two-digit year more than 50 years ahead
                // is in the past century (RFC 9110 §5.6.7).
                let parts = rest[0].split(separator: "-", omittingEmptySubsequences: false)
                guard parts.count == 3, parts[0].count == 2, parts[2].count == 2, let mday = Int(parts[0]),
                      let month = month(parts[1]), let shortYear = Int(parts[2]), let time = clock(rest[1]) else { return nil }
                var year = 2000 + shortYear
                if year > currentYear() + 50 { year -= 100 }
                return date(year: year, month: month, day: mday, time: time)
            }
            return nil
        }
        // asctime: EEE MMM d HH:mm:ss yyyy (the day is space-padded)
        let parts = lower.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 5, shortDays.contains(String(parts[0])), let month = month(parts[1]),
              (1...2).contains(parts[2].count), let mday = Int(parts[2]), let time = clock(parts[3]),
              parts[4].count == 4, let year = Int(parts[4]) else { return nil }
        return date(year: year, month: month, day: mday, time: time)
    }

    private static func month(_ name: Substring) -> Int? {
        months.firstIndex(of: String(name)).map { $0 + 1 }
    }

    /// `HH:mm:ss` as (hour, minute, second).
    private static func clock(_ text: Substring) -> (Int, Int, Int)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ $0.count == 2 && $0.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }),
              let hour = Int(parts[0]), let minute = Int(parts[1]), let second = Int(parts[2]),
              hour < 24, minute < 60, second <= 60 else { return nil }
        return (hour, minute, second)
    }

    private static func date(year: Int, month: Int, day: Int, time: (Int, Int, Int)) -> Date? {
        guard (1...31).contains(day), (1970...9999).contains(year) else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(time.0)
        parts.tm_min = Int32(time.1)
        parts.tm_sec = Int32(time.2)
        let seconds = timegm(&parts)
        // timegm normalises 31 Feb into March; a date that moved was not a real date.
        guard seconds != -1, parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        return Date(timeIntervalSince1970: Double(seconds))
    }

    private static func currentYear() -> Int {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        return Int(parts.tm_year) + 1900
    }
}
