import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Response rules")
struct ResponseStateMachineTests {
    func machine(offset: Int64 = 0, etag: String? = nil, total: Int64? = nil) -> ResponseStateMachine {
        ResponseStateMachine(request: .init(offset: offset, entityTag: etag, knownTotalLength: total))
    }

    func head(_ status: Int, _ fields: [String: String] = [:]) -> ResponseStateMachine.Event {
        .head(ResponseHead(statusCode: status, fields: fields))
    }

    @Test func fresh200IsAcceptedFromZero() {
        var m = machine()
        let action = m.event(head(200, ["Content-Length": "10", "ETag": "\"v1\"", "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"]))
        #expect(action == .begin(.init(startOffset: 0, endOffset: 10, totalLength: 10, entityTag: "\"v1\"",
                                       lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", restartsFromZero: false)))
        #expect(m.event(.body(count: 4)) == .write(at: 0))
        #expect(m.event(.body(count: 6)) == .write(at: 4))
        #expect(m.event(.ended(nil)) == .finish(.completed(totalLength: 10)))
    }

    @Test func weakETagIsNotAValidator() {
        var m = machine()
        guard case .begin(let acceptance) = m.event(head(200, ["ETag": "W/\"v1\"", "Content-Length": "1"])) else {
            Issue.record("expected begin"); return
        }
        #expect(acceptance.entityTag == nil)
    }

    @Test func matching206ContinuesAtOffset() {
        var m = machine(offset: 100, etag: "\"v1\"", total: 1000)
        let action = m.event(head(206, ["Content-Range": "bytes 100-999/1000", "Content-Length": "900", "ETag": "\"v1\""]))
        #expect(action == .begin(.init(startOffset: 100, endOffset: 1000, totalLength: 1000, entityTag: "\"v1\"",
                                       lastModified: nil, restartsFromZero: false)))
        #expect(m.event(.body(count: 900)) == .write(at: 100))
        #expect(m.event(.ended(nil)) == .finish(.completed(totalLength: 1000)))
    }

    @Test func status200ToARangeRequestRestartsFromZero() {
        var m = machine(offset: 100, etag: "\"v1\"", total: 1000)
        guard case .begin(let acceptance) = m.event(head(200, ["Content-Length": "1200", "ETag": "\"v2\""])) else {
            Issue.record("expected begin"); return
        }
        #expect(acceptance.restartsFromZero)
        #expect(acceptance.startOffset == 0)
        #expect(acceptance.totalLength == 1200)
        #expect(m.event(.body(count: 10)) == .write(at: 0))
    }

    @Test(arguments: [
        ["Content-Range": "bytes 0-999/1000"],                       // wrong start
        ["Content-Range": "bytes 100-999/2000"],                     // total changed
        [:],                                                          // no Content-Range
        ["Content-Range": "garbage"],
        ["Content-Range": "bytes */1000"],
        ["Content-Range": "bytes 100-999/1000", "ETag": "\"v2\""],   // entity changed
        ["Content-Range": "bytes 100-999/1000", "Content-Length": "5"],
    ])
    func bad206RestartsFromZero(fields: [String: String]) {
        var m = machine(offset: 100, etag: "\"v1\"", total: 1000)
        guard case .abort(.restartFromZero) = m.event(head(206, fields)) else {
            Issue.record("expected restartFromZero for \(fields)"); return
        }
        guard case .finish(.restartFromZero) = m.event(.ended(.networkConnectionLost)) else {
            Issue.record("the decided result must win over libcurl's write error"); return
        }
    }

    @Test func status206WithoutRangeRequestFails() {
        var m = machine()
        #expect(m.event(head(206, ["Content-Range": "bytes 0-9/10"])) == .abort(.failed(.badServerResponse)))
    }

    @Test func status416WithMatchingTotalMeansComplete() {
        var m = machine(offset: 1000, etag: "\"v1\"", total: 1000)
        #expect(m.event(head(416, ["Content-Range": "bytes */1000"])) == .abort(.completed(totalLength: 1000)))
    }

    @Test func status416WithOtherTotalRestarts() {
        var m = machine(offset: 1000)
        guard case .abort(.restartFromZero) = m.event(head(416, ["Content-Range": "bytes */500"])) else {
            Issue.record("expected restart"); return
        }
    }

    @Test(arguments: [500, 502, 503, 504, 408, 429])
    func transientStatusesAskForBackoff(status: Int) {
        var m = machine(offset: 10)
        #expect(m.event(head(status, ["Retry-After": "7"])) == .abort(.serverBusy(status: status, retryAfter: .seconds(7))))
    }

    @Test(arguments: [400, 401, 403, 404, 410, 451])
    func clientErrorsFail(status: Int) {
        var m = machine()
        guard case .abort(.failed(let error)) = m.event(head(status)) else { Issue.record("expected failure"); return }
        #expect(error == .httpStatus)
        #expect(error.httpStatusCode == status)
        #expect(!error.isResumable)
    }

    @Test func interimAndRedirectHeadsAreSkipped() {
        var m = machine()
        #expect(m.event(head(100)) == .ignore)
        #expect(m.event(head(302, ["Location": "http://example.invalid/x"])) == .ignore)
        guard case .begin = m.event(head(200, ["Content-Length": "1"])) else { Issue.record("expected begin"); return }
    }

    @Test func moreBytesThanAnnouncedAborts() {
        var m = machine()
        _ = m.event(head(200, ["Content-Length": "10"]))
        #expect(m.event(.body(count: 8)) == .write(at: 0))
        guard case .abort(.failed(let error)) = m.event(.body(count: 8)) else { Issue.record("expected abort"); return }
        #expect(error == .badServerResponse)
    }

    @Test func shortBodyIsAConnectionLoss() {
        var m = machine()
        _ = m.event(head(200, ["Content-Length": "10"]))
        _ = m.event(.body(count: 4))
        #expect(m.event(.ended(nil)) == .finish(.transport(.networkConnectionLost)))
        var n = machine()
        _ = n.event(head(200, ["Content-Length": "10"]))
        #expect(n.event(.ended(.networkConnectionLost)) == .finish(.transport(.networkConnectionLost)))
    }

    @Test func partialRangeEndsIncomplete() {
        var m = machine(offset: 10, total: 100)
        _ = m.event(head(206, ["Content-Range": "bytes 10-19/100"]))
        _ = m.event(.body(count: 10))
        #expect(m.event(.ended(nil)) == .finish(.incomplete(offset: 20)))
    }

    @Test func unknownLengthCompletesAtCleanEnd() {
        var m = machine()
        _ = m.event(head(200))
        _ = m.event(.body(count: 42))
        #expect(m.event(.ended(nil)) == .finish(.completed(totalLength: 42)))
    }

    @Test func headerAccumulatorKeepsOnlyTheLastResponse() throws {
        var accumulator = HeaderAccumulator()
        var heads: [ResponseHead] = []
        for line in ["HTTP/1.1 301 Moved\r\n", "Location: /b\r\n", "\r\n", "HTTP/1.1 206 Partial Content\r\n",
                     "Content-Range: bytes 1-2/3\r\n", "X-A: 1\r\n", "x-a: 2\r\n", "\r\n"] {
            if let head = accumulator.feed(line) { heads.append(head) }
        }
        try #require(heads.count == 2)
        #expect(heads[0].statusCode == 301)
        #expect(heads[1].statusCode == 206)
        #expect(heads[1]["content-range"] == "bytes 1-2/3")
        #expect(heads[1]["X-A"] == "1, 2")
        #expect(heads[1]["location"] == nil)
    }
}
