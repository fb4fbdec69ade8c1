import Testing
@testable import ReachabilityBase

/// The one reader of response head lines, as the engine and the connectivity probe both use it.
@Suite("HTTP head lines")
struct HTTPHeadLineTests {
    static func parse(_ text: String) -> Result<HTTPHeadLine, HTTPHeadLine.Problem> { HTTPHeadLine.parse(Array(text.utf8)) }

    @Test(arguments: [
        ("HTTP/1.1 200 OK\r", HTTPHeadLine.status(version: "1.1", code: 200)),
        ("HTTP/1.0 302", .status(version: "1.0", code: 302)),
        ("HTTP/2 206 ", .status(version: "2", code: 206)),
        ("Content-Range: bytes 1-2/3", .field(name: "content-range", value: "bytes 1-2/3")),
        ("ETag:\t\"x\" \r", .field(name: "etag", value: "\"x\"")),
        ("X-Empty:", .field(name: "x-empty", value: "")),
        ("\r", .end),
        ("", .end),
    ])
    func readsWhatALineIs(_ text: String, _ line: HTTPHeadLine) {
        #expect(Self.parse(text) == .success(line), "\(text)")
    }

    @Test(arguments: [
        ("HTTP/1.1 2000 OK", "invalid status code"), ("HTTP/1.1 20x OK", "invalid status code"),
        ("HTTP/1.1 +20 OK", "invalid status code"), ("HTTP/1.1 099 OK", "invalid status code"),
        ("HTTP/1.1  200 OK", "invalid status code"), ("HTTP/1.1", "not an HTTP status line"),
        ("HTTP/x 200 OK", "not an HTTP status line"), ("HTTP/1.12 200 OK", "not an HTTP status line"),
        (" folded: x", "folded header line"), ("\tfolded", "folded header line"),
        (": no name", "header line without a name"), ("no colon", "header line without a name"),
        ("Bad Name: x", "invalid header name"), ("Bad\u{7F}: x", "invalid header name"),
    ])
    func refusesWhatIsNot(_ text: String, _ reason: String) {
        #expect(Self.parse(text) == .failure(HTTPHeadLine.Problem(description: reason)), "\(text)")
    }
}
