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
///
/// The wait between a response's head and its first body byte is its own case (`bodyStart`,
/// the learning minimum unless told otherwise). Through a proxy it is longer (`proxiedBodyStart`):
/// a caching proxy that widens a range to the whole object (squid's `range_offset_limit -1`)
/// answers a range at once with its head and sends the body only when its one fetch from the
/// origin reaches the range's start. That silence is the cache filling, not a stall: the head
/// proves the proxy has the origin's answer, and a race or a reconnect goes through the same
/// proxy, joins the same fetch and waits again (traced in docs/benchmarks.md: 597 of 1,190
/// requests through squid ended after the head alone, every two seconds). A direct connection
/// keeps the learning minimum, and a silence once the body flows is judged as before.
struct StallDetector: Sendable, Hashable {
    typealias Instant = ContinuousClock.Instant
    /// How much longer than the longest recent gap a silence must last.
    static let gapFactor = 4
    /// Gaps older than two of these windows are forgotten.
    static let window: Duration = .seconds(5)
    /// How long after its first body byte a transfer is still learning its pace.
    static let learningPeriod: Duration = .seconds(3)
    /// How long a response through a proxy may hold its body after its head before it is
    /// suspected: five times the direct bound, time for a cache filling at 20 MB/s to reach
    /// 200 MB into the object. A range further on is raced then (and each false alarm doubles
    /// the wait); the transfer's `maximum` (the stall timeout, 30 s) still ends a silent one.
    static let proxiedBodyStart: Duration = .seconds(10)

    var minimum: Duration
    var maximum: Duration
    /// The shortest suspicion while learning: longer than a per-second limiter's silence.
    var learningMinimum: Duration
    /// The shortest suspicion between the head and the first body byte.
    var bodyStart: Duration
    private(set) var lastByteAt: Instant
    private var windowStart: Instant
    private var firstByteAt: Instant?
    private var currentMaximumGap: Duration = .zero
    private var previousMaximumGap: Duration = .zero
    private var falseAlarms = 0

    /// `isProxied`: the transfer goes through a proxy, whose silence after a head is allowed
    /// `proxiedBodyStart`.
    init(minimum: Duration, maximum: Duration, now: Instant, isProxied: Bool = false) {
        self.minimum = minimum
        self.maximum = maximum
        learningMinimum = max(minimum, minimum * 2)
        bodyStart = isProxied ? max(learningMinimum, Self.proxiedBodyStart) : learningMinimum
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
        let floor = firstByteAt == nil ? bodyStart : isLearning ? learningMinimum : minimum
        let paced = max(floor, max(currentMaximumGap, previousMaximumGap) * Self.gapFactor) * (1 << falseAlarms)
        return min(paced, maximum)
    }

    /// When the transfer is suspected if nothing arrives.
    var deadline: Instant { lastByteAt + interval }
}
