import FoundationEssentials
import LinuxReachability
import Synchronization
import ReachabilityBase

/// When a transfer that stops receiving is suspected dead: after a silence several times longer
/// than the longest gap between reads seen over the last several seconds (its recent pace),
/// never sooner than `minimum` (about a second: a fast transfer is suspected then, a slow or
/// bursty server gets proportionally longer), never later than `maximum`, and twice as late
/// after each false alarm on this transfer. Pure.
///
/// A transfer has no pace until it has shown one: while a silence starts within `learningPeriod`
/// of the first body byte, it must last at least `learningMinimum`. Rate limiters that work by
/// the second (lighttpd's `connection.kbytes-per-second`, nginx's `limit_rate`) send a second's
/// quota at once and then nothing for up to a second; judged against the bare minimum, that first
/// silence looked like a stall, and the race it started won at once (a new connection gets a new
/// quota), so the rhythm was never learned and every second cost another range request.
struct StallDetector: Sendable, Hashable {
    typealias Instant = ContinuousClock.Instant
    /// How much longer than the longest recent gap a silence must last.
    static let gapFactor = 4
    /// Gaps older than two of these windows are forgotten.
    static let window: Duration = .seconds(5)
    /// How long after its first body byte a transfer is still learning its pace.
    static let learningPeriod: Duration = .seconds(3)

    var minimum: Duration
    var maximum: Duration
    /// The shortest suspicion while learning: longer than a per-second limiter's silence.
    var learningMinimum: Duration
    private(set) var lastByteAt: Instant
    private var windowStart: Instant
    private var firstByteAt: Instant?
    private var currentMaximumGap: Duration = .zero
    private var previousMaximumGap: Duration = .zero
    private var falseAlarms = 0

    init(minimum: Duration, maximum: Duration, now: Instant) {
        self.minimum = minimum
        self.maximum = maximum
        learningMinimum = max(minimum, minimum * 2)
        lastByteAt = now
        windowStart = now
    }

    /// Bytes arrived at `now`.
    mutating func bytesArrived(at now: Instant) {
        if firstByteAt == nil {
            // The wait for the first byte is the answer's latency, not a gap of the body.
            firstByteAt = now
            windowStart = now
            lastByteAt = now
            return
        }
        if now - windowStart >= Self.window {
            previousMaximumGap = now - windowStart >= Self.window * 2 ? .zero : currentMaximumGap
            currentMaximumGap = .zero
            windowStart = now
        }
        currentMaximumGap = max(currentMaximumGap, now - lastByteAt)
        lastByteAt = now
    }

    /// Receiving starts (again) at `now` without the pause counting as a gap (response start,
    /// our own backpressure or rate limit released).
    mutating func restart(at now: Instant) { lastByteAt = now }

    /// The old connection turned out alive: be slower to suspect it again.
    mutating func falseAlarm() { falseAlarms = min(falseAlarms + 1, 6) }

    /// Whether the silence that began at the last byte began while the pace was still unknown.
    var isLearning: Bool { firstByteAt.map { lastByteAt - $0 < Self.learningPeriod } ?? true }

    /// The silence after which the transfer is suspected.
    var interval: Duration {
        let floor = isLearning ? learningMinimum : minimum
        let paced = max(floor, max(currentMaximumGap, previousMaximumGap) * Self.gapFactor) * (1 << falseAlarms)
        return min(paced, maximum)
    }

    /// When the transfer is suspected if nothing arrives.
    var deadline: Instant { lastByteAt + interval }
}
