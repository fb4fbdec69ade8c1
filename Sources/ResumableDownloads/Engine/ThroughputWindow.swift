import ReachabilityBase

/// Bytes delivered over a sliding window, for decisions that compare rates measured at different
/// times (did a connection added a moment ago make the download faster?). Pure: time comes in.
///
/// Keeps the cumulative count at most every `resolution` for the last `span`; a rate over a
/// window interpolates the count at the window's start between the two samples around it.
struct ThroughputWindow: Sendable, Hashable {
    typealias Instant = ContinuousClock.Instant

    /// Samples closer than this are merged into one.
    static let resolution: Duration = .milliseconds(10)
    /// Samples older than this are dropped.
    static let span: Duration = .seconds(4)

    private var samples: [(time: Instant, total: Int64)] = []
    /// Bytes added over the window's whole life.
    private(set) var total: Int64 = 0

    init() {}

    /// `bytes` arrived at `now`.
    mutating func add(_ bytes: Int64, at now: Instant) {
        total += bytes
        if let last = samples.last, now - last.time < Self.resolution {
            samples[samples.count - 1].total = total
        } else {
            samples.append((now, total))
        }
        if let first = samples.first, now - first.time > Self.span + Self.span {
            samples.removeAll { now - $0.time > Self.span }
        }
    }

    /// Starts counting at `now` (a first sample with nothing delivered yet), so a window that
    /// begins before the first byte counts the silence too.
    mutating func mark(at now: Instant) {
        if samples.isEmpty { samples.append((now, total)) }
    }

    /// Bytes per second over the `window` ending at `now` (over the time since the first sample
    /// when that is shorter, but at least `minimumSpan`); zero when nothing was measured.
    func bytesPerSecond(over window: Duration, at now: Instant) -> Double {
        guard let first = samples.first, window > .zero else { return 0 }
        let start = max(now - window, first.time)
        let span = max(now - start, Self.minimumSpan)
        return Double(total - count(at: start)) / (Double(span.milliseconds) / 1000)
    }

    /// The shortest span a rate is computed over (a few bytes in a millisecond say nothing).
    static let minimumSpan: Duration = .milliseconds(50)

    /// The cumulative count at `time`, interpolated between samples.
    private func count(at time: Instant) -> Int64 {
        guard let index = samples.firstIndex(where: { $0.time >= time }) else { return total }
        guard index > 0 else { return samples[0].total }
        let before = samples[index - 1], after = samples[index]
        let span = Double((after.time - before.time).milliseconds)
        guard span > 0 else { return after.total }
        let share = Double((time - before.time).milliseconds) / span
        return before.total + Int64(Double(after.total - before.total) * share)
    }

    static func == (lhs: ThroughputWindow, rhs: ThroughputWindow) -> Bool {
        lhs.total == rhs.total && lhs.samples.map(\.time) == rhs.samples.map(\.time)
            && lhs.samples.map(\.total) == rhs.samples.map(\.total)
    }

    func hash(into hasher: inout Hasher) { hasher.combine(total) }
}
