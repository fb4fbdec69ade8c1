import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Progress rate and time remaining")
struct RateEstimatorTests {
    @Test func timeRemainingIsNilWhenTheRateTellsNothing() {
        #expect(RateEstimator.timeRemaining(bytes: 1000, bytesPerSecond: 500) == .seconds(2))
        #expect(RateEstimator.timeRemaining(bytes: 0, bytesPerSecond: 500) == .zero)
        #expect(RateEstimator.timeRemaining(bytes: -1, bytesPerSecond: 500) == nil)
        #expect(RateEstimator.timeRemaining(bytes: 1000, bytesPerSecond: 0) == nil)
        #expect(RateEstimator.timeRemaining(bytes: 1000, bytesPerSecond: 0.5) == nil)
        #expect(RateEstimator.timeRemaining(bytes: 1000, bytesPerSecond: .nan) == nil)
        #expect(RateEstimator.timeRemaining(bytes: .max, bytesPerSecond: 1) == nil)
    }

    /// A server waited for: every failed probe reports the same offset, the smoothed rate decays
    /// towards zero, and the time remaining must not trap (it did, after about 100 probes).
    @Test func aLongWaitAtTheSameOffsetDoesNotTrap() {
        var estimator = RateEstimator()
        var now = ContinuousClock.now
        let total: Int64 = 128 << 20
        var offset: Int64 = 0
        for _ in 0..<20 {
            offset += 4 << 20
            now += .milliseconds(100)
            _ = estimator.add(bytes: offset, at: now)
        }
        var rate = 0.0
        for _ in 0..<2000 {
            now += .milliseconds(550)
            rate = estimator.add(bytes: offset, at: now)
            _ = RateEstimator.timeRemaining(bytes: total - offset, bytesPerSecond: rate)
        }
        #expect(rate < 1)
        #expect(RateEstimator.timeRemaining(bytes: total - offset, bytesPerSecond: rate) == nil)
    }
}
