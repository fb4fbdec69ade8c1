import Testing
@testable import ReachabilityBase

@Suite("Content-Range parsing")
struct ContentRangeTests {
    @Test(arguments: [
        ("bytes 0-9/10", 0...9 as ClosedRange<Int64>?, 10 as Int64?),
        ("bytes 100-199/1000", 100...199, 1000),
        ("bytes 5-5/*", 5...5, nil),
        ("  BYTES 1-2/3 \r\n", 1...2, 3),
        ("bytes */1000", nil, 1000),
        ("bytes 0-9223372036854775806/9223372036854775807", 0...9_223_372_036_854_775_806, 9_223_372_036_854_775_807),
    ])
    func parsesValidValues(text: String, range: ClosedRange<Int64>?, total: Int64?) throws {
        let parsed = try #require(ContentRange(text))
        #expect(parsed.range == range)
        #expect(parsed.totalLength == total)
    }

    @Test(arguments: [
        "", "bytes", "bytes ", "items 0-9/10", "bytes 9-0/10", "bytes 0-10/10", "bytes */*", "bytes 0-9",
        "bytes -1-9/10", "bytes 0-9/ten", "bytes 0 - 9/10", "bytes=0-9/10", "bytes 0-9/99999999999999999999",
        "bytes0-9/10", "bytes +1-9/10",
        // Hostile numbers (HTTPWire.digits): signs, exponents, overflow, words.
        "bytes 0-9/+10", "bytes 0-+9/10", "bytes 0-9/1e16", "bytes 0-9/9e18", "bytes 0-9/1e300", "bytes 0-9/inf",
        "bytes 0-9/nan", "bytes 0-9/9223372036854775808", "bytes 1e1-20/30", "bytes 0-9/-1", "bytes 0-0/0",
    ])
    func rejectsMalformedValues(text: String) {
        #expect(ContentRange(text) == nil)
    }
}
