import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// IMF-fixdate and the two obsolete HTTP date forms (RFC 9110 §5.6.7), always GMT.
///
/// Parsed by hand: the fixed English names and the fixed layout need no locale, and Foundation's
/// DateFormatter would link ICU into every binary for three header formats.
package enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let shortDays = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    private static let longDays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT` or
    /// `Sun Nov  6 08:49:37 1994`; nil for anything else.
    package static func parse(_ text: String) -> Date? {
        let lower = text.lowercased()
        if let comma = lower.firstIndex(of: ",") {
            let day = String(lower[..<comma])
            let rest = lower[lower.index(after: comma)...].split(separator: " ", omittingEmptySubsequences: true)
            if shortDays.contains(day), rest.count == 5, rest[4] == "gmt" {
                // IMF-fixdate: dd MMM yyyy HH:mm:ss GMT
                guard rest[0].count == 2, rest[2].count == 4, let mday = number(rest[0]), let month = month(rest[1]),
                      let year = number(rest[2]), let time = clock(rest[3]) else { return nil }
                return date(year: year, month: month, day: mday, time: time)
            }
            if longDays.contains(day), rest.count == 3, rest[2] == "gmt" {
                // RFC 850: dd-MMM-yy HH:mm:ss GMT; a two-digit year more than 50 years ahead
                // is in the past century (RFC 9110 §5.6.7).
                let parts = rest[0].split(separator: "-", omittingEmptySubsequences: false)
                guard parts.count == 3, parts[0].count == 2, parts[2].count == 2, let mday = number(parts[0]),
                      let month = month(parts[1]), let shortYear = number(parts[2]), let time = clock(rest[1]) else { return nil }
                var year = 2000 + shortYear
                if year > currentYear() + 50 { year -= 100 }
                return date(year: year, month: month, day: mday, time: time)
            }
            return nil
        }
        // asctime: EEE MMM d HH:mm:ss yyyy (the day is space-padded)
        let parts = lower.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 5, shortDays.contains(String(parts[0])), let month = month(parts[1]),
              (1...2).contains(parts[2].count), let mday = number(parts[2]), let time = clock(parts[3]),
              parts[4].count == 4, let year = number(parts[4]) else { return nil }
        return date(year: year, month: month, day: mday, time: time)
    }

    /// A date's digits through `HTTPWire` (`Int("+6")` is 6, and such a day once passed).
    private static func number(_ text: Substring) -> Int? {
        HTTPWire.digits(text).flatMap { Int(exactly: $0) }
    }

    private static func month(_ name: Substring) -> Int? {
        months.firstIndex(of: String(name)).map { $0 + 1 }
    }

    /// `HH:mm:ss` as (hour, minute, second).
    private static func clock(_ text: Substring) -> (Int, Int, Int)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ $0.count == 2 }),
              let hour = number(parts[0]), let minute = number(parts[1]), let second = number(parts[2]),
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
