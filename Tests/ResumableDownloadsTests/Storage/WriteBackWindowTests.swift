import Testing
@testable import ResumableDownloads

/// Write-back pacing decided without a file: which ranges start and which are waited for.
@Suite("Write-back window")
struct WriteBackWindowTests {
    @Test func startsEachFullWindowAndWaitsOnlyBeyondTheDepth() {
        var pacing = WriteBackWindow(window: 100, depth: 2)
        #expect(pacing.written(upTo: 60) == [])
        #expect(pacing.written(upTo: 130) == [.start(0..<130)])
        #expect(pacing.written(upTo: 200) == [])
        #expect(pacing.written(upTo: 230) == [.start(130..<230)])
        #expect(pacing.written(upTo: 400) == [.start(230..<400), .wait(0..<130)])
        #expect(pacing.written(upTo: 500) == [.start(400..<500), .wait(130..<230)])
        // Dirty: the two windows in flight plus what has not filled a window yet.
        #expect(pacing.dirtyBytes(writtenEnd: 550) == 550 - 230)
    }

    @Test func depthZeroWaitsForEachWindowAtOnce() {
        var pacing = WriteBackWindow(window: 100, depth: 0)
        #expect(pacing.written(upTo: 100) == [.start(0..<100), .wait(0..<100)])
        #expect(pacing.dirtyBytes(writtenEnd: 150) == 50)
    }

    @Test func resumesFromTheCheckpointAndResetsOnRestart() {
        var pacing = WriteBackWindow(window: 100, depth: 1, from: 1_000)
        #expect(pacing.written(upTo: 1_050) == [])
        #expect(pacing.written(upTo: 1_100) == [.start(1_000..<1_100)])
        pacing.reset(to: 0)
        #expect(pacing.written(upTo: 99) == [])
        #expect(pacing.written(upTo: 100) == [.start(0..<100)])
        #expect(pacing.written(upTo: 250) == [.start(100..<250), .wait(0..<100)])
    }
}
