/// The one rule set for the validators a resume sends back in `If-Range`, wherever they come
/// from: a response head (`ResponseHead.strongEntityTag`), a record read back
/// (`ResumeRecord.validate`), resume state a facade hands in (`ResumeState.validate`) and
/// `ResumableURLSession`'s resume data. These once disagreed: an unquoted ETag from a server was
/// recorded as strong, and the resume data made from it was then refused.
package enum ResumeValidator {
    /// Longest validator accepted (nginx's ETags are about 20 bytes, Last-Modified 29).
    package static let maximumLength = 1024

    /// Whether `value` can go into a header as is: one line of visible ASCII and spaces (no CR,
    /// LF or other controls that could smuggle in a header), not empty, not too long.
    package static func isHeaderSafe(_ value: String) -> Bool {
        !value.isEmpty && value.utf8.count <= maximumLength && value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }

    /// Whether `tag` is a strong entity tag (RFC 9110 §8.8.3: `"…"`, not weak `W/"…"`, which
    /// never validates byte ranges) that is header-safe.
    package static func isStrongEntityTag(_ tag: String) -> Bool {
        tag.utf8.count >= 2 && tag.utf8.first == UInt8(ascii: "\"") && tag.utf8.last == UInt8(ascii: "\"") && isHeaderSafe(tag)
    }

    /// Why the validators cannot be resumed with (`the entity tag is not a strong ETag on one
    /// line of visible ASCII`), or nil. Either may be absent.
    package static func problem(entityTag: String?, lastModified: String?) -> String? {
        if let entityTag, !isStrongEntityTag(entityTag) {
            return "the entity tag is not a strong ETag on one line of visible ASCII"
        }
        if let lastModified, !isHeaderSafe(lastModified) {
            return "Last-Modified is not one line of visible ASCII"
        }
        return nil
    }
}
