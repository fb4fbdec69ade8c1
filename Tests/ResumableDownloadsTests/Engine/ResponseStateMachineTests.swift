import Foundation
import Testing
@testable import ResumableDownloads

@Suite("Response rules")
struct ResponseStateMachineTests {
    func machine(offset: Int64 = 0, etag: String? = nil, total: Int64? = nil, lastModified: String? = nil,
                 observed: String? = nil, overlap: Int64 = 0) -> ResponseStateMachine {
        ResponseStateMachine(request: .init(offset: offset, entityTag: etag, knownTotalLength: total, lastModified: lastModified,
                                            observedEntityTag: observed, overlap: overlap))
    }

    func head(_ status: Int, _ fields: [String: String] = [:]) -> ResponseStateMachine.Event {
        .head(ResponseHead(statusCode: status, fields: fields))
    }

    @Test func fresh200IsAcceptedFromZero() {
        var m = machine()
        let action = m.event(head(200, ["Content-Length": "10", "ETag": "\"v1\"", "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
                                        "Date": "Tue, 02 Jan 2024 00:00:00 GMT"]))
        #expect(action == .begin(.init(startOffset: 0, endOffset: 10, totalLength: 10, entityTag: "\"v1\"",
                                       lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", restartsFromZero: false,
                                       observedEntityTag: "\"v1\"")))
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
                                       lastModified: nil, restartsFromZero: false, observedEntityTag: "\"v1\"")))
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

    /// `bytes */N` at offset N is complete only when the recorded total is N too: a server that
    /// truncated the file (or lies) must not turn a partial download into a short "success".
    @Test func status416IsCompleteOnlyWhenTheRecordedTotalIsTheOffset() {
        var larger = machine(offset: 1000, etag: "\"v1\"", total: 5000)
        guard case .abort(.restartFromZero) = larger.event(head(416, ["Content-Range": "bytes */1000"])) else {
            Issue.record("expected restart"); return
        }
        var unknown = machine(offset: 1000)
        guard case .abort(.restartFromZero) = unknown.event(head(416, ["Content-Range": "bytes */1000"])) else {
            Issue.record("expected restart"); return
        }
        var overlapping = machine(offset: 1000, total: 1000, overlap: 100)
        guard case .abort(.restartFromZero) = overlapping.event(head(416, ["Content-Range": "bytes */1000"])) else {
            Issue.record("an overlap request never gets a legitimate 416"); return
        }
    }

    @Test func theOverlapIsComparedBeforeAnythingIsWritten() {
        var m = machine(offset: 1000, etag: "\"v1\"", total: 2000, overlap: 100)
        guard case .begin(let acceptance) = m.event(head(206, ["Content-Range": "bytes 900-1999/2000", "ETag": "\"v1\""])) else {
            Issue.record("expected begin"); return
        }
        #expect(acceptance.startOffset == 900 && acceptance.verifyUntil == 1000 && !acceptance.restartsFromZero)
        #expect(m.event(.body(count: 60)) == .compare(at: 900, count: 60))
        #expect(m.event(.body(count: 60)) == .compare(at: 960, count: 40))   // 20 bytes past the offset are written
        #expect(m.event(.body(count: 100)) == .write(at: 1020))
        guard case .abort(.restartFromZero) = m.event(.overlapMismatch) else { Issue.record("expected restart"); return }
    }

    @Test func aResponseEndingInsideTheOverlapRestarts() {
        var m = machine(offset: 1000, overlap: 100)
        _ = m.event(head(206, ["Content-Range": "bytes 900-949/950"]))
        _ = m.event(.body(count: 50))
        guard case .finish(.restartFromZero) = m.event(.ended(nil)) else { Issue.record("expected restart"); return }
    }

    /// Changed validators on a 206 (a server that ignores If-Range): never spliced.
    @Test(arguments: [
        ["Content-Range": "bytes 900-1999/2000", "Last-Modified": "Tue, 02 Jan 2024 00:00:00 GMT"],
        ["Content-Range": "bytes 900-1999/2000", "ETag": "W/\"w2\""],
        ["Content-Range": "bytes 900-1999/2000", "ETag": "\"v2\""],
    ])
    func changedValidatorsRestart(fields: [String: String]) {
        var m = machine(offset: 1000, etag: "\"v1\"", total: 2000, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT",
                        observed: "\"v1\"", overlap: 100)
        guard case .abort(.restartFromZero) = m.event(head(206, fields)) else { Issue.record("expected restart for \(fields)"); return }
        var weak = machine(offset: 1000, total: 2000, observed: "W/\"w1\"", overlap: 100)
        if fields["ETag"] == "W/\"w2\"" {
            guard case .abort(.restartFromZero) = weak.event(head(206, fields)) else { Issue.record("a changed weak ETag is a change"); return }
        }
    }

    /// Issue 34: what a cache says about its answer (`Age`, `Via`, `X-Cache`, `X-Cache-Lookup`,
    /// `Warning`) never makes a range of another version acceptable, on a resume or on a segment:
    /// a changed ETag, Last-Modified or total length is refused, nothing written.
    @Test(arguments: [
        ["ETag": "\"v2\""],
        ["ETag": "W/\"v2\""],
        ["Last-Modified": "Tue, 02 Jan 2024 00:00:00 GMT"],
        ["Content-Range": "bytes 1000-1999/3000"],
    ])
    func aCacheSayingItsAnswerIsFreshDoesNotHideAnotherVersion(change: [String: String]) {
        let cacheSays = ["Age": "3600", "Via": "1.1 sitecache (squid/5.7)", "X-Cache": "HIT from sitecache",
                         "X-Cache-Lookup": "HIT from sitecache:3128", "Warning": "110 - \"Response is Stale\""]
        let fields = ["Content-Range": "bytes 1000-1999/2000", "Content-Length": "1000", "ETag": "\"v1\"",
                      "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"]
            .merging(cacheSays) { $1 }.merging(change) { $1 }
        var resume = machine(offset: 1000, etag: "\"v1\"", total: 2000, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT",
                             observed: "\"v1\"")
        guard case .abort(.restartFromZero) = resume.event(head(206, fields)) else {
            Issue.record("a resume took another version's range for \(change)"); return
        }
        var segment = ResponseStateMachine(request: .init(offset: 1000, entityTag: "\"v1\"", knownTotalLength: 2000,
                                                          lastModified: "Mon, 01 Jan 2024 00:00:00 GMT",
                                                          observedEntityTag: "\"v1\"", end: 2000, isSegment: true,
                                                          requiresValidator: true))
        guard case .abort(.restartFromZero) = segment.event(head(206, fields)) else {
            Issue.record("a segment took another version's range for \(change)"); return
        }
        #expect(segment.refusal != nil)
        // The same answer with the download's own validators and length is taken, cache headers or not.
        var same = ResponseStateMachine(request: .init(offset: 1000, entityTag: "\"v1\"", knownTotalLength: 2000,
                                                       lastModified: "Mon, 01 Jan 2024 00:00:00 GMT",
                                                       observedEntityTag: "\"v1\"", end: 2000, isSegment: true,
                                                       requiresValidator: true))
        guard case .begin = same.event(head(206, ["Content-Range": "bytes 1000-1999/2000", "Content-Length": "1000",
                                                  "ETag": "\"v1\"", "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"]
                                                .merging(cacheSays) { $1 })) else {
            Issue.record("a cached range of the same version was refused"); return
        }
    }

    @Test func lastModifiedIsAValidatorOnlyWhenStrong() {
        var sameSecond = machine()
        guard case .begin(let a) = sameSecond.event(head(200, ["Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
                                                                "Date": "Mon, 01 Jan 2024 00:00:00 GMT"])) else { return }
        #expect(a.lastModified == nil)
        var noDate = machine()
        guard case .begin(let b) = noDate.event(head(200, ["Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"])) else { return }
        #expect(b.lastModified == nil)
    }

    @Test(arguments: [
        ["Content-Length": "10, 12"],
        ["Content-Length": "ten"],
        ["Content-Length": "10", "Content-Encoding": "gzip"],
    ])
    func conflictingLengthsAndUnrequestedEncodingsFail(fields: [String: String]) {
        var m = machine()
        guard case .abort(.failed(let error)) = m.event(head(200, fields)) else { Issue.record("expected failure for \(fields)"); return }
        #expect(error == .badServerResponse)
        var identical = machine()
        guard case .begin(let acceptance) = identical.event(head(200, ["Content-Length": "10, 10", "Content-Encoding": "identity"])) else {
            Issue.record("identical repeats are one value"); return
        }
        #expect(acceptance.totalLength == 10)
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

    /// A status line whose code is not three decimal digits gives no head (its fields are not
    /// taken either); no value may crash the parser.
    @Test(arguments: ["0", "-1", "+206", "1e16", "9e18", "9223372036854775807", "1e300", "inf", "nan", "2O6", "99", "1000", ""])
    func aStatusCodeThatIsNotThreeDigitsGivesNoHead(code: String) {
        var accumulator = HeaderAccumulator()
        var heads: [ResponseHead] = []
        for line in ["HTTP/1.1 \(code) Odd\r\n", "Content-Range: bytes 1-2/3\r\n", "\r\n"] {
            if let head = accumulator.feed(line) { heads.append(head) }
        }
        #expect(heads.isEmpty, "\(code)")
    }
}

/// The seam probe (`Request.isSeamProbe`): sent after responses were cut at the stored offset
/// again and again, it reads only the validators of the bytes at the offset and writes nothing.
@Suite("Response rules: seam probe")
struct ResponseSeamProbeTests {
    func probe(etag: String? = "\"A\"", lastModified: String? = nil) -> ResponseStateMachine {
        ResponseStateMachine(request: .init(offset: 8 << 20, entityTag: etag, knownTotalLength: 16 << 20,
                                            lastModified: lastModified, observedEntityTag: etag, end: (8 << 20) + 1,
                                            isSeamProbe: true))
    }

    func head(_ status: Int, _ fields: [String: String]) -> ResponseStateMachine.Event {
        .head(ResponseHead(statusCode: status, fields: fields))
    }

    @Test(arguments: [
        ["Content-Range": "bytes 8388608-8388608/16777216", "ETag": "\"B\""],           // another version past the seam
        ["Content-Range": "bytes 8388608-8388608/9000000", "ETag": "\"A\""],            // another length
        ["Content-Length": "16777216", "ETag": "\"B\""],                                 // a 200 of another version
    ])
    func anotherVersionPastTheSeamRestartsFromZeroSayingSo(fields: [String: String]) {
        var m = probe()
        let action = m.event(head(fields["Content-Range"] == nil ? 200 : 206, fields))
        guard case .abort(.restartFromZero(let reason)) = action else {
            Issue.record("expected a restart for \(fields): \(action)"); return
        }
        #expect(reason.hasPrefix(ResponseStateMachine.changedVersionPrefix), "\(reason)")
        #expect(reason.contains("offset 8388608"), "\(reason)")
        // Not a byte of it is written.
        #expect(m.event(.body(count: 1)) == .abort(.restartFromZero(reason: reason)))
    }

    @Test func theSameVersionPastTheSeamIsACutLikeTheOthers() {
        var m = probe(etag: nil, lastModified: "Tue, 14 Nov 2023 22:13:20 GMT")
        let action = m.event(head(206, ["Content-Range": "bytes 8388608-8388608/16777216",
                                        "Last-Modified": "Tue, 14 Nov 2023 22:13:20 GMT"]))
        guard case .abort(.transport(let error)) = action else { Issue.record("\(action)"); return }
        #expect(error.urlCode == .networkConnectionLost)
        #expect(m.event(.body(count: 1)) == .abort(.transport(error)), "nothing is written")
    }

    @Test func otherAnswersFollowTheUsualRules() {
        var m = probe()
        #expect(m.event(head(503, ["Retry-After": "2"])) == .abort(.serverBusy(status: 503, retryAfter: .seconds(2))))
    }
}
