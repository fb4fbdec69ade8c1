import ReachabilityBase

/// Rules for extra request headers (`download -H`, `upload -H`, exchanges, background sessions):
/// the one check of a header line the caller gives.
public enum HeaderValidation {
    /// Headers the resume logic sets and depends on: overriding them would splice files.
    public static let reservedNames: Set<String> = ["range", "if-range", "accept-encoding", "content-length",
                                                    "transfer-encoding", "te", "connection"]

    /// Why `line` cannot be sent as a header, or nil when it can. `Name: value`, the name an
    /// RFC 9110 token, the value without control characters (a CR or LF would start another
    /// header on the wire), and not one of `reservedNames`.
    public static func problem(with line: String) -> String? { problem(with: line, reserved: reservedNames) }

    /// `problem(with:)` with another set of reserved names (an exchange reserves fewer).
    package static func problem(with line: String, reserved: Set<String>) -> String? {
        guard let colon = line.firstIndex(of: ":") else { return "expected 'Name: value'" }
        let name = line[..<colon]
        guard HTTPWire.isToken(name) else {
            return "the header name must be letters, digits and !#$%&'*+-.^_`|~"
        }
        guard isSafeOnTheWire(line) else { return "control characters (CR, LF, NUL, ...) are not allowed" }
        if reserved.contains(name.lowercased()) {
            return "\(name) is set by the downloader itself (resuming depends on it)"
        }
        return nil
    }

    /// No byte below 0x20 except tab, and no DEL (`HTTPWire`'s rule).
    static func isSafeOnTheWire(_ line: String) -> Bool {
        HTTPWire.isSafeOnTheWire(line)
    }
}
