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
}
