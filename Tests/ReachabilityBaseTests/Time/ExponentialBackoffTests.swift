import Testing
@testable import ReachabilityBase

/// The one back-off: doubling from the first delay, capped, never trapping on a long run of failures.
@Suite("Exponential backoff")
struct ExponentialBackoffTests {
    let backoff = ExponentialBackoff(initial: .seconds(1), maximum: .seconds(30))

    @Test func doublesUpToTheMaximum() {
        #expect((0...7).map { backoff.delay(afterFailures: $0) }
                == [.zero, .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30)])
    }

    @Test("a long run of failures stays at the maximum", arguments: [31, 64, 1_000, Int.max])
    func manyFailures(failures: Int) {
        #expect(backoff.delay(afterFailures: failures) == .seconds(30))
    }

    @Test("a huge delay from a caller's configuration saturates instead of trapping")
    func hugeDelays() {
        let huge = ExponentialBackoff(initial: .seconds(Int64.max), maximum: .seconds(Int64.max))
        #expect(huge.delay(afterFailures: 40) == .seconds(Int64.max))
        #expect(huge.delay(after: .seconds(Int64.max)) == .seconds(Int64.max))
        let tiny = ExponentialBackoff(initial: .nanoseconds(1), maximum: .seconds(Int64.max))
        #expect(tiny.delay(afterFailures: Int.max) == .seconds(Int64.max))
        #expect(ExponentialBackoff(initial: .zero, maximum: .seconds(1)).delay(afterFailures: 1_000) == .zero)
    }

    @Test func negativeCountsAreNoFailure() {
        #expect(backoff.delay(afterFailures: -1) == .zero)
        #expect(backoff.delay(afterFailures: Int.min) == .zero)
    }

    @Test func stepsFromThePreviousDelayFollowTheSameSequence() {
        var previous: Duration?
        for failures in 1...10 {
            let next = backoff.delay(after: previous)
            #expect(next == backoff.delay(afterFailures: failures))
            previous = next
        }
        #expect(backoff.delay(after: .seconds(29)) == .seconds(30))
    }
}
