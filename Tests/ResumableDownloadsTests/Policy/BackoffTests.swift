import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Backoff and Retry-After")
struct BackoffTests {
    let backoff = Backoff(initial: .seconds(1), maximum: .seconds(30), maximumRetryAfter: .seconds(120))

    @Test func growsExponentiallyWithinJitterBounds() {
        for failures in 1...8 {
            let step = min(pow(2, Double(failures - 1)), 30)
            let low = backoff.delay(afterFailures: failures, jitter: 0)
            let high = backoff.delay(afterFailures: failures, jitter: 1)
            #expect(low == .milliseconds(Int64(step * 500)))
            #expect(high == .milliseconds(Int64(step * 1000)))
        }
        #expect(backoff.delay(afterFailures: 0, jitter: 1) == .zero)
        #expect(backoff.delay(afterFailures: 1000, jitter: 1) == .seconds(30))
    }

    @Test func retryAfterWinsButIsCapped() {
        #expect(backoff.delay(afterFailures: 5, retryAfter: .seconds(3), jitter: 1) == .seconds(3))
        #expect(backoff.delay(afterFailures: 1, retryAfter: .seconds(86_400), jitter: 1) == .seconds(120))
        #expect(backoff.delay(afterFailures: 1, retryAfter: nil, jitter: 1) == .seconds(1))
    }

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
}
