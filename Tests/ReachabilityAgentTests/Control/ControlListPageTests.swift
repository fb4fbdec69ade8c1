import Foundation
import Testing
@testable import ReachabilityAgent

/// `list` with `rows` (issue 29): a queue of 10,000 is not sent whole unless asked for.
@Suite("Control protocol: list pages")
struct ControlListPageTests {
    /// Rows 0-9, the odd ones finished.
    static let rows = Array(0..<10)
    static func isFinished(_ row: Int) -> Bool { row % 2 == 1 }

    @Test func withoutRowsEveryRowIsSent() {
        let page = ListPage(Self.rows, rows: nil, isFinished: Self.isFinished)
        #expect(page.rows == Self.rows)
        #expect(page.omitted == 0)
    }

    @Test func firstUnfinishedAndLatestFinishedInListOrder() {
        let page = ListPage(Self.rows, rows: 2, isFinished: Self.isFinished)
        #expect(page.rows == [0, 2, 7, 9])
        #expect(page.omitted == 6)
    }

    @Test func aPageLargerThanTheListIsTheList() {
        let page = ListPage(Self.rows, rows: 100, isFinished: Self.isFinished)
        #expect(page.rows == Self.rows)
        #expect(page.omitted == 0)
    }

    @Test func decodesRowsAndRoundTrips() throws {
        let line = #"{"version":1,"id":3,"command":"list","rows":100}"#
        let (id, command) = try ControlCodec.decodeRequest(Array(line.utf8)).get()
        #expect(id == .number(3))
        #expect(command == .list(rows: 100))
        #expect(try ControlCodec.decodeRequest(ControlCodec.encode(ControlRequest(id: nil, command: command))).get().1 == command)
        let plain = #"{"version":1,"command":"list"}"#
        #expect(try ControlCodec.decodeRequest(Array(plain.utf8)).get().1 == .list(rows: nil))
    }

    @Test(arguments: [
        #"{"version":1,"command":"list","rows":0}"#,
        #"{"version":1,"command":"list","rows":-5}"#,
        #"{"version":1,"command":"list","rows":1000001}"#,
        #"{"version":1,"command":"list","rows":1e16}"#,
        #"{"version":1,"command":"list","rows":9e18}"#,
        #"{"version":1,"command":"list","rows":-1}"#,
    ])
    func refusesRowsOutOfBounds(line: String) {
        switch ControlCodec.decodeRequest(Array(line.utf8)) {
        case .success(let value): Issue.record("accepted \(value)")
        case .failure(let rejection): #expect(rejection.error.code == .invalidArgument, "\(rejection.error.message)")
        }
    }

    /// Values that are no integer at all are malformed, never a crash or a page.
    @Test(arguments: [
        #"{"version":1,"command":"list","rows":1e300}"#,
        #"{"version":1,"command":"list","rows":2.5}"#,
        #"{"version":1,"command":"list","rows":"inf"}"#,
        #"{"version":1,"command":"list","rows":"nan"}"#,
    ])
    func refusesRowsThatAreNoInteger(line: String) {
        switch ControlCodec.decodeRequest(Array(line.utf8)) {
        case .success(let value): Issue.record("accepted \(value)")
        case .failure(let rejection): #expect(rejection.error.code == .malformed, "\(rejection.error.message)")
        }
    }

    @Test func summaryFromCountsMatchesSummaryFromStates() {
        var tally = DownloadTally()
        for state in [AgentDownload.State.running, .running, .queued, .completed, .failed, .paused] { tally.count(state) }
        #expect(tally.summary == "2 downloading, 1 queued, 1 paused")
        #expect(tally.counts == ["running": 2, "queued": 1, "completed": 1, "failed": 1, "paused": 1])
        #expect(DownloadTally().summary == "idle")
    }
}
