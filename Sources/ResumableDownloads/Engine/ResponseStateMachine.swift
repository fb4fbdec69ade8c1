import FoundationEssentials
import LinuxReachability

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
/// A resume from N asks for `Range: bytes=(N-overlap)-` with `If-Range: <strong validator>` (or a
/// plain GET when N is zero). A 206 must start there, agree with the known total and carry no
/// validator that differs from the recorded ones (any such difference restarts from zero); its
/// first `overlap` bytes are compared with the bytes on disk before anything is appended, so a
/// server that ignores If-Range, or sends no validator at all, can never splice two versions.
/// A 200 means the server ignored the range or the entity changed, so the file restarts from
/// zero with this body; 416 `bytes */T` is "complete" only when T == N == the recorded total.
/// Conflicting Content-Lengths and a Content-Encoding we did not ask for are errors.
struct ResponseStateMachine: Sendable {
    struct Request: Sendable, Hashable {
        /// Where the stored bytes end (the resume point); zero means no Range header.
        var offset: Int64
        /// The strong ETag recorded for the stored bytes.
        var entityTag: String?
        /// The total length recorded from earlier responses.
        var knownTotalLength: Int64?
        /// The strong Last-Modified recorded for the stored bytes.
        var lastModified: String? = nil
        /// Any ETag (weak ones too) seen with the stored bytes: a different one means a change.
        var observedEntityTag: String? = nil
        /// Bytes before `offset` asked for again and compared with the disk.
        var overlap: Int64 = 0
        /// One past the last byte asked for (a segment's range with its seam overlap); nil asks
        /// for everything from `rangeStart` on.
        var end: Int64? = nil
        /// A connection fetching a range beside others (`SegmentPlanner`): only a 206 for exactly
        /// the bytes asked, of the recorded entity, will do. Anything else is refused (see
        /// `RangeRefusal`) and nothing is written.
        var isSegment = false
        /// With `isSegment`: the 206 must carry the recorded strong validator (segments without
        /// an expected SHA-256 rest on it).
        var requiresValidator = false
        /// A probe of the bytes at `offset` (no overlap), sent after responses were cut at that
        /// offset again and again: only its validators are read, against the recorded ones, and
        /// none of its bytes is written (the overlap rule stays whole). A cache holding part of
        /// an older version (nginx slice) serves the bytes before the seam as that version and
        /// cuts every response where its slices change version; this is how that is told.
        var isSeamProbe = false

        /// The first byte asked for.
        var rangeStart: Int64 { offset - overlap }
    }

    /// Why a segment's response was not used.
    enum RangeRefusal: Sendable, Hashable {
        /// The entity is not the recorded one (another validator or length): the download
        /// restarts, over one connection.
        case entityChanged(String)
        /// The server did not answer with the range (a 200, another range, no validator): the
        /// download goes on over the connections it has, without more segments.
        case rangeNotHonoured(String)

        var reason: String {
            switch self {
            case .entityChanged(let reason), .rangeNotHonoured(let reason): reason
            }
        }
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
        /// Bytes before this offset are already stored: they are compared, not written.
        var verifyUntil: Int64? = nil
        /// Any ETag the response carried (weak ones too).
        var observedEntityTag: String? = nil
        /// The response said `Accept-Ranges: none`: no range is asked of this server beside it.
        var refusesRanges = false
    }

    enum Event: Sendable, Hashable {
        /// A complete header block arrived.
        case head(ResponseHead)
        /// `count` body bytes arrived.
        case body(count: Int)
        /// libcurl finished the transfer, with a classified transport error or nil for success.
        case ended(DownloadError?)
        /// Bytes of the overlap differ from the bytes on disk.
        case overlapMismatch
    }

    enum Action: Sendable, Hashable {
        /// Nothing to do (interim response, redirect being followed).
        case ignore
        /// Start storing the body as described (truncate first when `restartsFromZero`).
        case begin(Acceptance)
        /// Store these bytes at this offset.
        case write(at: Int64)
        /// The first `count` bytes are already stored at `at`: compare them with the disk (then
        /// send `overlapMismatch` if they differ); store the rest at `at + count`.
        case compare(at: Int64, count: Int)
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
    /// Set when a segment's response was refused.
    private(set) var refusal: RangeRefusal?

    init(request: Request) { self.request = request }

    /// The response being received, once its head was accepted.
    var acceptance: Acceptance? {
        if case .receiving(let acceptance, _) = state { return acceptance }
        return nil
    }

    /// Whether `head` carries another ETag (weak or strong) than the one recorded, for an entity
    /// of the recorded length: a server whose ETags vary per response, not per version (or a
    /// file replaced by one of the same length).
    func showsChangedEntityTag(_ head: ResponseHead) -> Bool {
        guard let recorded = request.observedEntityTag ?? request.entityTag, let received = head.anyEntityTag,
              recorded != received, let known = request.knownTotalLength else { return false }
        let total: Int64? = switch head.statusCode {
        case 200: head.contentLength
        case 206: head["content-range"].flatMap(ContentRange.init)?.totalLength
        default: nil
        }
        return total == known
    }

    /// Whether no final response head has been decided on yet.
    var isAwaitingHead: Bool { state == .awaitingHead }

    /// The offset the next body byte would be written at, once receiving.
    var nextOffset: Int64? {
        if case .receiving(_, let next) = state { return next }
        return nil
    }

    // Over 60 lines on purpose: one switch over (state, event), the whole transition table in one view.
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

        case (.receiving, .overlapMismatch):
            let result = AttemptResult.restartFromZero(reason:
                "the bytes before the resume offset differ from the server's: the file changed")
            state = .rejected(result)
            return .abort(result)

        case (.awaitingHead, .overlapMismatch), (.rejected, .overlapMismatch):
            return .ignore

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
            if let verifyUntil = acceptance.verifyUntil, next < verifyUntil {
                return .compare(at: next, count: Int(min(Int64(count), verifyUntil - next)))
            }
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
            if let verifyUntil = acceptance.verifyUntil, next < verifyUntil {
                return .finish(.restartFromZero(reason: "the response ended before the resume offset"))
            }
            guard let total = acceptance.totalLength else { return .finish(.completed(totalLength: next)) }
            if next == total { return .finish(.completed(totalLength: total)) }
            if next < total { return .finish(.incomplete(offset: next)) }
            return .finish(.failed(.badServerResponse.with(description: "received \(next) bytes of a \(total)-byte entity")))
        }
    }

    private mutating func decide(_ head: ResponseHead) -> Action {
        let status = head.statusCode
        if request.isSeamProbe, status == 200 || status == 206 { return .abort(seamProbeResult(head)) }
        if request.isSegment, status == 200 || status == 206, let refusal = refuseSegment(head) {
            self.refusal = refusal
            return .abort(.restartFromZero(reason: refusal.reason))
        }
        if status == 200 || status == 206 {
            if let problem = head.contentLengthProblem {
                return .abort(.failed(.badServerResponse.with(description: problem)))
            }
            if let encoding = head.unrequestedContentEncoding {
                return .abort(.failed(.badServerResponse.with(description:
                    "the server sent Content-Encoding \(encoding), which was not asked for (Accept-Encoding: identity)")))
            }
        }
        switch status {
        case 100...199:
            return .ignore
        case 300...399 where head["location"] != nil:
            return .ignore   // libcurl follows it (bounded, http/https only)
        case 200:
            let total = head.contentLength
            return .begin(Acceptance(startOffset: 0, endOffset: total, totalLength: total,
                                     entityTag: head.strongEntityTag, lastModified: head.strongLastModified,
                                     restartsFromZero: request.offset > 0, observedEntityTag: head.anyEntityTag,
                                     refusesRanges: head["accept-ranges"]?.trimmingWhitespace().lowercased() == "none"))
        case 206:
            return decidePartial(head)
        case 416:
            if request.offset > 0, request.overlap == 0, let range = head["content-range"].flatMap(ContentRange.init),
               range.range == nil, range.totalLength == request.offset, request.knownTotalLength == request.offset {
                return .abort(.completed(totalLength: request.offset))
            }
            if request.offset == 0 {
                return .abort(.failed(.badServerResponse.with(description: "416 to a request without Range")))
            }
            return .abort(.restartFromZero(reason: "416: the entity no longer extends to offset \(request.rangeStart)"))
        case 408, 429, 500...599:
            return .abort(.serverBusy(status: status, retryAfter: head["retry-after"].flatMap { RetryAfter.parse($0) }))
        default:
            return .abort(.failed(.httpStatus(status)))
        }
    }

    /// The rules for a segment's answer: a 206 for exactly the range asked (it may end early),
    /// of the recorded length, with the recorded validators (the strong one present when
    /// `requiresValidator`).
    private func refuseSegment(_ head: ResponseHead) -> RangeRefusal? {
        if let sent = request.entityTag, let received = head.strongEntityTag, sent != received {
            return .entityChanged("ETag changed from \(sent) to \(received) on another connection")
        }
        if let seen = request.observedEntityTag, let received = head.anyEntityTag, seen != received {
            return .entityChanged("ETag changed from \(seen) to \(received) on another connection")
        }
        if let recorded = request.lastModified, let received = head.lastModified, recorded != received {
            return .entityChanged("Last-Modified changed from \(recorded) to \(received) on another connection")
        }
        guard head.statusCode == 206 else {
            return .rangeNotHonoured("the server answered a range with the whole resource (200)")
        }
        guard let contentRange = head["content-range"].flatMap(ContentRange.init), let range = contentRange.range else {
            return .rangeNotHonoured("206 without a valid Content-Range")
        }
        if let known = request.knownTotalLength, let total = contentRange.totalLength, known != total {
            return .entityChanged("the length changed from \(known) to \(total) on another connection")
        }
        guard range.lowerBound == request.rangeStart, request.end.map({ range.upperBound < $0 }) ?? true,
              range.upperBound + 1 >= request.offset else {
            return .rangeNotHonoured("Content-Range \(range.lowerBound)-\(range.upperBound) is not the range asked")
        }
        if let length = head.contentLength, length != range.upperBound - range.lowerBound + 1 {
            return .rangeNotHonoured("Content-Length \(length) disagrees with Content-Range")
        }
        if request.requiresValidator {
            let validates = request.entityTag.map { $0 == head.strongEntityTag }
                ?? request.lastModified.map { $0 == head.lastModified } ?? false
            guard validates else { return .rangeNotHonoured("the range came without the entity's validator") }
        }
        return nil
    }

    /// How `head` says the entity is not the recorded one (another total length, ETag or
    /// Last-Modified), or nil. A validator that differs from the recorded one is a new version,
    /// whatever the server did with If-Range; a missing one is left to the overlap comparison.
    private func entityChange(_ head: ResponseHead, totalLength: Int64?) -> String? {
        if let known = request.knownTotalLength, let total = totalLength, known != total {
            return "total length changed from \(known) to \(total)"
        }
        if let sent = request.entityTag, let received = head.strongEntityTag, sent != received {
            return "ETag changed from \(sent) to \(received)"
        }
        if let seen = request.observedEntityTag, let received = head.anyEntityTag, seen != received {
            return "ETag changed from \(seen) to \(received)"
        }
        if let recorded = request.lastModified, let received = head.lastModified, recorded != received {
            return "Last-Modified changed from \(recorded) to \(received)"
        }
        return nil
    }

    /// A seam probe's answer: the entity changed at the offset where responses keep being cut
    /// (restart from zero, saying so), or it did not (the cut is the server's habit: a lost
    /// connection that made no progress, as the cuts before it). Nothing is written either way.
    private func seamProbeResult(_ head: ResponseHead) -> AttemptResult {
        let total = head.statusCode == 206 ? head["content-range"].flatMap(ContentRange.init)?.totalLength : head.contentLength
        guard let change = entityChange(head, totalLength: total) else {
            return .transport(.networkConnectionLost.with(description:
                "every response is cut at offset \(request.offset), and the bytes from there carry the same validators"))
        }
        return .restartFromZero(reason: "\(Self.changedVersionPrefix): every response was cut at offset \(request.offset), "
                                    + "and from there the \(change)")
    }

    /// How a version change found at a seam begins (users and tests look for it).
    static let changedVersionPrefix = "the file changed on the server (or a cache holds an older version)"

    private func decidePartial(_ head: ResponseHead) -> Action {
        guard request.offset > 0 else {
            return .abort(.failed(.badServerResponse.with(description: "206 to a request without Range")))
        }
        guard let contentRange = head["content-range"].flatMap(ContentRange.init), let range = contentRange.range else {
            return .abort(.restartFromZero(reason: "206 without a valid Content-Range"))
        }
        guard range.lowerBound == request.rangeStart else {
            return .abort(.restartFromZero(reason: "Content-Range starts at \(range.lowerBound), asked for \(request.rangeStart)"))
        }
        if let change = entityChange(head, totalLength: contentRange.totalLength) {
            return .abort(.restartFromZero(reason: change))
        }
        if let length = head.contentLength, length != range.upperBound - range.lowerBound + 1 {
            return .abort(.restartFromZero(reason: "Content-Length \(length) disagrees with Content-Range"))
        }
        if range.upperBound + 1 < request.offset {
            return .abort(.restartFromZero(reason: "the range ends before the resume offset"))
        }
        if let end = request.end, range.upperBound + 1 > end {
            return .abort(.restartFromZero(reason: "Content-Range ends at \(range.upperBound), asked for up to \(end - 1)"))
        }
        return .begin(Acceptance(startOffset: range.lowerBound, endOffset: range.upperBound + 1,
                                 totalLength: contentRange.totalLength ?? request.knownTotalLength,
                                 entityTag: head.strongEntityTag ?? request.entityTag,
                                 lastModified: head.strongLastModified ?? request.lastModified, restartsFromZero: false,
                                 verifyUntil: request.overlap > 0 ? request.offset : nil,
                                 observedEntityTag: head.anyEntityTag ?? request.observedEntityTag))
    }
}
