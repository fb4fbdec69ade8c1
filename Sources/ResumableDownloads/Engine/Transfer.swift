import FoundationEssentials
import LinuxReachability
import Synchronization
import ReachabilityBase

/// One attempt: its primary connection and, while raced, the racer. Engine thread only.
final class Transfer {
    enum RaceDecision { case racerWon, originalWon }

    let id: UInt64
    let request: TransferRequest
    let file: PartialFile
    let callbacks: TransferCallbacks
    var stall: StallDetector
    /// The context that delivers into the file (set right after init: it refers back to this).
    var primary: TransferContext {
        get { primaryContext! }
        set { primaryContext = newValue }
    }
    private var primaryContext: TransferContext?
    var racer: TransferContext?
    /// Taken in a callback, carried out after `perform()`.
    var raceDecision: RaceDecision?
    /// Whether the current silence was already reported.
    var isSuspected = false
    /// Whether `.responseStarted` was reported (once per attempt, from whichever connection).
    var hasReportedResponse = false
    /// Whether `.entityTagChanged` was reported (once per attempt).
    var hasReportedEntityTagChange = false
    /// When the attempt started (libcurl's timings count from about then).
    let startedAt = ContinuousClock.now
    /// Body bytes accepted during this attempt, over every connection.
    var bytesReceived: Int64 = 0
    /// The receive limit, shared by every connection of the attempt.
    var rate: ReceiveRateLimiter?
    /// The segment group this transfer is a member of, and its id there (`SegmentGroup`).
    weak var group: SegmentGroup?
    var member = 0
    /// A member stores bytes up to here (the planner moves it) ...
    var segmentEnd = Int64.max
    /// ... and compares the bytes after it with the disk up to here (its request's end).
    var seamLimit = Int64.max
    /// Whether the member stored its whole range (and compared past it where it could).
    var finishedRange = false
    /// Whether the seam at the start (a resume overlap) was reported verified.
    var reportedStartSeam = false
    /// One past the last byte a member stored.
    var storedUpTo: Int64 = 0
    /// Whether part of the bytes past a member's end could not be compared (not on disk yet).
    var seamUnchecked = false
    /// When gathered bytes are handed to the file (and so journaled): by bytes and by time.
    var journalRule = SegmentJournalRule.single
    /// The receive buffer set on a member's socket (`SegmentPlanner.receiveBuffer`), nil while
    /// the kernel autotunes it.
    var receiveBuffer: Int?
    var stallTimeout: Duration { request.settings.stallTimeout }

    init(id: UInt64, request: TransferRequest, file: PartialFile, callbacks: TransferCallbacks, stall: StallDetector) {
        self.id = id
        self.request = request
        self.file = file
        self.callbacks = callbacks
        self.stall = stall
    }
}

/// Per-connection state used by libcurl's callbacks on the engine thread. Held strongly by the
/// engine (through `handles` and its `Transfer`) while its easy handle exists, and passed to
/// libcurl unretained: the handle is always cleaned up before the context is released, so no weak
/// box is needed. `transfer` is unowned: a transfer outlives its connections.
final class TransferContext {
    enum Role: Equatable {
        /// Delivers into the file.
        case primary
        /// Races the primary from `startOffset`; holds its bytes back until it wins.
        case racer(startOffset: Int64)
        /// Sends the primary's request again while the primary has no body; holds its answer
        /// back until it wins.
        case replica
    }

    unowned let transfer: Transfer
    var role: Role
    /// When the handle was made (libcurl's timings count from about then).
    let createdAt = ContinuousClock.now
    var machine: ResponseStateMachine
    var headers = HeaderAccumulator()
    var easy: CurlEasy?
    /// The socket libcurl made for this handle's connection (nil for a pooled one it reused);
    /// valid while the handle's transfer runs.
    var socket: Int32?
    var abortReason: AbortReason?
    /// Lost a race: callbacks refuse everything, the engine frees the handle.
    var isDiscarded = false
    /// Last header line or body byte, for the stall watchdog.
    var lastActivity = ContinuousClock.now
    /// Whether a response has started arriving (the watchdog ignores the connect phase).
    var hasResponse = false
    /// Whether the final response's body is being received.
    var isReceivingBody = false
    /// Whether the write callback paused the transfer because the disk is behind, and since when.
    var isPausedForBackpressure = false
    var pausedAt: ContinuousClock.Instant?
    /// Until when the write callback paused the transfer for the rate limit.
    var rateResumeAt: ContinuousClock.Instant?
    /// A racer's accepted response, applied to the file when it wins.
    private var pendingAcceptance: ResponseStateMachine.Acceptance?
    /// Why a racer refused its response (it is not the rest of this entity).
    private var rejection: AttemptResult?
    private var lastProgress = ContinuousClock.now
    /// Body bytes gathered before handing them to the writer: libcurl delivers ~16 KiB per
    /// callback on loopback, and one copy + dispatch per callback cost ~25% of throughput.
    /// 128 KiB: as fast as 256 or 512 KiB on loopback, to disk and to tmpfs, with less memory
    /// and fewer bytes a crash loses.
    /// The transfer's `journalRule` bounds it (smaller per connection when several write).
    private var chunk = Data()
    private var chunkOffset: Int64 = 0
    private var chunkStartedAt = ContinuousClock.now

    init(transfer: Transfer, role: Role, machine: ResponseStateMachine) {
        self.transfer = transfer
        self.role = role
        self.machine = machine
    }

    private var file: PartialFile { transfer.file }

    /// Header callback: false stops the transfer.
    func didReceiveHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if isDiscarded { return false }
        if !transfer.hasReportedResponse {
            // The server answers (on whichever connection asked).
            transfer.hasReportedResponse = true
            let waited = easy?.requestSendableAfter.map { ContinuousClock.now - (createdAt + $0) }
            transfer.callbacks.events(.responseStarted(connectTime: easy?.connectTime, waited: waited))
        }
        hasResponse = true
        lastActivity = .now
        let line = String(decoding: bytes, as: UTF8.self)
        guard let head = headers.feed(line) else { return true }
        if !transfer.hasReportedEntityTagChange, machine.showsChangedEntityTag(head) {
            transfer.hasReportedEntityTagChange = true
            transfer.callbacks.events(.entityTagChanged)
        }
        switch machine.event(.head(head)) {
        case .begin(let acceptance):
            switch role {
            case .racer(let offset):
                guard !acceptance.restartsFromZero, acceptance.startOffset == offset else {
                    rejection = .restartFromZero(reason: "the racing connection was not given the rest of the entity")
                    return false
                }
                pendingAcceptance = acceptance
            case .replica:
                pendingAcceptance = acceptance
            case .primary:
                if let group = transfer.group, acceptance.restartsFromZero, !group.restartsInPlace(transfer, acceptance) {
                    // An attempt of several connections never rewinds the file under the others:
                    // it ends, and the download's machine restarts it (over one connection).
                    rejection = .restartFromZero(reason:
                        "the server sent the whole resource instead of the range: it changed, or it ignores ranges")
                    return false
                }
                begin(transfer.group?.recordedAcceptance(of: transfer.member, acceptance) ?? acceptance)
                transfer.group?.accepted(transfer, acceptance)
            }
            return true
        case .abort:
            return false   // the machine remembers the result; libcurl ends with a write error
        case .ignore, .write, .compare, .finish:
            return true
        }
    }

    private func begin(_ acceptance: ResponseStateMachine.Acceptance) {
        isReceivingBody = true
        transfer.stall.restart(at: .now)
        transfer.isSuspected = false   // a silence before the answer was another one
        file.begin(acceptance)
        if acceptance.restartsFromZero {
            transfer.callbacks.events(.restartedFromZero(
                reason: "the server sent the whole resource instead of the range: it changed, or it ignores ranges"))
        }
    }

    /// The racer won: it delivers into the file from now on.
    func becomePrimary() {
        guard role != .primary else { return }
        role = .primary
        if let acceptance = pendingAcceptance {
            pendingAcceptance = nil
            begin(acceptance)
            transfer.group?.accepted(transfer, acceptance)
        }
    }

    /// Write callback.
    func didReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyDisposition {
        if isDiscarded { return .abort }
        guard settleRace() else { return .abort }
        if let error = file.writeError {
            abortReason = .writeFailed(error)
            return .abort
        }
        let now = ContinuousClock.now
        lastActivity = now
        if file.shouldPause(adding: chunk.count + bytes.count) {
            isPausedForBackpressure = true
            pausedAt = now
            return .pause
        }
        if let resumeAt = transfer.rate?.blockedUntil(now) ?? transfer.request.agentRate.flatMap({
            $0.limit.admit(bytes.count, job: $0.job, priority: $0.priority, at: now)
        }) {
            // libcurl keeps the chunk and delivers it again once the engine unpauses at `resumeAt`.
            rateResumeAt = resumeAt
            return .pause
        }
        _ = transfer.rate?.admit(bytes.count, at: now)
        var bytes = bytes
        var action = machine.event(.body(count: bytes.count))
        if case .compare(let offset, let count) = action {
            // The overlap before the resume point: compared with the disk, never written.
            transfer.bytesReceived += Int64(count)
            transfer.stall.bytesArrived(at: now)
            transfer.isSuspected = false
            guard file.matchesDisk(UnsafeRawBufferPointer(rebasing: bytes[..<count]), at: offset) else {
                _ = machine.event(.overlapMismatch)
                return .abort
            }
            if count == bytes.count { return .consumed }
            bytes = UnsafeRawBufferPointer(rebasing: bytes[count...])
            action = .write(at: offset + Int64(count))
        }
        switch action {
        case .write(let offset):
            if transfer.group != nil { return segmentWrite(bytes, at: offset, now: now) }
            gather(bytes, at: offset, now: now)
            transfer.bytesReceived += Int64(bytes.count)
            transfer.stall.bytesArrived(at: now)
            transfer.isSuspected = false
            if now - lastProgress >= .milliseconds(100) {
                lastProgress = now
                transfer.callbacks.progress(offset + Int64(bytes.count))
            }
            return .consumed
        case .abort, .finish:
            return .abort
        case .ignore, .begin, .compare:
            return .consumed
        }
    }

    /// Settles a race on this connection's first bytes; false when this connection lost it and
    /// is discarded.
    private func settleRace() -> Bool {
        if role != .primary {
            // The first byte decides the race: the racer wins only if the primary delivered
            // nothing since the race began (a replica: the primary's body has not started).
            let primaryIsStill = switch role {
            case .racer(let offset): transfer.primary.machine.nextOffset == offset
            case .replica: transfer.primary.machine.isAwaitingHead
            case .primary: false
            }
            guard transfer.raceDecision == nil, primaryIsStill, pendingAcceptance != nil else {
                // The old connection answered first (a replica's primary has its head): it carries on.
                if transfer.raceDecision == nil { transfer.raceDecision = .originalWon }
                isDiscarded = true
                return false
            }
            transfer.raceDecision = .racerWon
            transfer.primary.isDiscarded = true
            transfer.primary.flushChunk()
            becomePrimary()
        } else if transfer.racer != nil, transfer.raceDecision == nil {
            transfer.raceDecision = .originalWon
            transfer.racer?.isDiscarded = true
        }
        return true
    }

    /// Adds body bytes to the gather buffer (handed to the file when full).
    func gather(_ bytes: UnsafeRawBufferPointer, at offset: Int64, now: ContinuousClock.Instant = .now) {
        if !chunk.isEmpty, chunkOffset + Int64(chunk.count) != offset { flushChunk() }
        if chunk.isEmpty {
            chunkOffset = offset
            chunkStartedAt = now
            chunk.reserveCapacity(transfer.journalRule.bytes)
        }
        chunk.append(bytes.bindMemory(to: UInt8.self))
        if transfer.journalRule.isDue(gathered: chunk.count, since: chunkStartedAt, now: now) { flushChunk() }
    }

    /// Hands the gathered bytes over once they waited the rule's interval (a connection that went
    /// quiet: the engine's tick calls this).
    func flushIfDue(now: ContinuousClock.Instant) {
        if transfer.journalRule.isDue(gathered: chunk.count, since: chunkStartedAt, now: now) { flushChunk() }
    }

    /// Hands the gathered bytes to the partial file (also when the attempt ends).
    func flushChunk() {
        guard !chunk.isEmpty else { return }
        file.append(chunk, at: chunkOffset)
        chunk = Data()
    }

    /// How this connection's attempt ended, from its response machine and libcurl's result.
    func result(failure: TransferFailure?, detail: String, info: CurlTransferInfo? = nil) -> AttemptResult {
        if let abortReason { return .aborted(abortReason) }
        if let rejection { return rejection }
        let error = failure.map { transportError(for: $0, detail: detail, info: info) }
        if case .finish(let finished) = machine.event(.ended(error)) { return finished }
        return .transport(error ?? .networkConnectionLost)
    }

    /// What libcurl's `failure` on this connection means, with its errno and whether it had connected.
    func transportError(for failure: TransferFailure, detail: String, info: CurlTransferInfo? = nil) -> DownloadError {
        let info = info ?? easy?.info()
        return TransferErrorMapping.error(for: failure, osErrno: info?.osErrno ?? 0, didConnect: info?.didConnect ?? false,
                                          detail: detail,
                                          proxy: ProxyEnvironment.proxy(for: transfer.request.url,
                                                                        explicit: transfer.request.settings.proxy))
    }
}
