import FoundationEssentials
import LinuxReachability
import ReachabilityBase

/// The final header block of one HTTP response.
package struct ResponseHead: Sendable, Hashable {
    package var statusCode: Int
    /// Field values by lowercased name; repeated fields are joined with ", ".
    package var fields: [String: String]

    package init(statusCode: Int, fields: [String: String] = [:]) {
        self.statusCode = statusCode
        self.fields = Dictionary(uniqueKeysWithValues: fields.map { ($0.key.lowercased(), $0.value) })
    }

    package subscript(name: String) -> String? { fields[name.lowercased()] }

    /// The ETag when it is strong (`ResumeValidator`); weak ETags (`W/"..."`) cannot validate
    /// byte ranges, and one that is not quoted or not header-safe would be refused when read back.
    var strongEntityTag: String? {
        guard let tag = self["etag"]?.trimmingWhitespace(), ResumeValidator.isStrongEntityTag(tag) else { return nil }
        return tag
    }

    /// The ETag as sent, weak or strong (to notice any change).
    var anyEntityTag: String? {
        guard let tag = self["etag"]?.trimmingWhitespace(), !tag.isEmpty else { return nil }
        return tag
    }

    var lastModified: String? { self["last-modified"]?.trimmingWhitespace() }

    /// Last-Modified when it is a strong validator (RFC 9110 8.8.2.2): the response's Date is at
    /// least one second later, so the resource cannot have changed twice within that second
    /// unnoticed. Without a parseable Date it is weak.
    var strongLastModified: String? {
        guard let text = lastModified, let modified = HTTPDate.parse(text),
              let dateText = self["date"], let date = HTTPDate.parse(dateText),
              date.timeIntervalSince(modified) >= 1 else { return nil }
        return text
    }

    /// Repeated Content-Length fields arrive joined with ", "; identical repeats are one value.
    var contentLength: Int64? {
        guard case .value(let length)? = contentLengthField else { return nil }
        return length
    }

    /// What is wrong with the response's Content-Length, when something is: fields that
    /// disagree, or a value that is not a length (not digits, or more than any file can hold).
    var contentLengthProblem: String? {
        switch contentLengthField {
        case .conflicting?: "the server sent conflicting Content-Length headers (\(self["content-length"] ?? ""))"
        case .invalid(let text)?:
            text.utf8.allSatisfy(HTTPWire.isDigit)
                ? "the server sent an impossible Content-Length (\(text): more than any file can hold)"
                : "the server sent an invalid Content-Length (\(text))"
        case .value?, nil: nil
        }
    }

    private enum ContentLengthField { case value(Int64), conflicting, invalid(String) }

    private var contentLengthField: ContentLengthField? {
        guard let text = self["content-length"] else { return nil }
        let values = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingWhitespace() }
        guard let first = values.first, values.allSatisfy({ $0 == first }) else { return .conflicting }
        guard let length = HTTPWire.digits(first) else {
            return .invalid(String(first.prefix(40)))
        }
        return .value(length)
    }

    /// A Content-Encoding other than identity: we ask for identity and store bytes as sent, so
    /// an encoded body would be stored encoded.
    var unrequestedContentEncoding: String? {
        guard let text = self["content-encoding"]?.trimmingWhitespace(), !text.isEmpty,
              text.lowercased() != "identity" else { return nil }
        return text
    }
}

/// Collects header lines as libcurl's header callback delivers them (every response, including
/// interim 1xx and followed redirects, starts with its status line). Each line is read by
/// `HTTPHeadLine`, the probe's reader too; a line libcurl passed that is no field is skipped.
struct HeaderAccumulator: Sendable {
    private var statusCode: Int?
    private var fields: [String: String] = [:]

    /// Feeds one raw line (with or without CRLF); returns the head when the blank line ends it.
    mutating func feed(_ rawLine: String) -> ResponseHead? {
        var line = Array(rawLine.utf8)
        if line.last == 0x0A { line.removeLast() }
        switch HTTPHeadLine.parse(line) {
        case .success(.end):
            defer { statusCode = nil; fields = [:] }
            guard let statusCode else { return nil }
            return ResponseHead(statusCode: statusCode, fields: fields)
        case .success(.status(_, let code)):
            (statusCode, fields) = (code, [:])
        case .failure where line.starts(with: Array("HTTP/".utf8)):
            // A status line with no usable code: its head is dropped whole.
            (statusCode, fields) = (nil, [:])
        case .success(.field(let name, let value)):
            guard statusCode != nil else { return nil }
            if let existing = fields[name] { fields[name] = existing + ", " + value } else { fields[name] = value }
        case .failure:
            break
        }
        return nil
    }
}
