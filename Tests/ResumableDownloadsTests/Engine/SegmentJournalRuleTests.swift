import Testing
@testable import ResumableDownloads

/// When a connection's bytes are handed over and journaled: by bytes (a budget shared by the
/// connections) and by time.
@Suite("Segment journal rule")
struct SegmentJournalRuleTests {
    @Test func theByteThresholdSharesTheBudgetBetweenTheConnections() {
        #expect(SegmentJournalRule.forConnections(1).bytes == 128 << 10)
        #expect(SegmentJournalRule.forConnections(2).bytes == 128 << 10)
        #expect(SegmentJournalRule.forConnections(4).bytes == 64 << 10)
        #expect(SegmentJournalRule.forConnections(6).bytes == 32 << 10)
        #expect(SegmentJournalRule.forConnections(16).bytes == 32 << 10)
        #expect(SegmentJournalRule.forConnections(0).bytes == 128 << 10)
        // What six connections can hold in memory at a kill stays within the budget.
        #expect(6 * SegmentJournalRule.forConnections(6).bytes <= SegmentJournalRule.budget)
    }

    @Test func bytesAreDueAtTheThresholdOrOnceTheyWaitedTheInterval() {
        let rule = SegmentJournalRule.forConnections(6)
        let start = ContinuousClock.now
        #expect(!rule.isDue(gathered: 0, since: start, now: start + .seconds(1)), "nothing gathered is never due")
        #expect(!rule.isDue(gathered: rule.bytes - 1, since: start, now: start))
        #expect(rule.isDue(gathered: rule.bytes, since: start, now: start))
        #expect(!rule.isDue(gathered: 1, since: start, now: start + .milliseconds(49)))
        #expect(rule.isDue(gathered: 1, since: start, now: start + .milliseconds(50)))
        #expect(rule.interval == .milliseconds(50))
    }
}
