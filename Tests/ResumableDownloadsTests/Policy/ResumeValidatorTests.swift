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
}
