import ReachabilityBase

/// Reads the answer to a connectivity probe: an HTTP/1.1 response, as bytes arrive. Pure, so
/// every hostile shape (endless headers, lying lengths, broken chunking) is tested without a
/// socket; the probe stops reading at `maximumResponseBytes` whatever the server sends.
struct ProbeResponseParser: Sendable {
    /// Longest header section accepted.
    static let maximumHeaderBytes = 16 << 10
    /// Longest `expectedResponse`.
    static let maximumExpectedLength = 4096
    /// Bytes read from the server before the probe stops listening.
    static let maximumResponseBytes = 64 << 10

    /// What the server answered, as far as the check needs it.
    struct Response: Equatable, Sendable {
        var status: Int
        var location: String?
        /// The first bytes of the body, up to the parser's `bodyLimit`.
        var bodyPrefix: [UInt8]
        /// Whether `bodyPrefix` is the whole body.
        var isBodyComplete: Bool
        /// Whether a header line was exactly `X-NetworkManager-Status: online` (any case, CRLF):
        /// NetworkManager's own servers say "online" this way, whatever the status and body.
        var isMarkedOnline = false
    }

    enum Progress: Equatable, Sendable {
        case needMore
        case complete(Response)
        case malformed(String)
    }

    /// Body bytes the caller needs to decide (the expected response's length, at least 1).
    let bodyLimit: Int
    private(set) var received: [UInt8] = []

    init(bodyLimit: Int) {
        self.bodyLimit = max(bodyLimit, 1)
    }

    /// Adds bytes from the socket and says whether the answer is decided.
    mutating func consume(_ bytes: some Sequence<UInt8>) -> Progress {
        received.append(contentsOf: bytes)
        if received.count > Self.maximumResponseBytes { received.removeLast(received.count - Self.maximumResponseBytes) }
        return Self.interpret(received, isEnd: received.count >= Self.maximumResponseBytes, bodyLimit: bodyLimit)
    }

    /// The server closed the connection.
    func finish() -> Progress {
        Self.interpret(received, isEnd: true, bodyLimit: bodyLimit)
    }

    /// Decides from everything received so far; `isEnd` when no more bytes will come.
    static func interpret(_ bytes: [UInt8], isEnd: Bool, bodyLimit: Int) -> Progress {
        var start = 0
        // NetworkManager reads the header in every head libcurl hands it, interim ones included.
        var markedOnline = false
        while true {
            guard let (headerEnd, bodyStart) = endOfHeaders(bytes, from: start) else {
                if bytes.count - start > maximumHeaderBytes { return .malformed("header section longer than \(maximumHeaderBytes / 1024) KiB") }
                if isEnd {
                    return .malformed(bytes.isEmpty ? "connection closed without an answer" : "connection closed inside the headers")
                }
                return .needMore
            }
            if headerEnd - start > maximumHeaderBytes { return .malformed("header section longer than \(maximumHeaderBytes / 1024) KiB") }
            var head: Head
            switch parseHead(bytes[start..<headerEnd]) {
            case .success(let parsed): head = parsed
            case .failure(let problem): return .malformed(problem.reason)
            }
            markedOnline = markedOnline || head.isMarkedOnline
            head.isMarkedOnline = markedOnline
            if (100...199).contains(head.status) {
                start = bodyStart  // interim response (100 Continue): the real one follows
                continue
            }
            return body(bytes, from: bodyStart, head: head, isEnd: isEnd, bodyLimit: bodyLimit)
        }
    }

    struct Problem: Error { var reason: String }

    struct Head {
        var status: Int
        var location: String?
        var contentLength: Int?
        var isChunked = false
        var isMarkedOnline = false
    }

    /// NetworkManager's status header line, compared as it does: the whole line, any case, with
    /// its CRLF (`HEADER_STATUS_ONLINE` and `g_ascii_strncasecmp` in nm-connectivity.c).
    static let onlineHeaderLine = Array("x-networkmanager-status: online\r".utf8)

    /// End of the header block (index of the blank line) and start of the body; bare LF accepted.
    static func endOfHeaders(_ bytes: [UInt8], from start: Int) -> (Int, Int)? {
        var index = start
        while index < bytes.count {
            if bytes[index] == 0x0A {
                if index + 1 < bytes.count, bytes[index + 1] == 0x0A { return (index + 1, index + 2) }
                if index + 2 < bytes.count, bytes[index + 1] == 0x0D, bytes[index + 2] == 0x0A { return (index + 1, index + 3) }
            }
            index += 1
        }
        return nil
    }

    static func parseHead(_ block: ArraySlice<UInt8>) -> Result<Head, Problem> {
        let rawLines = block.split(separator: 0x0A, omittingEmptySubsequences: false)
        let isMarkedOnline = rawLines.dropFirst().contains { line in
            line.count == onlineHeaderLine.count && zip(line, onlineHeaderLine).allSatisfy { asciiLowercase($0) == $1 }
        }
        var lines = rawLines.map { line -> ArraySlice<UInt8> in
            line.last == 0x0D ? line.dropLast() : line
        }
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard let statusLine = lines.first, !statusLine.isEmpty else { return .failure(Problem(reason: "empty status line")) }
        // The line rules are HTTPHeadLine's, the engine's too; the probe speaks HTTP/1.x only.
        let status: Int
        switch HTTPHeadLine.parse(statusLine) {
        case .success(.status(let version, let code)) where version.hasPrefix("1."): status = code
        case .failure(let problem) where statusLine.starts(with: Array("HTTP/1.".utf8)): return .failure(Problem(reason: problem.description))
        default: return .failure(Problem(reason: "not an HTTP/1.x status line"))
        }
        var head = Head(status: status, isMarkedOnline: isMarkedOnline)
        for line in lines.dropFirst() {
            let name: String, value: String
            switch HTTPHeadLine.parse(line) {
            case .success(.field(let fieldName, let fieldValue)): (name, value) = (fieldName, fieldValue)
            case .success(.end): continue
            case .success(.status): return .failure(Problem(reason: "header line without a name"))
            case .failure(let problem): return .failure(Problem(reason: problem.description))
            }
            switch name {
            case "location":
                if head.location == nil { head.location = value }
            case "content-length":
                guard value.utf8.count <= 18, let digits = HTTPWire.digits(value), let length = Int(exactly: digits) else {
                    return .failure(Problem(reason: "invalid Content-Length"))
                }
                if let previous = head.contentLength, previous != length {
                    return .failure(Problem(reason: "conflicting Content-Length headers"))
                }
                head.contentLength = length
            case "transfer-encoding":
                let codings = value.lowercased().split(separator: ",")
                head.isChunked = codings.last.map { $0.trimmingSpaces == "chunked" } ?? false
            default:
                break
            }
        }
        return .success(head)
    }

    static func body(_ bytes: [UInt8], from start: Int, head: Head, isEnd: Bool, bodyLimit: Int) -> Progress {
        func done(_ prefix: ArraySlice<UInt8>, whole: Bool) -> Progress {
            .complete(Response(status: head.status, location: head.location,
                               bodyPrefix: Array(prefix.prefix(bodyLimit)), isBodyComplete: whole && prefix.count <= bodyLimit,
                               isMarkedOnline: head.isMarkedOnline))
        }
        let available = bytes[start...]
        // The status header decides alone: no body byte can change the answer.
        if head.isMarkedOnline { return done([], whole: false) }
        if head.status == 204 || head.status == 304 { return done([], whole: true) }
        if head.isChunked {
            return chunked(available, isEnd: isEnd, bodyLimit: bodyLimit, head: head)
        }
        if let length = head.contentLength {
            if available.count >= length { return done(available.prefix(length), whole: true) }
            if available.count >= bodyLimit || isEnd { return done(available, whole: false) }
            return .needMore
        }
        if available.count >= bodyLimit || isEnd { return done(available, whole: isEnd) }
        return .needMore
    }

    static func chunked(_ data: ArraySlice<UInt8>, isEnd: Bool, bodyLimit: Int, head: Head) -> Progress {
        var body: [UInt8] = []
        var index = data.startIndex
        func result(whole: Bool) -> Progress {
            .complete(Response(status: head.status, location: head.location, bodyPrefix: Array(body.prefix(bodyLimit)),
                               isBodyComplete: whole && body.count <= bodyLimit, isMarkedOnline: head.isMarkedOnline))
        }
        while true {
            if body.count >= bodyLimit { return result(whole: false) }
            guard let lineEnd = data[index...].firstIndex(of: 0x0A) else {
                if data.endIndex - index > 1024 { return .malformed("chunk size line longer than 1 KiB") }
                return isEnd ? result(whole: false) : .needMore
            }
            var sizeText = data[index..<lineEnd]
            if sizeText.last == 0x0D { sizeText = sizeText.dropLast() }
            if let semicolon = sizeText.firstIndex(of: 0x3B) { sizeText = sizeText[..<semicolon] }
            sizeText = HTTPHeadLine.trimmed(sizeText)
            guard let size = HTTPWire.chunkSize(sizeText) else {
                return .malformed("invalid chunk size")
            }
            index = lineEnd + 1
            if size == 0 { return result(whole: true) }
            let end = min(index + size, data.endIndex)
            body.append(contentsOf: data[index..<end].prefix(bodyLimit - body.count))
            if end < index + size { return body.count >= bodyLimit || isEnd ? result(whole: false) : .needMore }
            index = end
            // CRLF after the chunk data.
            if index < data.endIndex, data[index] == 0x0D { index += 1 }
            if index < data.endIndex {
                guard data[index] == 0x0A else { return .malformed("chunk data longer than its size") }
                index += 1
            } else {
                return body.count >= bodyLimit || isEnd ? result(whole: false) : .needMore
            }
        }
    }

    static func asciiLowercase(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte + 0x20 : byte }
}

private extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while text.first == " " || text.first == "\t" { text = text.dropFirst() }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return text
    }
}

/// Turns a probe's answer into connectivity by NetworkManager's rules (`nm-connectivity.c`:
/// `easy_header_cb`, `easy_write_cb`, `_con_curl_check_connectivity`). Pure.
///
/// - A header line `X-NetworkManager-Status: online` is `full`, whatever the status and body
///   (Ubuntu's and GNOME's servers answer `204` with it, and no body to match).
/// - With an expected text, a body that starts with it is `full`, whatever the status (Fedora's
///   `hotspot.txt` answers `200` with `OK`).
/// - With none (`response=` empty), `204` (with any body) or a `200` with an empty body is `full`.
/// - Anything else that answers is a captive portal, as for NetworkManager: a redirect (never
///   followed; the portal is at its `Location` when that is an http(s) URL or a path), `511`, a
///   page that is not the expected one, a body that stops short of it.
/// - One deliberate difference: an HTTP error status (`4xx`, `5xx`, except `511`) without the
///   expected answer is `limited`, where NetworkManager says `portal`. An error is not a login
///   page, and `portal` would stop every download until a login that does not exist (a check
///   server in trouble is not the user's network in trouble).
/// Transport failures (timeout, refused, reset, DNS, a malformed reply) are `limited` in the
/// probe, before classification, as curl errors are for NetworkManager.
enum ConnectivityClassifier {
    static func classify(_ response: ProbeResponseParser.Response, expected: [UInt8],
                         probe: ProbeURL, url: String) -> (Connectivity, portalURL: String?) {
        if response.isMarkedOnline { return (.full, nil) }
        if expected.isEmpty {
            if response.status == 204 { return (.full, nil) }
            if response.status == 200, response.bodyPrefix.isEmpty, response.isBodyComplete { return (.full, nil) }
        } else if response.bodyPrefix.starts(with: expected) {
            return (.full, nil)
        }
        switch response.status {
        case 300...399, 511:
            return (.portal, response.location.flatMap(probe.resolve(location:)) ?? url)
        case 400...599:
            return (.limited, nil)
        default:
            return (.portal, url)
        }
    }
}
