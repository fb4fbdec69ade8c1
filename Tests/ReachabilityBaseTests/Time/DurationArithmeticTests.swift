import Testing
@testable import ReachabilityBase

@Suite("Duration arithmetic")
struct DurationArithmeticTests {
    @Test func millisecondsSaturateInsteadOfTrapping() {
        #expect(Duration.milliseconds(1500).milliseconds == 1500)
        #expect(Duration.microseconds(1999).milliseconds == 1)
        #expect(Duration.seconds(Int64.max).milliseconds == .max)
        #expect((Duration.zero - .seconds(Int64.max)).milliseconds == .min)
        #expect(Duration.microseconds(1001).millisecondsRoundedUp == 2)
        #expect(Duration.milliseconds(3).millisecondsRoundedUp == 3)
    }

    @Test(arguments: [Double.nan, -1, -Double.infinity, 0])
    func clampingGivesZeroBelow(value: Double) {
        #expect(Duration(clampingTimeInterval: value) == .zero)
    }

    @Test(arguments: [Double.infinity, 1e300, 9e18, 1e16, Double.greatestFiniteMagnitude])
    func clampingGivesTheMaximumAbove(value: Double) {
        #expect(Duration(clampingTimeInterval: value) == .maximumCountable)
    }

    @Test func scalingIsToTheMicrosecondAndClamped() {
        #expect(Duration.milliseconds(500).scaled(by: 0.1) == .milliseconds(50))
        #expect(Duration.seconds(1).scaled(by: 1e300) == .maximumCountable)
        #expect(Duration.seconds(1).scaled(by: .nan) == .zero)
        #expect(Duration.seconds(2).timeInterval == 2)
    }

    @Test(arguments: [(Duration.seconds(30), "30"), (.milliseconds(500), "0.5"), (.milliseconds(1), "0.001"),
                      (.milliseconds(1250), "1.25"), (.zero, "0"), (.seconds(86_400), "86400")] as [(Duration, String)])
    func formattedSecondsAreExact(duration: Duration, text: String) {
        #expect(duration.formattedSeconds == text)
    }
}

@Suite("token bucket")
struct TokenBucketTests {
    @Test func aBurstThenOnePerInterval() {
        var bucket = TokenBucket(burst: 2, interval: .milliseconds(500))
        let start = ContinuousClock.now
        #expect(bucket.take(at: start) == nil)
        #expect(bucket.take(at: start) == nil)
        #expect(bucket.take(at: start) == start + .milliseconds(500))
        #expect(bucket.take(at: start + .milliseconds(250)) == start + .milliseconds(500))
        #expect(bucket.take(at: start + .milliseconds(500)) == nil)
        // A quarter interval later, a quarter token is back: the next is due in three quarters.
        #expect(bucket.take(at: start + .milliseconds(625)) == start + .milliseconds(1000))
        #expect(bucket.take(at: start + .seconds(10)) == nil)
        #expect(bucket.take(at: start + .seconds(10)) == nil)
        #expect(bucket.take(at: start + .seconds(10)) != nil, "refills to the burst, no more")
    }

    @Test func aRefundGivesOneTokenBackNoMoreThanTheBurst() {
        var bucket = TokenBucket(burst: 2, interval: .seconds(10))
        let now = ContinuousClock.now
        #expect(bucket.take(at: now) == nil && bucket.take(at: now) == nil)
        #expect(bucket.take(at: now) != nil)
        bucket.refund()
        #expect(bucket.take(at: now) == nil, "the refunded token")
        bucket.refund()
        bucket.refund()
        bucket.refund()
        #expect(bucket.take(at: now) == nil && bucket.take(at: now) == nil && bucket.take(at: now) != nil, "refunds stop at the burst")
    }

    @Test func noIntervalIsNoLimit() {
        var bucket = TokenBucket(burst: 1, interval: .zero)
        let now = ContinuousClock.now
        for _ in 0..<10 { #expect(bucket.take(at: now) == nil) }
        #expect(TokenBucket(burst: 0, interval: .seconds(1)).burst == 1)
    }
}
