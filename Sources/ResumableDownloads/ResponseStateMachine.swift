import Foundation

/// The final header block of one HTTP response.
struct ResponseHead: Sendable, Hashable {
    var statusCode: Int
    /// Field values by lowercased name; repeated fields are joined with ", ".
    var fields: [String: String]

    init(statusCode: Int, fields: [String: String] = [:]) {
        self.statusCode = statusCode
        self.fields = Dictionary(uniqueKeysWithValues: fields.map { ($0.key.lowercased(), $0.value) })
    }

    subscript(name: String) -> String? { fields[name.lowercased()] }

    /// The ETag when it is strong; weak ETags (`W/"..."`) cannot validate byte ranges.
    var strongEntityTag: String? {
        guard let tag = self["etag"]?.trimmingWhitespace(), !tag.isEmpty, !tag.hasPrefix("W/") else { return nil }
        return tag
    }

    var lastModified: String? { self["last-modified"]?.trimmingWhitespace() }

    var contentLength: Int64? {
        guard let text = self["content-length"]?.trimmingWhitespace(),
              text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(text)
    }
}

/// Collects header lines as libcurl's header callback delivers them (every response, including
/// interim 1xx and followed redirects, starts with its status line).
struct HeaderAccumulator: Sendable {
    private var statusCode: Int?
    private var fields: [String: String] = [:]

    /// Feeds one raw line (with or without CRLF); returns the head when the blank line ends it.
    mutating func feed(_ rawLine: String) -> ResponseHead? {
        let line = rawLine.trimmingWhitespace()
        if line.isEmpty {
            defer { statusCode = nil; fields = [:] }
            guard let statusCode else { return nil }
            return ResponseHead(statusCode: statusCode, fields: fields)
        }
        if line.hasPrefix("HTTP/") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            statusCode = parts.count >= 2 ? Int(parts[1]) : nil
            fields = [:]
            return nil
        }
        guard statusCode != nil, let colon = line.firstIndex(of: ":") else { return nil }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingWhitespace()
        if let existing = fields[name] { fields[name] = existing + ", " + value } else { fields[name] = value }
        return nil
    }
}

/// Why we stopped a transfer ourselves.
enum AbortReason: Sendable, Hashable {
    /// The network path changed or went away; restart on the new path.
    case pathChanged
    /// `pause()`: checkpoint and keep the resume data.
    case paused
    /// `cancel()` or task cancellation.
    case cancelled
    /// Writing the partial file failed (disk full, I/O error).
    case writeFailed(DownloadError)
    /// The agent is shutting down.
    case shutdown
    /// The download's recovery machine ended it on its own (a stalled transfer whose server no
    /// longer answers, an outage or restart limit reached); the machine knows which.
    case recovery
}

/// How one transfer attempt ended, decided from the response and the transport result.
enum AttemptResult: Sendable, Hashable {
    /// Every byte of the entity, `0..<totalLength`, is in the partial file.
    case completed(totalLength: Int64)
    /// The body ended cleanly before the end of the entity; continue from `offset`.
    case incomplete(offset: Int64)
    /// The stored bytes cannot be continued (server changed the resource or broke the range
    /// rules); truncate and fetch from zero.
    case restartFromZero(reason: String)
    /// 5xx, 408 or 429: back off, honouring `Retry-After`.
    case serverBusy(status: Int, retryAfter: Duration?)
    /// Retrying will not help.
    case failed(DownloadError)
    /// The transport failed (already classified to a URLError code).
    case transport(DownloadError)
    /// We stopped it.
    case aborted(AbortReason)
}

/// The response rules for one ranged GET, as a state machine fed by header and body events.
///
/// The request asked for `Range: bytes=N-` with `If-Range: <validator>` (or a plain GET when N is
/// zero). A 206 must start at N and agree with the known total; a 200 means the server ignored the
/// range or the entity changed, so the file restarts from zero with this body (never splicing two
/// versions); 416 `bytes */T` with T == N means we already have everything.
struct ResponseStateMachine: Sendable {
    struct Request: Sendable, Hashable {
        /// First byte asked for; zero means no Range header.
        var offset: Int64
        /// The strong ETag sent in If-Range, if that was the validator.
        var entityTag: String?
        /// The total length recorded from earlier responses.
        var knownTotalLength: Int64?
    }

    /// Where this response's body goes.
    struct Acceptance: Sendable, Hashable {
        /// Offset in the file of the first body byte.
        var startOffset: Int64
        /// One past the last byte this response may carry, when announced.
        var endOffset: Int64?
        /// The entity's full length, when known.
        var totalLength: Int64?
        var entityTag: String?
        var lastModified: String?
        /// The stored bytes belong to another version (or the range was ignored): truncate first.
        var restartsFromZero: Bool
    }

    enum Event: Sendable, Hashable {
        /// A complete header block arrived.
        case head(ResponseHead)
        /// `count` body bytes arrived.
        case body(count: Int)
        /// libcurl finished the transfer, with a classified transport error or nil for success.
        case ended(DownloadError?)
    }

    enum Action: Sendable, Hashable {
        /// Nothing to do (interim response, redirect being followed).
        case ignore
        /// Start storing the body as described (truncate first when `restartsFromZero`).
        case begin(Acceptance)
        /// Store these bytes at this offset.
        case write(at: Int64)
        /// Stop the transfer now; report this result when it ends.
        case abort(AttemptResult)
        /// The attempt is over with this result.
        case finish(AttemptResult)
    }

    private enum State: Sendable, Hashable {
        case awaitingHead
        case receiving(Acceptance, next: Int64)
        case rejected(AttemptResult)
        case finished
    }

    let request: Request
    private var state: State = .awaitingHead

    init(request: Request) { self.request = request }

    /// The response being received, once its head was accepted.
    var acceptance: Acceptance? {
        if case .receiving(let acceptance, _) = state { return acceptance }
        return nil
    }

    /// The offset the next body byte would be written at, once receiving.
    var nextOffset: Int64? {
        if case .receiving(_, let next) = state { return next }
        return nil
    }

    mutating func event(_ event: Event) -> Action {
        switch (state, event) {
        case (.awaitingHead, .head(let head)):
            let action = decide(head)
            switch action {
            case .begin(let acceptance): state = .receiving(acceptance, next: acceptance.startOffset)
            case .abort(let result): state = .rejected(result)
            default: break
            }
            return action

        case (.receiving, .head), (.rejected, .head), (.finished, _):
            // Trailers after the body, or anything after the end: not ours to act on.
            return .ignore

        case (.awaitingHead, .body):
            state = .rejected(.failed(.badServerResponse.with(description: "body before a final response head")))
            return .abort(.failed(.badServerResponse.with(description: "body before a final response head")))

        case (.receiving(let acceptance, let next), .body(let count)):
            if let end = acceptance.endOffset, next + Int64(count) > end {
                let result = AttemptResult.failed(.badServerResponse.with(
                    description: "server sent more bytes than announced (past offset \(end))"))
                state = .rejected(result)
                return .abort(result)
            }
            state = .receiving(acceptance, next: next + Int64(count))
            return .write(at: next)

        case (.rejected(let result), .body):
            return .abort(result)

        case (.rejected(let result), .ended):
            state = .finished
            return .finish(result)

        case (.awaitingHead, .ended(let error)):
            state = .finished
            if let error { return .finish(.transport(error)) }
            return .finish(.failed(.badServerResponse.with(description: "the server sent no final response")))

        case (.receiving(let acceptance, let next), .ended(let error)):
            state = .finished
            if let error { return .finish(.transport(error)) }
            if let end = acceptance.endOffset, next < end {
                return .finish(.transport(.networkConnectionLost.with(description: "body ended early")))
            }
            guard let total = acceptance.totalLength else { return .finish(.completed(totalLength: next)) }
            if next == total { return .finish(.completed(totalLength: total)) }
            if next < total { return .finish(.incomplete(offset: next)) }
            return .finish(.failed(.badServerResponse.with(description: "received \(next) bytes of a \(total)-byte entity")))
        }
    }

    private func decide(_ head: ResponseHead) -> Action {
        let status = head.statusCode
        switch status {
        case 100...199:
            return .ignore
        case 300...399 where head["location"] != nil:
            return .ignore   // libcurl follows it (bounded, http/https only)
        case 200:
            let total = head.contentLength
            return .begin(Acceptance(startOffset: 0, endOffset: total, totalLength: total,
                                     entityTag: head.strongEntityTag, lastModified: head.lastModified,
                                     restartsFromZero: request.offset > 0))
        case 206:
            return decidePartial(head)
        case 416:
            if request.offset > 0, let range = head["content-range"].flatMap(ContentRange.init),
               range.range == nil, range.totalLength == request.offset {
                return .abort(.completed(totalLength: request.offset))
            }
            if request.offset == 0 {
                return .abort(.failed(.badServerResponse.with(description: "416 to a request without Range")))
            }
            return .abort(.restartFromZero(reason: "416: the entity no longer extends to offset \(request.offset)"))
        case 408, 429, 500...599:
            return .abort(.serverBusy(status: status, retryAfter: head["retry-after"].flatMap { RetryAfter.parse($0) }))
        default:
            return .abort(.failed(.httpStatus(status)))
        }
    }

    private func decidePartial(_ head: ResponseHead) -> Action {
        guard request.offset > 0 else {
            return .abort(.failed(.badServerResponse.with(description: "206 to a request without Range")))
        }
        guard let contentRange = head["content-range"].flatMap(ContentRange.init), let range = contentRange.range else {
            return .abort(.restartFromZero(reason: "206 without a valid Content-Range"))
        }
        guard range.lowerBound == request.offset else {
            return .abort(.restartFromZero(reason: "Content-Range starts at \(range.lowerBound), asked for \(request.offset)"))
        }
        if let known = request.knownTotalLength, let total = contentRange.totalLength, known != total {
            return .abort(.restartFromZero(reason: "total length changed from \(known) to \(total)"))
        }
        if let sent = request.entityTag, let received = head.strongEntityTag, sent != received {
            return .abort(.restartFromZero(reason: "ETag changed from \(sent) to \(received)"))
        }
        if let length = head.contentLength, length != range.upperBound - range.lowerBound + 1 {
            return .abort(.restartFromZero(reason: "Content-Length \(length) disagrees with Content-Range"))
        }
        return .begin(Acceptance(startOffset: range.lowerBound, endOffset: range.upperBound + 1,
                                 totalLength: contentRange.totalLength ?? request.knownTotalLength,
                                 entityTag: head.strongEntityTag ?? request.entityTag,
                                 lastModified: head.lastModified, restartsFromZero: false))
    }
}
