import Testing
@testable import ResumableDownloads

/// Write-back pacing decided without a file: which ranges start and which are waited for.
@Suite("Write-back window")
struct WriteBackWindowTests {
    @Test func startsEachFullWindowAndWaitsForThePreviousOne() {
        var pacing = WriteBackWindow(window: 100)
        #expect(pacing.written(upTo: 60) == [])
        #expect(pacing.written(upTo: 130) == [.start(0..<130)])
        #expect(pacing.written(upTo: 200) == [])
        #expect(pacing.written(upTo: 230) == [.start(130..<230), .wait(0..<130)])
        #expect(pacing.written(upTo: 400) == [.start(230..<400), .wait(130..<230)])
        // At most the started-but-not-waited window plus one growing window are dirty.
        #expect(pacing.started == 400 && pacing.settled == 230)
    }

    @Test func resumesFromTheCheckpointAndResetsOnRestart() {
        var pacing = WriteBackWindow(window: 100, from: 1_000)
        #expect(pacing.written(upTo: 1_050) == [])
        #expect(pacing.written(upTo: 1_100) == [.start(1_000..<1_100)])
        pacing.reset(to: 0)
        #expect(pacing.written(upTo: 99) == [])
        #expect(pacing.written(upTo: 100) == [.start(0..<100)])
        #expect(pacing.written(upTo: 250) == [.start(100..<250), .wait(0..<100)])
    }

    @Test func aWindowOfZeroStillProgresses() {
        var pacing = WriteBackWindow(window: 0)
        #expect(pacing.written(upTo: 1) == [.start(0..<1)])
        #expect(pacing.written(upTo: 2) == [.start(1..<2), .wait(0..<1)])
    }
}
