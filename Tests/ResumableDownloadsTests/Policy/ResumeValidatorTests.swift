import Testing
@testable import ResumableDownloads

/// The one rule set for `If-Range` validators: a response head, a record read back and resume
/// state handed in agree on what a strong ETag is (they once did not: an unquoted tag from a
/// server was recorded as strong, and resume data made from it was refused).
@Suite("resume validators")
struct ResumeValidatorTests {
    @Test(arguments: [#""v1""#, #""""#, #""a b""#])
    func strongTags(tag: String) {
        #expect(ResumeValidator.isStrongEntityTag(tag))
        #expect(ResponseHead(statusCode: 200, fields: ["ETag": " \(tag) "]).strongEntityTag == tag)
        #expect(ResumeValidator.problem(entityTag: tag, lastModified: nil) == nil)
    }

    @Test(arguments: [#"W/"v1""#, "v1", #"""#, #""v1"#, "\"a\"\r\nX: 1\r\n\"", "\"" + String(repeating: "a", count: 2000) + "\"", ""])
    func everythingElseIsNoStrongTagAnywhere(tag: String) {
        #expect(!ResumeValidator.isStrongEntityTag(tag))
        #expect(ResponseHead(statusCode: 200, fields: ["ETag": tag]).strongEntityTag == nil)
        #expect(ResumeValidator.problem(entityTag: tag, lastModified: nil) != nil)
    }

    @Test func lastModifiedIsOneLineOfVisibleASCII() {
        #expect(ResumeValidator.problem(entityTag: nil, lastModified: "Tue, 01 Dec 2026 10:00:00 GMT") == nil)
        #expect(ResumeValidator.problem(entityTag: nil, lastModified: "Tue\r\nHost: evil") != nil)
        #expect(ResumeValidator.problem(entityTag: nil, lastModified: "") != nil)
    }

    typealias E = ResumeValidator.Entity
    static let lm = "Tue, 01 Dec 2026 10:00:00 GMT"

    /// A rerun after success: the file is done only when length and a shared validator match.
    @Test(arguments: [
        (E(length: 10, entityTag: #""a""#, lastModified: nil), E(length: 10, entityTag: #""a""#, lastModified: nil), "length and ETag match"),
        (E(length: 10, entityTag: #""a""#, lastModified: lm), E(length: 10, entityTag: #""b""#, lastModified: lm), "validator differs (ETag"),
        (E(length: 10, entityTag: nil, lastModified: lm), E(length: 10, entityTag: #""b""#, lastModified: lm), "length and Last-Modified match"),
        (E(length: 10, entityTag: nil, lastModified: lm), E(length: 10, entityTag: nil, lastModified: "Wed, 02 Dec 2026 10:00:00 GMT"),
         "validator differs (Last-Modified"),
        (E(length: 10, entityTag: #""a""#, lastModified: nil), E(length: 11, entityTag: #""a""#, lastModified: nil), "length differs (10 bytes here, 11"),
        (E(length: 10, entityTag: #""a""#, lastModified: nil), E(length: 10, entityTag: nil, lastModified: lm), "no validator to compare"),
        (E(length: 10, entityTag: nil, lastModified: nil), E(length: 10, entityTag: nil, lastModified: nil), "no validator to compare"),
        (E(length: 10, entityTag: #""a""#, lastModified: nil), E(length: nil, entityTag: #""a""#, lastModified: nil), "no length to compare"),
        (E(length: nil, entityTag: #""a""#, lastModified: nil), E(length: 10, entityTag: #""a""#, lastModified: nil), "no length was recorded"),
    ] as [(E, E, String)])
    func rerunComparison(stored: E, server: E, expected: String) {
        let verdict = ResumeValidator.compare(stored: stored, server: server)
        switch verdict {
        case .same(let reason): #expect(expected.hasPrefix("length and") && reason.contains(expected), "\(reason)")
        case .different(let reason): #expect(!expected.hasPrefix("length and") && reason.contains(expected), "\(reason)")
        }
    }

    @Test func entityFromAHead() {
        let head = ResponseHead(statusCode: 200, fields: ["etag": #"W/"weak""#, "content-length": "42", "last-modified": Self.lm,
                                                          "date": "Tue, 01 Dec 2026 10:00:05 GMT"])
        #expect(ResumeValidator.Entity(head: head) == E(length: 42, entityTag: nil, lastModified: Self.lm))
    }
}
