#if SEGMENT_JOURNAL_AB
import FoundationEssentials
#endif

/// When a connection hands the bytes it received to the partial file, where they are written and
/// journaled (`BlockJournal` gets an entry after every write): by bytes and by time. Pure.
///
/// What a SIGKILL loses is what was not journaled yet: per connection, the bytes it gathered in
/// memory and the write queue behind them (the page cache keeps everything written). So the rule
/// bounds the bytes gathered per connection by a budget shared by the connections open
/// (`budget / connections`, 32-128 KiB: 32 KiB each for the default 6), and by time: bytes wait
/// at most `interval`, so a slow connection's progress is on record within 50 ms too. A single
/// connection keeps 128 KiB gathers (fewer, larger writes: measured as fast as 256 or 512 KiB,
/// while 16 KiB ones cost a quarter of the throughput).
struct SegmentJournalRule: Sendable, Hashable {
    /// Bytes gathered before they are handed over.
    var bytes: Int
    /// How long the first gathered byte may wait.
    var interval: Duration

    /// Bytes in memory per download, shared by its connections. 512 KiB (80 KiB each for six)
    /// left 0.72 MiB sent twice per kill (median, worst 1.16) with six connections open.
    static let budget = 256 << 10
    static let largest = 128 << 10
    static let smallest = 32 << 10
    static let defaultInterval: Duration = .milliseconds(50)

    /// The rule for one connection of `connections` (16 KiB steps).
    static func forConnections(_ connections: Int) -> SegmentJournalRule {
        #if SEGMENT_JOURNAL_AB
        if isSwitchedOffForBenchmark { return SegmentJournalRule(bytes: largest, interval: .seconds(3600)) }
        #endif
        let share = budget / max(1, connections) / (16 << 10) * (16 << 10)
        return SegmentJournalRule(bytes: min(largest, max(smallest, share)), interval: defaultInterval)
    }

    #if SEGMENT_JOURNAL_AB
    /// The throughput-cost A/B of this rule (issue 30: at most 3 %): a bench build only
    /// (`-Xswiftc -DSEGMENT_JOURNAL_AB`; `bench/segment_bench.py --journal-off`) reads
    /// `REACHABILITY_BENCH_SEGMENT_JOURNAL=off` and gives every connection 128 KiB gathers with no
    /// time bound, as before the rule. Not an option of any shipped build.
    static let isSwitchedOffForBenchmark = ProcessInfo.processInfo.environment["REACHABILITY_BENCH_SEGMENT_JOURNAL"] == "off"
    #endif

    /// A transfer of one connection.
    static let single = forConnections(1)

    /// Whether `gathered` bytes, the first of which arrived at `since`, are due now.
    func isDue(gathered: Int, since: ContinuousClock.Instant, now: ContinuousClock.Instant) -> Bool {
        gathered > 0 && (gathered >= bytes || now - since >= interval)
    }
}
