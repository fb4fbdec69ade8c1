import FoundationEssentials
import Testing
@testable import ReachabilityBase

/// `Retry-After` and the three HTTP-date forms, read through HTTPWire.
@Suite("Retry-After and HTTP dates")
struct HTTPDateTests {
    @Test func parsesRetryAfterForms() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)   // Tue, 14 Nov 2023 22:13:20 GMT
        #expect(RetryAfter.parse("120", now: now) == .seconds(120))
        #expect(RetryAfter.parse(" 0 ", now: now) == .zero)
        #expect(RetryAfter.parse("Tue, 14 Nov 2023 22:13:50 GMT", now: now) == .seconds(30))
        #expect(RetryAfter.parse("Tuesday, 14-Nov-23 22:13:50 GMT", now: now) == .seconds(30))
        #expect(RetryAfter.parse("Tue Nov 14 22:13:50 2023", now: now) == .seconds(30))
        #expect(RetryAfter.parse("Tue, 14 Nov 2023 22:00:00 GMT", now: now) == .zero)
        #expect(RetryAfter.parse("-5", now: now) == nil)
        #expect(RetryAfter.parse("soon", now: now) == nil)
        #expect(RetryAfter.parse("", now: now) == nil)
    }

    /// The hand-written HTTP-date parser against the RFC 9110 §5.6.7 examples and bad input.
    @Test func parsesHTTPDatesByHand() {
        let sunday = Date(timeIntervalSince1970: 784_111_777)   // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == sunday)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == sunday)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == sunday)
        #expect(HTTPDate.parse("sun, 06 nov 1994 08:49:37 gmt") == sunday)   // names are case-insensitive
        #expect(HTTPDate.parse("Thu, 29 Feb 2024 00:00:00 GMT") == Date(timeIntervalSince1970: 1_709_164_800))
        for bad in ["Sun, 30 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 PST",
                    "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT",
                    "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37", "06 Nov 1994 08:49:37 GMT",
                    "Sun, 06 Nov 1994 08:4a:37 GMT", "Sun, 06 Nov 99999 08:49:37 GMT", ""] {
            #expect(HTTPDate.parse(bad) == nil, "\(bad)")
        }
    }

    /// Hostile numbers in every field are no date (they once went through `Int(`).
    @Test("hostile numbers are no date or delay", arguments: [
        "Sun, +6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov +994 08:49:37 GMT", "Sun, 06 Nov 1994 +8:49:37 GMT",
        "Sun, 06 Nov 1994 08:-9:37 GMT", "Sunday, +6-Nov-94 08:49:37 GMT", "Sunday, 06-Nov-+4 08:49:37 GMT",
        "Sun Nov +6 08:49:37 1994", "Sun Nov  6 08:49:37 +994", "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1e16 08:49:37 GMT", "Sun, 06 Nov inf 08:49:37 GMT", "Sun, 06 Nov nan 08:49:37 GMT",
    ])
    func hostileDates(text: String) {
        #expect(HTTPDate.parse(text) == nil)
        #expect(RetryAfter.parse(text) == nil)
    }

    @Test("Retry-After seconds: digits alone", arguments: ["+120", "-1", "1e16", "9e18", "1e300", "inf", "nan", "1.5", "0x10",
                                                           "99999999999999999999"])
    func hostileSeconds(text: String) {
        #expect(RetryAfter.parse(text) == nil)
    }
}
