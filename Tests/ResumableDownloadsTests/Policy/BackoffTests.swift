import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Backoff")
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
}
