/// A background session as the agent knows it: the uid that attached it (from the socket's peer
/// credentials, never from the request) and its identifier. Two users' sessions of the same
/// identifier are two sessions; neither user sees the other's.
package struct BackgroundSessionKey: Codable, Sendable, Hashable, Comparable, CustomStringConvertible {
    package var uid: UInt32
    package var identifier: String

    package init(uid: UInt32, identifier: String) {
        self.uid = uid
        self.identifier = identifier
    }

    /// The longest identifier accepted, in UTF-8 bytes.
    package static let maximumIdentifierLength = 255

    /// Why `identifier` cannot name a background session, or nil: it must be 1...255 bytes of
    /// UTF-8 without control characters (it is shown in `queue list`, logs and an environment
    /// variable).
    package static func problem(with identifier: String) -> String? {
        if identifier.isEmpty { return "the background session identifier is empty" }
        if identifier.utf8.count > maximumIdentifierLength {
            return "the background session identifier is longer than \(maximumIdentifierLength) bytes"
        }
        if identifier.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            return "the background session identifier holds control characters"
        }
        return nil
    }

    package static func < (lhs: BackgroundSessionKey, rhs: BackgroundSessionKey) -> Bool {
        (lhs.uid, lhs.identifier) < (rhs.uid, rhs.identifier)
    }

    /// `'identifier' (uid N)`.
    package var description: String { "'\(identifier)' (uid \(uid))" }
}
