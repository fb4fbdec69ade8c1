/// One line of an HTTP/1.x response head (RFC 9112 §4 and §5), read one way for every reader:
/// the engine's response heads (lines as libcurl's header callback hands them) and the
/// connectivity probe's reply (lines cut from bytes off a socket). Each caller applies its own
/// policy to the result (the probe speaks HTTP/1.x only and refuses a bad line; the engine
/// skips a line libcurl let through), but what a status line or a field line is, is said here.
package enum HTTPHeadLine: Equatable, Sendable {
    /// `HTTP-version SP status-code [SP reason-phrase]`: the version after `HTTP/` (`1.1`, `2`)
    /// and the three-digit code.
    case status(version: String, code: Int)
    /// `field-name ":" OWS field-value OWS`: the name lowercased, the value without its
    /// surrounding spaces and tabs.
    case field(name: String, value: String)
    /// The empty line that ends a head.
    case end

    /// Why a line is none of those.
    package struct Problem: Error, Equatable, Sendable, CustomStringConvertible {
        package var description: String
    }

    /// Reads one line, its LF already cut (a CR before it is dropped here).
    package static func parse(_ line: some Collection<UInt8>) -> Result<HTTPHeadLine, Problem> {
        var bytes = ArraySlice(line)
        if bytes.last == 0x0D { bytes = bytes.dropLast() }
        guard let first = bytes.first else { return .success(.end) }
        if bytes.starts(with: statusPrefix) { return status(bytes.dropFirst(statusPrefix.count)) }
        // obs-fold (RFC 9112 §5.2): a line continuing the previous one is refused, not joined.
        if first == 0x20 || first == 0x09 { return .failure(Problem(description: "folded header line")) }
        guard let colon = bytes.firstIndex(of: 0x3A), colon > bytes.startIndex else {
            return .failure(Problem(description: "header line without a name"))
        }
        let name = bytes[..<colon]
        guard name.allSatisfy(HTTPWire.isTokenByte) else { return .failure(Problem(description: "invalid header name")) }
        let value = trimmed(bytes[bytes.index(after: colon)...])
        return .success(.field(name: String(decoding: name, as: UTF8.self).lowercased(), value: String(decoding: value, as: UTF8.self)))
    }

    private static let statusPrefix = Array("HTTP/".utf8)

    /// After `HTTP/`: `DIGIT ["." DIGIT] SP 3DIGIT [SP reason]`.
    private static func status(_ rest: ArraySlice<UInt8>) -> Result<HTTPHeadLine, Problem> {
        guard let space = rest.firstIndex(of: 0x20) else { return .failure(Problem(description: "not an HTTP status line")) }
        let version = rest[..<space]
        let isVersion = version.count == 1 ? HTTPWire.isDigit(version[version.startIndex])
            : version.count == 3 && HTTPWire.isDigit(version[version.startIndex]) && version[version.startIndex + 1] == 0x2E
                && HTTPWire.isDigit(version[version.startIndex + 2])
        guard isVersion else { return .failure(Problem(description: "not an HTTP status line")) }
        let codeStart = rest.index(after: space)
        let codeEnd = rest.index(codeStart, offsetBy: 3, limitedBy: rest.endIndex) ?? rest.endIndex
        guard let code = HTTPWire.statusCode(rest[codeStart..<codeEnd]), codeEnd == rest.endIndex || rest[codeEnd] == 0x20 else {
            return .failure(Problem(description: "invalid status code"))
        }
        return .success(.status(version: String(decoding: version, as: UTF8.self), code: code))
    }

    /// `value` without the spaces and tabs around it (OWS).
    package static func trimmed(_ value: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var value = value
        while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
        while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
        return value
    }
}
