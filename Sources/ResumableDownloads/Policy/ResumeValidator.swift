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

extension ResumeValidator {
    /// What identifies one version of a file: its length and validators (a strong ETag, a strong
    /// Last-Modified). Either side of a comparison: the file a download completed, or what a
    /// server serves now.
    package struct Entity: Sendable, Equatable {
        /// The length in bytes, when known.
        package var length: Int64?
        /// A strong ETag.
        package var entityTag: String?
        /// Last-Modified, when it was strong.
        package var lastModified: String?

        /// An entity from its parts.
        package init(length: Int64?, entityTag: String?, lastModified: String?) {
            (self.length, self.entityTag, self.lastModified) = (length, entityTag, lastModified)
        }

        /// What a response head (to HEAD, or a 200 GET) says about the entity.
        package init(head: ResponseHead) {
            self.init(length: head.contentLength, entityTag: head.strongEntityTag, lastModified: head.strongLastModified)
        }
    }

    /// Whether a completed file is still the server's: `same` when the lengths are equal and a
    /// validator both sides have is equal (the ETag first, else Last-Modified); `different` with
    /// the reason otherwise (length differs, validator differs, or nothing to compare).
    package enum Comparison: Sendable, Equatable {
        case same(String)
        case different(String)
    }

    /// The one rule for "this file is already the server's" (a rerun after success, `wget -c`'s
    /// question), decided from values alone: a file of the same length is not proof (a new
    /// version of the same size), so a strong validator must match too.
    package static func compare(stored: Entity, server: Entity) -> Comparison {
        guard let serverLength = server.length else { return .different("the server gives no length to compare") }
        guard let storedLength = stored.length else { return .different("no length was recorded for the file") }
        guard storedLength == serverLength else {
            return .different("its length differs (\(storedLength) bytes here, \(serverLength) on the server)")
        }
        if let mine = stored.entityTag, let theirs = server.entityTag {
            return mine == theirs ? .same("length and ETag match the server's")
                                  : .different("its validator differs (ETag \(mine) here, \(theirs) on the server)")
        }
        if let mine = stored.lastModified, let theirs = server.lastModified {
            return mine == theirs ? .same("length and Last-Modified match the server's")
                                  : .different("its validator differs (Last-Modified \(mine) here, \(theirs) on the server)")
        }
        return .different("the server gives no validator to compare (no strong ETag or Last-Modified in common)")
    }
}
