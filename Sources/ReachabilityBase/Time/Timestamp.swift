import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The one timestamp format of logs and event lines: ISO 8601 in UTC with milliseconds,
/// `2026-11-30T07:02:39.726Z`.
///
/// Formatted by hand from `gmtime_r`: Foundation's formatters cost a calendar (and, outside
/// FoundationEssentials, ICU) per call, and a line of the monitor's output should not.
package enum Timestamp {
    /// `date` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    package static func iso8601(_ date: Date) -> String {
        let since1970 = date.timeIntervalSince1970
        var seconds = time_t(since1970.rounded(.down))
        var milliseconds = Int(((since1970 - Double(seconds)) * 1000).rounded(.down))
        if milliseconds >= 1000 { seconds += 1; milliseconds -= 1000 }   // rounding at the edge
        var parts = tm()
        gmtime_r(&seconds, &parts)
        var text = ""
        text.reserveCapacity(24)
        append(Int(parts.tm_year) + 1900, width: 4, to: &text)
        text += "-"
        append(Int(parts.tm_mon) + 1, width: 2, to: &text)
        text += "-"
        append(Int(parts.tm_mday), width: 2, to: &text)
        text += "T"
        append(Int(parts.tm_hour), width: 2, to: &text)
        text += ":"
        append(Int(parts.tm_min), width: 2, to: &text)
        text += ":"
        append(Int(parts.tm_sec), width: 2, to: &text)
        text += "."
        append(milliseconds, width: 3, to: &text)
        text += "Z"
        return text
    }

    /// Appends `value` in decimal, left-padded with zeros to `width` digits.
    package static func append(_ value: Int, width: Int, to text: inout String) {
        let digits = String(value)
        if digits.count < width { text += String(repeating: "0", count: width - digits.count) }
        text += digits
    }
}
