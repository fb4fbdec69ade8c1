import FoundationEssentials
import LinuxReachability
import Synchronization
import ReachabilityBase

/// Runs HTTP transfers on libcurl's multi interface from one dedicated thread.
///
/// A transfer suspected of stalling can be raced (`race`): a second connection asks for the rest
/// from the offset reached, with the same validator; whichever delivers the next body byte first
/// carries on and the other is closed, so no TCP retransmission timer decides when a transfer
/// continues after a silent outage.
///
/// `@unchecked Sendable` invariant: `multi` and everything in `transfers` and `handles` (easy
/// handles and their contexts) are touched only on the engine thread inside `run()`. Other
/// threads only append to `commands` (a Mutex) and call `curl_multi_wakeup`, which libcurl
/// documents as thread-safe.
//
// Longer than 400 lines on purpose: the engine thread's loop and the state only it may touch
// (the `@unchecked Sendable` invariant below) are checked in one place; segments are in
// TransferEngine+Segments.swift, one transfer's callbacks in Transfer.swift.
final class TransferEngine: @unchecked Sendable {
    enum Command {
        case start(UInt64, TransferRequest, PartialFile, TransferCallbacks)
        case abort(UInt64, AbortReason)
        case race(UInt64, connectTimeout: Duration)
        case unpause(UInt64)
        case paths(UInt64, [SegmentPlanner.Path])
        /// A one-shot exchange (TransferEngine+Exchanges.swift).
        case exchange(UInt64, ExchangeRequest, TransferSettings, ExchangeHandlers, @Sendable (ExchangeOutcome) -> Void)
        case shutdown
    }

    let multi: CurlMulti
    private let commands = Mutex<(queue: [Command], isShutDown: Bool)>(([], false))
    private let nextID = Atomic<UInt64>(1)
    /// Engine thread only.
    var transfers: [UInt64: Transfer] = [:]
    var handles: [UnsafeMutableRawPointer: TransferContext] = [:]
    /// Attempts fetched over several connections, by the owner's id (`SegmentGroup`).
    var groups: [UInt64: SegmentGroup] = [:]
    /// Running exchanges by id, and by easy handle.
    var exchanges: [UInt64: ExchangeContext] = [:]
    var exchangeHandles: [UnsafeMutableRawPointer: ExchangeContext] = [:]

    /// Starts the engine thread; throws when libcurl cannot be initialised.
    init() throws {
        multi = try CurlMulti()
        SystemThread.detach(name: "transfer-engine") { [self] in run() }
    }

    /// A fresh id for `start`.
    func makeTransferID() -> UInt64 { nextID.add(1, ordering: .relaxed).oldValue }

    /// Queues an attempt. `completion` is called exactly once, on the engine thread, when it ends;
    /// `progress` gets the file offset reached (about ten times a second), `events` the rest.
    /// Returns false (without calling `completion`) after `shutdown()`.
    @discardableResult
    func start(_ id: UInt64, _ request: TransferRequest, into file: PartialFile,
               progress: @escaping @Sendable (Int64) -> Void,
               events: @escaping @Sendable (TransferEvent) -> Void = { _ in },
               completion: @escaping @Sendable (TransferOutcome) -> Void) -> Bool {
        submit(.start(id, request, file, TransferCallbacks(progress: progress, events: events, completion: completion)))
    }

    /// Aborts a running attempt (path change, pause, cancel); unknown or finished ids are ignored.
    func abort(_ id: UInt64, reason: AbortReason) { submit(.abort(id, reason)) }

    /// Races a running transfer with a fresh connection (reported as `.raceEnded`); ignored when
    /// the transfer has ended or already races.
    func race(_ id: UInt64, connectTimeout: Duration) { submit(.race(id, connectTimeout: connectTimeout)) }

    /// Stops the thread; running attempts end with `.aborted(.shutdown)`.
    func shutdown() { submit(.shutdown) }

    /// The usable paths changed for a segmented attempt (ignored for others).
    func updatePaths(_ id: UInt64, _ paths: [SegmentPlanner.Path]) { submit(.paths(id, paths)) }

    @discardableResult
    func submit(_ command: Command) -> Bool {
        let accepted = commands.withLock { state -> Bool in
            guard !state.isShutDown else { return false }
            if case .shutdown = command { state.isShutDown = true }
            state.queue.append(command)
            return true
        }
        if accepted { multi.wakeup() }
        return accepted
    }

    // MARK: engine thread

    private func run() {
        var isRunning = true
        while isRunning {
            let pending = commands.withLock { state -> [Command] in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return state.queue
            }
            for command in pending where !apply(command) { isRunning = false }
            guard isRunning else { break }
            multi.perform()
            collectCompleted()
            settleRaces()
            let wake = min(watchStalls(), tickGroups(), max(1, Int(watchExchanges().milliseconds) + 1))
            // Short enough for the watchdog's granularity; wakeups cut it anyway.
            multi.poll(milliseconds: wake)
        }
        for id in Array(groups.keys) { abortGroup(id, reason: .shutdown) }
        for id in Array(transfers.keys) { finish(id, forcedResult: .aborted(.shutdown), failure: nil, detail: "") }
        for id in Array(exchanges.keys) { finishExchange(id, forced: Self.exchangeError(for: .shutdown), failure: nil, detail: "") }
        multi.cleanup()
    }

    /// Carries out one command from the queue; false for `shutdown`.
    private func apply(_ command: Command) -> Bool {
        switch command {
        case .start(let id, let request, let file, let callbacks):
            if let segmentation = request.segmentation {
                startGroup(id: id, request: request, segmentation: segmentation, file: file, callbacks: callbacks)
            } else {
                start(id: id, request: request, file: file, callbacks: callbacks)
            }
        case .exchange(let id, let request, let settings, let handlers, let completion):
            startExchange(ExchangeContext(id: id, request: request, handlers: handlers, completion: completion),
                          settings: settings)
        case .abort(let id, let reason):
            if exchanges[id] != nil {
                finishExchange(id, forced: Self.exchangeError(for: reason), failure: nil, detail: "")
            } else if groups[id] != nil {
                abortGroup(id, reason: reason)
            } else {
                finish(id, forcedResult: .aborted(reason), failure: nil, detail: "")
            }
        case .race(let id, let connectTimeout):
            if let group = groups[id] {
                raceGroup(group, connectTimeout: connectTimeout)
            } else {
                startRace(id, connectTimeout: connectTimeout)
            }
        case .paths(let id, let paths):
            groups[id].map { pathsChanged($0, paths) }
        case .unpause(let id):
            if let group = groups[id] {
                unpauseGroup(group)
            } else if let transfer = transfers[id], transfer.primary.isPausedForBackpressure {
                // The disk caught up; a pause of the rate limit is ended by its own deadline.
                transfer.primary.isPausedForBackpressure = false
                resumeReceiving(transfer, at: .now)
            }
        case .shutdown:
            return false
        }
        return true
    }

    /// Ends the transfers and exchanges libcurl reports finished.
    private func collectCompleted() {
        while let done = multi.nextCompleted() {
            if let exchange = exchangeHandles[done.handle] {
                finishExchange(exchange.id, forced: nil, failure: done.failure,
                               detail: exchange.easy?.errorText ?? done.detail)
                continue
            }
            guard let context = handles[done.handle] else { continue }
            // libcurl's own words when it wrote some, else the name of its code.
            ended(context, failure: done.failure, detail: context.easy?.errorText ?? done.detail)
        }
    }

    /// libcurl's LOW_SPEED check averages over a window of about five seconds, so a transfer that
    /// stops dead after a fast burst is noticed only seconds late. This watchdog suspects a
    /// transfer whose body has started but which received nothing for its `StallDetector`
    /// interval, and one whose response has not started (no head, or a head that does not end:
    /// a tarpit that accepts and never answers, headers dripped a byte a second) within the
    /// answer suspicion (`answerSuspicion`: about a second, longer for a host known to be slow to
    /// answer) after the request could be sent.
    /// Each silence is reported once, so the owner can race it; a transfer is aborted after
    /// `stallTimeout` without a header line or body byte (time paused by our own backpressure or
    /// rate limit does not count). LOW_SPEED stays as the backstop for the connect phase.
    /// Returns how long the engine may sleep, in milliseconds.
    private func watchStalls() -> Int {
        let now = ContinuousClock.now
        var sleep: Duration = .milliseconds(250)
        for (id, transfer) in transfers {
            let context = transfer.primary
            if let resumeAt = context.rateResumeAt {
                // Paused by the rate limit: our own silence, never a stall.
                guard now >= resumeAt else {
                    sleep = min(sleep, resumeAt - now)
                    continue
                }
                context.rateResumeAt = nil
                resumeReceiving(transfer, at: now)
                continue
            }
            guard !context.isPausedForBackpressure else { continue }
            if context.hasResponse, now - context.lastActivity > transfer.stallTimeout {
                let seconds = transfer.stallTimeout.timeInterval
                finish(id, forcedResult: .transport(.networkConnectionLost.with(
                    description: "the network connection was lost: no data for \(seconds) s")), failure: nil, detail: "")
                continue
            }
            guard !transfer.isSuspected, transfer.racer == nil else { continue }
            let deadline: ContinuousClock.Instant
            if context.isReceivingBody {
                deadline = transfer.stall.deadline
            } else {
                guard let sendable = context.easy?.requestSendableAfter else { continue }
                deadline = transfer.startedAt + sendable + transfer.request.settings.answerSuspicion
            }
            if now >= deadline {
                transfer.isSuspected = true
                transfer.callbacks.events(.stallSuspected)
            } else {
                sleep = min(sleep, deadline - now)
            }
        }
        return max(1, Int(sleep.milliseconds) + 1)
    }

    /// Ends a pause of our own (backpressure, rate limit): the silence it caused is not a gap.
    /// libcurl may deliver the held chunk at once, from inside `unpause()`.
    func resumeReceiving(_ transfer: Transfer, at now: ContinuousClock.Instant) {
        let context = transfer.primary
        context.lastActivity = now
        transfer.stall.restart(at: now)
        context.easy?.unpause()
    }

    /// Starts a transfer (an attempt, or a member of a segment group); false when libcurl refused
    /// it (`completion` was called). A group's member gets backpressure releases through the group.
    @discardableResult
    func start(id: UInt64, request: TransferRequest, file: PartialFile, callbacks: TransferCallbacks,
               group: SegmentGroup? = nil, member: Int = 0, segmentEnd: Int64 = .max) -> Bool {
        let machine = ResponseStateMachine(request: .init(offset: request.offset, entityTag: request.entityTag,
                                                          knownTotalLength: request.knownTotalLength,
                                                          lastModified: request.lastModified,
                                                          observedEntityTag: request.observedEntityTag,
                                                          overlap: request.overlap, end: request.rangeEnd,
                                                          isSegment: request.isSegment,
                                                          requiresValidator: request.requiresValidator,
                                                          isSeamProbe: request.isSeamProbe))
        let now = ContinuousClock.now
        let transfer = Transfer(id: id, request: request, file: file, callbacks: callbacks,
                                stall: StallDetector(minimum: request.settings.stallSuspicion,
                                                     maximum: request.settings.stallTimeout, now: now,
                                                     isProxied: ProxyEnvironment.proxy(for: request.url,
                                                                                       explicit: request.settings.proxy) != nil))
        transfer.rate = request.settings.maximumBytesPerSecond.map(ReceiveRateLimiter.init)
        transfer.group = group
        transfer.member = member
        transfer.segmentEnd = segmentEnd
        transfer.seamLimit = request.rangeEnd ?? Int64.max
        let context = TransferContext(transfer: transfer, role: .primary, machine: machine)
        transfer.primary = context
        guard let easy = makeEasy(request, rangeStart: request.offset - request.overlap, sendsRange: request.offset > 0,
                                  ifRange: request.ifRange, connectTimeout: request.settings.connectTimeout,
                                  freshConnection: request.freshConnection, context: context) else {
            callbacks.completion(TransferOutcome(result: .failed(.invalidRequest.with(description: "libcurl refused the transfer")),
                                                 bytesReceived: 0))
            return false
        }
        context.easy = easy
        // A group's members share the handler the group set once: setting it again would also
        // forget that a member is paused, and nothing would unpause it.
        if group == nil { file.setDrainHandler { [weak self] in self?.submit(.unpause(id)) } }
        transfers[id] = transfer
        handles[easy.handle] = context
        return true
    }

    func makeEasy(_ request: TransferRequest, rangeStart: Int64, sendsRange: Bool, ifRange: String?,
                          connectTimeout: Duration, freshConnection: Bool,
                          context: TransferContext) -> CurlEasy? {
        let settings = request.settings
        let options = CurlRequestOptions(
            url: request.url.absoluteString, rangeStart: rangeStart, sendsRange: sendsRange,
            rangeEnd: sendsRange ? request.rangeEnd : nil, ifRange: ifRange,
            interface: request.interfaceName.map { "if!\($0)" }, freshConnection: freshConnection,
            settings: settings, connectTimeout: connectTimeout,
            receiveBufferSize: settings.maximumBytesPerSecond.map {
                ReceiveRateLimiter.receiveBufferSize(bytesPerSecond: $0, maximum: settings.receiveBufferSize)
            } ?? settings.receiveBufferSize)
        guard let easy = CurlEasy(options: options, context: Unmanaged.passUnretained(context)) else { return nil }
        guard multi.add(easy) else {
            easy.cleanup()
            return nil
        }
        HostConnections.shared.opened(SegmentGroup.hostKey(request.url))
        return easy
    }

    // MARK: races

    /// Opens the racer on a fresh connection. While the primary's body has not started, the
    /// racer sends the same request (a replica): whichever connection delivers a body byte first
    /// carries on. Once the body flows, the racer asks for the rest from the offset reached, with
    /// the transfer's strong validator. A transfer that is no longer suspected (bytes came while
    /// the race waited for its host's turn) is not raced: the old connection won.
    func startRace(_ id: UInt64, connectTimeout: Duration) {
        guard let transfer = transfers[id], transfer.racer == nil else { return }
        guard transfer.isSuspected else {
            transfer.callbacks.events(.raceEnded(.originalWon))
            return
        }
        let primary = transfer.primary
        let request = transfer.request
        if !primary.isReceivingBody {
            let replica = TransferContext(transfer: transfer, role: .replica, machine: ResponseStateMachine(request: primary.machine.request))
            guard let easy = makeEasy(request, rangeStart: request.offset - request.overlap, sendsRange: request.offset > 0,
                                      ifRange: request.ifRange, connectTimeout: connectTimeout, freshConnection: true,
                                      context: replica) else {
                transfer.callbacks.events(.raceEnded(.racerFailed(.failed(.invalidRequest))))
                return
            }
            replica.easy = easy
            transfer.racer = replica
            handles[easy.handle] = replica
            return
        }
        guard let acceptance = primary.machine.acceptance, let offset = primary.machine.nextOffset, offset > 0,
              offset >= acceptance.verifyUntil ?? 0,
              let validator = acceptance.entityTag ?? acceptance.lastModified else {
            // Without a strong validator, asking for the rest could splice two versions (and
            // while the resume overlap is still being compared, the rest is not yet known good).
            transfer.callbacks.events(.raceEnded(.notPossible))
            return
        }
        // The racer continues the primary's response: same entity, no overlap (the strong
        // validator in If-Range and the response checks guard it; the disk may lag behind).
        let machine = ResponseStateMachine(request: .init(offset: offset, entityTag: acceptance.entityTag,
                                                          knownTotalLength: acceptance.totalLength,
                                                          lastModified: acceptance.lastModified,
                                                          observedEntityTag: acceptance.observedEntityTag,
                                                          end: transfer.request.rangeEnd))
        let racer = TransferContext(transfer: transfer, role: .racer(startOffset: offset), machine: machine)
        guard let easy = makeEasy(request, rangeStart: offset, sendsRange: true, ifRange: validator,
                                  connectTimeout: connectTimeout, freshConnection: true, context: racer) else {
            transfer.callbacks.events(.raceEnded(.racerFailed(.failed(.invalidRequest))))
            return
        }
        racer.easy = easy
        transfer.racer = racer
        handles[easy.handle] = racer
    }

    /// Carries out race decisions the callbacks took during `perform()` (handles cannot be
    /// removed from inside a callback).
    private func settleRaces() {
        for transfer in transfers.values { settleRace(transfer) }
    }

    private func settleRace(_ transfer: Transfer) {
        guard let decision = transfer.raceDecision else { return }
        transfer.raceDecision = nil
        switch decision {
        case .racerWon:
            guard let racer = transfer.racer else { return }
            promote(racer, of: transfer)
        case .originalWon:
            let wasReplica = transfer.racer?.role == .replica
            if let racer = transfer.racer { drop(racer) }
            transfer.racer = nil
            // A replica raced the wait for an answer, not the body's pace.
            if !wasReplica { transfer.stall.falseAlarm() }
            transfer.callbacks.events(.raceEnded(.originalWon))
        }
    }

    /// The racer replaces the primary, which is closed (its gathered bytes handed on first).
    private func promote(_ racer: TransferContext, of transfer: Transfer) {
        let loser = transfer.primary
        loser.isDiscarded = true
        loser.flushChunk()
        drop(loser)
        racer.becomePrimary()
        transfer.primary = racer
        transfer.racer = nil
        transfer.raceDecision = nil
        transfer.isSuspected = false
        transfer.stall.restart(at: .now)
        transfer.callbacks.events(.raceEnded(.racerWon))
    }

    // MARK: endings

    /// libcurl finished one handle.
    private func ended(_ context: TransferContext, failure: TransferFailure?, detail: String) {
        let transfer = context.transfer
        // A racer that won and finished within the same perform(): make it the primary first.
        if transfer.raceDecision != nil { settleRace(transfer) }
        if context.isDiscarded {
            drop(context)
        } else if context === transfer.primary {
            if failure != nil, context.machine.isAwaitingHead, let replica = transfer.racer, replica.role == .replica,
               transfer.raceDecision == nil {
                // The old connection died before its body while a replica asks again: the replica
                // carries on alone.
                promote(replica, of: transfer)
                return
            }
            finish(transfer.id, forcedResult: nil, failure: failure, detail: detail)
        } else if context === transfer.racer, context.role == .replica, !context.machine.isAwaitingHead,
                  transfer.primary.machine.isAwaitingHead {
            // The replica got an answer that ends it (an error status, a completion) while the old
            // connection still has none: that answer is the attempt's.
            promote(context, of: transfer)
            finish(transfer.id, forcedResult: nil, failure: failure, detail: detail)
        } else if context === transfer.racer {
            // The racer ended before it delivered a byte: it failed (could not connect, or its
            // answer was not the rest of this entity).
            let result = context.result(failure: failure, detail: detail)
            drop(context)
            transfer.racer = nil
            transfer.raceDecision = nil
            transfer.callbacks.events(.raceEnded(.racerFailed(result)))
        } else {
            drop(context)
        }
    }

    /// Removes and frees one handle.
    func drop(_ context: TransferContext) {
        guard let easy = context.easy else { return }
        HostConnections.shared.closed(SegmentGroup.hostKey(context.transfer.request.url))
        handles.removeValue(forKey: easy.handle)
        multi.remove(easy)
        easy.cleanup()
        context.easy = nil
    }

    /// Ends a transfer: removes and frees its handles, then reports. `forcedResult` (our abort)
    /// wins over whatever libcurl would have said.
    func finish(_ id: UInt64, forcedResult: AttemptResult?, failure: TransferFailure?, detail: String) {
        guard let transfer = transfers.removeValue(forKey: id) else { return }
        if let racer = transfer.racer { drop(racer) }
        transfer.racer = nil
        let context = transfer.primary
        let info = context.easy?.info()
        drop(context)
        context.flushChunk()
        // A group's members share the group's handler (cleared when the group finishes).
        if transfer.group == nil { transfer.file.setDrainHandler(nil) }

        let result: AttemptResult
        if let forcedResult {
            result = forcedResult
        } else {
            result = context.result(failure: failure, detail: detail, info: info)
        }
        if transfer.group != nil {
            memberEnded(transfer, result: result)
            return
        }
        transfer.callbacks.completion(TransferOutcome(result: result, bytesReceived: transfer.bytesReceived))
    }
}

/// What the owner of an attempt is told.
struct TransferCallbacks: Sendable {
    var progress: @Sendable (Int64) -> Void
    var events: @Sendable (TransferEvent) -> Void
    var completion: @Sendable (TransferOutcome) -> Void
}

