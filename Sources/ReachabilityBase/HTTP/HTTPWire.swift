/// The one reader of HTTP's small wire values: numbers in header fields and status lines, ports,
/// tokens and field values. Every caller that reads HTTP text (the engine's response heads, the
/// connectivity probe's reply, a URL's port, `-H` headers) asks here, so `+80`, `-1`, `1e3` or
/// twenty digits mean the same thing everywhere: nothing. Digits go through `DecimalText`, the
/// package's one decimal parser; no `Int(` on wire text anywhere else.
///
/// It lives in ReachabilityBase because two modules read HTTP: LinuxReachability (the
/// connectivity check) and ResumableDownloads (every transfer).
package enum HTTPWire {
    /// `1*DIGIT` (RFC 9110 §5.6: Content-Length, a Content-Range position, delay-seconds) as an
    /// `Int64`, or nil: no sign, no space, no fraction or exponent, nothing past `Int64.max`.
    package static func digits(_ text: some StringProtocol) -> Int64? {
        DecimalText.integer(text)
    }

    /// `digits` over raw bytes (a reply read from a socket).
    package static func digits(_ bytes: some Collection<UInt8>) -> Int64? {
        // Only ASCII digits reach the decoder, so a non-UTF-8 byte is refused, not replaced.
        guard bytes.allSatisfy(isDigit) else { return nil }
        return DecimalText.integer(String(decoding: bytes, as: UTF8.self))
    }

    /// A status line's `status-code` (RFC 9110 §15): exactly three digits, 100 to 999 (a code
    /// below 100 has no class a client could fall back to).
    package static func statusCode(_ text: some StringProtocol) -> Int? {
        statusCode(Array(text.utf8))
    }

    /// `statusCode` over raw bytes.
    package static func statusCode(_ bytes: some Collection<UInt8>) -> Int? {
        guard bytes.count == 3, let code = digits(bytes), code >= 100 else { return nil }
        return Int(code)
    }

    /// A URI's `port` (RFC 3986 §3.2.3) as a connection can use it: one to five digits, 1 to
    /// 65535 (`UInt16("+80")` is 80, and the probe once took it).
    package static func port(_ text: some StringProtocol) -> UInt16? {
        guard text.utf8.count <= 5, let value = digits(text), let port = UInt16(exactly: value), port > 0 else { return nil }
        return port
    }

    /// A chunk's size in chunked transfer coding (RFC 9112 §7.1: `1*HEXDIG`), up to eight hex
    /// digits (4 GiB; more is no reply a probe waits for), or nil: `Int("+f", radix: 16)` is 15.
    package static func chunkSize(_ bytes: some Collection<UInt8>) -> Int? {
        guard !bytes.isEmpty, bytes.count <= 8 else { return nil }
        var size = 0
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): size = size << 4 | Int(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): size = size << 4 | Int(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): size = size << 4 | Int(byte - UInt8(ascii: "A") + 10)
            default: return nil
            }
        }
        return size
    }

    /// A URI's `pct-encoded` octet (RFC 3986 §2.1: the two `HEXDIG` after a `%`), or nil:
    /// `UInt8("+f", radix: 16)` is 15.
    package static func percentEncodedOctet(_ bytes: some Collection<UInt8>) -> UInt8? {
        guard bytes.count == 2, let value = chunkSize(bytes) else { return nil }
        return UInt8(value)
    }

    /// Whether `byte` is an ASCII digit.
    package static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    /// `tchar` (RFC 9110 §5.6.2): the bytes of a token such as a field name or a method.
    package static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"):
            true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
             UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// `token` (RFC 9110 §5.6.2): one or more `tchar`, as a field name must be.
    package static func isToken(_ text: some StringProtocol) -> Bool {
        !text.utf8.isEmpty && text.utf8.allSatisfy(isTokenByte)
    }

    /// Whether `text` can be sent in a header line as it is: no control byte but a tab and no
    /// DEL, so a CR or LF cannot start another header on the wire (request smuggling).
    package static func isSafeOnTheWire(_ text: some StringProtocol) -> Bool {
        !text.utf8.contains { ($0 < 0x20 && $0 != UInt8(ascii: "\t")) || $0 == 0x7F }
    }
}
