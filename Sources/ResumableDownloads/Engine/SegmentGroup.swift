import FoundationEssentials
import ReachabilityBase

/// One attempt that may fetch its file over several connections and paths: the owner (a
/// download's driver) sees one transfer, as before; inside, a `SegmentPlanner` decides which
/// ranges which connections fetch, and each connection is a member transfer of the engine with
/// its own request, response rules, stall detection and race. Engine thread only.
///
/// What the members do for the group (`TransferContext+Segments`): each stores bytes only up to
/// its end (which the planner moves), asks the planner before going past it, compares the bytes
/// past its end with what its neighbour stored (a seam), and reports the bytes it stored. What
/// the group does with what members report: it maps their endings to the planner's (a 206 that
/// is not the range asked refuses segments; another entity or a seam that differs restarts the
/// download over one connection; the last connection's failure ends the attempt with its
/// result, for the download's state machine to handle as before).
final class SegmentGroup {
    typealias Instant = ContinuousClock.Instant

    /// A member's request and what the group knows of it.
    final class Member {
        let id: Int
        let engineID: UInt64
        let path: SegmentPlanner.Path
        /// The range the planner gave it at the start (its end moves).
        let start: Int64
        /// A seam check: compares `seam`'s surroundings with the disk, stores nothing.
        let seam: Int64?
        var result: AttemptResult?

        init(id: Int, engineID: UInt64, path: SegmentPlanner.Path, start: Int64, seam: Int64?) {
            self.id = id
            self.engineID = engineID
            self.path = path
            self.start = start
            self.seam = seam
        }
    }

    let id: UInt64
    /// The owner's request: the template of every member's.
    let template: TransferRequest
    /// `scheme://host:port`: the per-host bound counts connections by it.
    let host: String
    /// The allowance last given to the planner.
    var allowance: Int?
    let file: PartialFile
    let callbacks: TransferCallbacks
    let segmentation: Segmentation
    var planner: SegmentPlanner
    var members: [Int: Member] = [:]
    /// Member ids by engine transfer id.
    var memberOfTransfer: [UInt64: Int] = [:]
    /// Seam checks waiting until the bytes they compare reached the file.
    var pendingChecks: [(SegmentPlanner.Request, Int64)] = []
    /// Body bytes every member accepted.
    var bytesReceived: Int64 = 0
    var hasReportedResponse = false
    var lastProgress: Instant
    var lastTick: Instant
    var lastReported: TransferConnections?
    /// Set once the group's outcome is decided: member endings are ignored from then on.
    var isFinishing = false
    /// The result of the last member that ended, and of each, for `endAttempt`.
    var lastEnding: AttemptResult?
    var results: [Int: AttemptResult] = [:]
    /// Planner actions and inputs that came up inside a libcurl callback, carried out after
    /// `perform()` (handles cannot be added or removed from inside a callback).
    var deferred: [SegmentPlanner.Action] = []
    var deferredInputs: [SegmentPlanner.Input] = []
    /// The member whose stall went to the owner (raced when the owner asks).
    var suspect: Int?
    /// The paths as the owner gave them (one per interface); the planner gets each once per
    /// source still in use (`expanded`).
    var interfacePaths: [SegmentPlanner.Path]
    /// Every byte is stored: the length, while the last pieces wait for their check.
    var completedLength: Int64?

    init(id: UInt64, template: TransferRequest, file: PartialFile, callbacks: TransferCallbacks,
         segmentation: Segmentation, now: Instant) {
        self.id = id
        self.template = template
        self.file = file
        self.callbacks = callbacks
        self.segmentation = segmentation
        host = Self.hostKey(template.url)
        var configuration = segmentation.configuration
        if ProxyEnvironment.proxy(for: template.url, explicit: template.settings.proxy) != nil {
            // A connection added through a caching proxy gets its head at once and its body when
            // the cache's fill reaches its range (`StallDetector.proxiedBodyStart`): judged
            // without it after two seconds, it was closed with its head alone and added again.
            configuration.firstByteTimeout = max(configuration.firstByteTimeout, StallDetector.proxiedBodyStart)
        }
        planner = SegmentPlanner(configuration: configuration)
        interfacePaths = segmentation.paths
        lastProgress = now
        lastTick = now
    }

    /// `paths` once per source in use, the download's own URL first (one source: `paths`).
    func expanded(_ paths: [SegmentPlanner.Path]) -> [SegmentPlanner.Path] {
        guard let sources = segmentation.sources else { return paths }
        return sources.liveSources.flatMap { source in
            paths.map { SegmentPlanner.Path(interface: $0.interface, isExpensive: $0.isExpensive, source: source) }
        }
    }

    /// The key connections are counted by: scheme, host and port.
    static func hostKey(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? "http"
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// The connections now, for events and metrics.
    var connections: TransferConnections {
        var shares: [TransferConnections.PathShare] = []
        for path in planner.paths {
            let count = planner.connections.values.filter { $0.path == path && !$0.isSeamCheck }.count
            if count > 0 { shares.append(.init(interface: path.interface, connections: count)) }
        }
        return TransferConnections(count: planner.connectionCount, paths: shares)
    }

    /// What of `acceptance` the partial file records: a hash-guarded mirror's validators are its
    /// own, bound in the ledger, and never replace the first source's in the record (the next
    /// request to the first source would carry the mirror's ETag and restart the file).
    func recordedAcceptance(of member: Int, _ acceptance: ResponseStateMachine.Acceptance) -> ResponseStateMachine.Acceptance {
        guard let sources = segmentation.sources, let source = members[member]?.path.source, source != 0,
              segmentation.hasExpectedDigest || sources.pieces != nil else { return acceptance }
        sources.bindValidator(acceptance.entityTag, of: source)
        var recorded = acceptance
        recorded.entityTag = nil
        recorded.lastModified = nil
        recorded.observedEntityTag = nil
        return recorded
    }

    /// Points `request` at `source` (its URL) with the validators a member of that source
    /// carries: the first source's, a hash-proven mirror's own ETag, or none. Returns whether the
    /// bytes are guarded by a hash (then a segment's 206 need not carry the validator).
    private func bind(_ request: inout TransferRequest, toSource source: Int) -> Bool {
        let record = file.record
        var validators = segmentation.usesValidators
        var guarded = segmentation.hasExpectedDigest
        if let sources = segmentation.sources, sources.urls.indices.contains(source) {
            request.url = sources.urls[source]
            // Mirrors proven by a hash carry no validator (each server has its own ETag); without
            // one, If-Range with the first source's validator is the proof: another answers 200.
            if segmentation.hasExpectedDigest || sources.pieces != nil {
                guarded = true
                if source != 0 { validators = false }
            }
        }
        request.entityTag = validators ? record.entityTag : nil
        request.lastModified = validators ? record.lastModified : nil
        request.observedEntityTag = validators ? record.observedEntityTag : nil
        request.ifRange = validators ? record.validator : nil
        if let sources = segmentation.sources, source != 0, guarded, !validators, let own = sources.validator(of: source) {
            // A mirror proven by a hash is held to its own ETag (bound by its first answer): it
            // may differ from the first source's (nginx's is mtime-length), never change.
            request.entityTag = own
            request.ifRange = own
        }
        return guarded
    }

    /// The request for a member fetching `range` (or checking the seam at `seam`): the template's
    /// URL, validators and settings, bound to the path, with the resume overlap before its start
    /// when those bytes are on disk, and the seam overlap after its end.
    func request(for planned: SegmentPlanner.Request, seam: Int64?) -> TransferRequest {
        var request = template
        request.segmentation = nil
        let record = file.record
        let total = planner.total ?? record.totalLength
        let start = planned.range.lowerBound
        let end = planned.range.upperBound
        request.interfaceName = planned.path.interface ?? template.interfaceName
        request.freshConnection = false
        request.knownTotalLength = total
        let guarded = bind(&request, toSource: planned.path.source)
        if seam != nil {
            // Every byte compared, none written: the "resume point" is the check's end.
            request.offset = end
            request.overlap = end - start
            request.rangeEnd = end
            request.isSegment = true
            request.requiresValidator = !guarded
            return request
        }
        // The first connection of an attempt is an ordinary request or resume (a 200 to it means
        // the entity changed); every other one fetches a range beside others.
        request.isSegment = planner.connectionCount > 1 || planner.capability == .shown
        // The bytes before the start, when they are on disk, are fetched again and compared: up
        // to 16 KiB for the first connection (the resume rule's proof that the entity on disk is
        // still the server's, beside the validator every group has), a seam's 4 KiB for a range
        // beside it (whose 206 carries the same validator), as at its end: every byte compared
        // after a kill or an outage is a byte sent twice.
        let configuration = segmentation.configuration
        let most = min(segmentation.overlap, request.isSegment ? configuration.seamOverlap : configuration.firstOverlap)
        let overlap = start > 0 ? ResumeOverlapRule.overlap(before: start, in: file, atMost: most) : 0
        request.offset = start
        request.overlap = overlap
        request.requiresValidator = request.isSegment && !guarded
        if let total, end < total {
            request.rangeEnd = min(total, end + configuration.seamOverlap)
        } else {
            request.rangeEnd = nil
        }
        // A request from zero is a plain GET (the member stops at its end).
        if start == 0 { request.rangeEnd = nil }
        return request
    }
}

/// How much of the stored bytes before a range's start a request fetches again to compare.
enum ResumeOverlapRule {
    /// Up to `atMost` of the bytes right before `start` (the download's adaptive overlap), as many
    /// as are written contiguously there (nothing when the byte before `start` is not written).
    static func overlap(before start: Int64, in file: PartialFile, atMost: Int64) -> Int64 {
        let written = file.written
        guard let run = written.ranges.first(where: { $0.lowerBound < start && $0.upperBound >= start }) else { return 0 }
        return min(atMost, start - run.lowerBound)
    }
}
