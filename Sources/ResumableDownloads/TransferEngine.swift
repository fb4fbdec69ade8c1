import FoundationEssentials
import LinuxReachability
import Glibc
import Synchronization

/// Knobs for every request, from `DownloadAgent.Configuration`.
struct TransferSettings: Sendable, Hashable {
    var connectTimeout: Duration
    var stallTimeout: Duration
    var stallBytesPerSecond: Int
    var maximumRedirects: Int
    var keepAliveIdle: Duration
    var receiveBufferSize: Int
    var userAgent: String
    /// PEM CA bundle replacing the system one, when set.
    var certificateAuthorityFile: String? = nil
    /// `Name: value` lines added to every request.
    var additionalHeaders: [String] = []
    /// The receive limit per transfer (`ReceiveRateLimiter`), when set.
    var maximumBytesPerSecond: Int64? = nil
    /// false turns off peer and host verification (`--insecure`).
    var verifiesCertificates = true
    /// CURLOPT_PROXY when set ("" disables the environment's proxies).
    var proxy: String? = nil
    /// The shortest silence after which a receiving transfer is suspected of stalling.
    var stallSuspicion: Duration = .seconds(1)
    /// How long a request may go unanswered before it is suspected (raced): `stallSuspicion`, or
    /// longer for a host known to be slow to answer (`ServerProbeScheduler.answerSuspicion`).
    var answerSuspicion: Duration = .seconds(1)
    /// Most connections to one server at once, over every transfer of the engine
    /// (segmented attempts share what the others leave).
    var maximumConnectionsPerHost = 6
}

/// One HTTP attempt for a download.
struct TransferRequest: Sendable {
    var url: URL
    /// Where the stored bytes end; the request starts `overlap` bytes earlier.
    var offset: Int64
    /// The If-Range validator (strong ETag or Last-Modified).
    var ifRange: String?
    /// The strong ETag, when that is what If-Range carries.
    var entityTag: String?
    var knownTotalLength: Int64?
    /// The recorded strong Last-Modified and any ETag seen (weak too), to notice a change.
    var lastModified: String? = nil
    var observedEntityTag: String? = nil
    /// Bytes before `offset` fetched again and compared with the disk before appending.
    var overlap: Int64 = 0
    /// Interface to pin to (`CURLOPT_INTERFACE "if!name"`), nil to follow the routing table.
    var interfaceName: String?
    /// Open a new connection instead of reusing one from before a path change.
    var freshConnection: Bool
    var settings: TransferSettings
    /// When set, the attempt may fetch ranges over several connections and paths
    /// (`SegmentGroup`); the request above is then the template of every connection.
    var segmentation: Segmentation? = nil
    /// One past the last byte asked for (a segment's range with its seam overlap); nil asks for
    /// everything from the offset on.
    var rangeEnd: Int64? = nil
    /// A segment beside others: only a 206 for exactly the bytes asked will do.
    var isSegment = false
    /// With `isSegment`: the 206 must carry the recorded strong validator.
    var requiresValidator = false
}

/// What an attempt that may use several connections starts from (`TransferEngine`'s segment
/// groups, planned by `SegmentPlanner`).
struct Segmentation: Sendable {
    var configuration: SegmentPlanner.Configuration
    /// Bytes already stored, and the unverified seams kept with them.
    var stored: RangeSet<Int64>
    var seams: Set<Int64>
    /// Whether splitting is allowed, when the resume data already says (a validator or an
    /// expected SHA-256, and a length); nil lets the first answer decide.
    var allowsSegments: Bool?
    /// Whether an expected SHA-256 guards the file (then a range needs no validator of its own).
    var hasExpectedDigest: Bool
    /// Whether requests carry the record's validators (not when they vary per response and a
    /// digest proves the file; then one connection fills the gaps).
    var usesValidators = true
    /// The most bytes before a range's start fetched again to compare (`ResumeOverlap`).
    var overlap: Int64 = ResumeOverlap.maximum
    /// The usable paths, best first.
    var paths: [SegmentPlanner.Path]
}

/// What the engine reports when an attempt ends.
struct TransferOutcome: Sendable {
    var result: AttemptResult
    /// Body bytes accepted during this attempt.
    var bytesReceived: Int64
    /// The server answered ranges inconsistently (another entity on another connection, or a
    /// seam that does not match): later attempts use one connection.
    var disablesSegments = false
}

/// What the engine reports while an attempt runs, besides progress.
enum TransferEvent: Sendable, Hashable {
    /// The first response line arrived (the server answers); `connectTime` is how long the
    /// connection took to set up and `waited` how long the answer took once the request could be
    /// sent, when libcurl knows.
    case responseStarted(connectTime: Duration?, waited: Duration?)
    /// The response rewound the partial file to zero (a 200 to a range: the entity changed or
    /// the server ignores ranges).
    case restartedFromZero(reason: String)
    /// No body byte for longer than this transfer's recent pace explains (`StallDetector`).
    case stallSuspected
    /// A race started by `race(_:connectTimeout:)` ended.
    case raceEnded(DownloadStateMachine.RaceOutcome)
    /// A response carried another ETag than the recorded one for an entity of the same length
    /// (reported once per attempt).
    case entityTagChanged
    /// The connections of a segmented attempt changed (count or paths).
    case connectionsChanged(TransferConnections)
}

/// The connections an attempt holds, for events and metrics.
struct TransferConnections: Sendable, Hashable {
    /// Connections fetching bytes now.
    var count: Int
    /// Connections per path (interface name, or nil for the routing table's choice), best first.
    var paths: [PathShare]

    struct PathShare: Sendable, Hashable {
        var interface: String?
        var connections: Int
    }
}

/// When a transfer that stops receiving is suspected dead: after a silence several times longer
/// than the longest gap between reads seen over the last several seconds (its recent pace),
/// never sooner than `minimum` (about a second: a fast transfer is suspected then, a slow or
/// bursty server gets proportionally longer), never later than `maximum`, and twice as late
/// after each false alarm on this transfer. Pure.
///
/// A transfer has no pace until it has shown one: while a silence starts within `learningPeriod`
/// of the first body byte, it must last at least `learningMinimum`. Rate limiters that work by
/// the second (lighttpd's `connection.kbytes-per-second`, nginx's `limit_rate`) send a second's
/// quota at once and then nothing for up to a second; judged against the bare minimum, that first
/// silence looked like a stall, and the race it started won at once (a new connection gets a new
/// quota), so the rhythm was never learned and every second cost another range request.
struct StallDetector: Sendable, Hashable {
    typealias Instant = ContinuousClock.Instant
    /// How much longer than the longest recent gap a silence must last.
    static let gapFactor = 4
    /// Gaps older than two of these windows are forgotten.
    static let window: Duration = .seconds(5)
    /// How long after its first body byte a transfer is still learning its pace.
    static let learningPeriod: Duration = .seconds(3)

    var minimum: Duration
    var maximum: Duration
    /// The shortest suspicion while learning: longer than a per-second limiter's silence.
    var learningMinimum: Duration
    private(set) var lastByteAt: Instant
    private var windowStart: Instant
    private var firstByteAt: Instant?
    private var currentMaximumGap: Duration = .zero
    private var previousMaximumGap: Duration = .zero
    private var falseAlarms = 0

    init(minimum: Duration, maximum: Duration, now: Instant) {
        self.minimum = minimum
        self.maximum = maximum
        learningMinimum = max(minimum, minimum * 2)
        lastByteAt = now
        windowStart = now
    }

    /// Bytes arrived at `now`.
    mutating func bytesArrived(at now: Instant) {
        if firstByteAt == nil {
            // The wait for the first byte is the answer's latency, not a gap of the body.
            firstByteAt = now
            windowStart = now
            lastByteAt = now
            return
        }
        if now - windowStart >= Self.window {
            previousMaximumGap = now - windowStart >= Self.window * 2 ? .zero : currentMaximumGap
            currentMaximumGap = .zero
            windowStart = now
        }
        currentMaximumGap = max(currentMaximumGap, now - lastByteAt)
        lastByteAt = now
    }

    /// Receiving starts (again) at `now` without the pause counting as a gap (response start,
    /// our own backpressure or rate limit released).
    mutating func restart(at now: Instant) { lastByteAt = now }

    /// The old connection turned out alive: be slower to suspect it again.
    mutating func falseAlarm() { falseAlarms = min(falseAlarms + 1, 6) }

    /// Whether the silence that began at the last byte began while the pace was still unknown.
    var isLearning: Bool { firstByteAt.map { lastByteAt - $0 < Self.learningPeriod } ?? true }

    /// The silence after which the transfer is suspected.
    var interval: Duration {
        let floor = isLearning ? learningMinimum : minimum
        let paced = max(floor, max(currentMaximumGap, previousMaximumGap) * Self.gapFactor) * (1 << falseAlarms)
        return min(paced, maximum)
    }

    /// When the transfer is suspected if nothing arrives.
    var deadline: Instant { lastByteAt + interval }
}

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
final class TransferEngine: @unchecked Sendable {
    enum Command {
        case start(UInt64, TransferRequest, PartialFile, TransferCallbacks)
        case abort(UInt64, AbortReason)
        case race(UInt64, connectTimeout: Duration)
        case unpause(UInt64)
        case paths(UInt64, [SegmentPlanner.Path])
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
            for command in pending {
                switch command {
                case .start(let id, let request, let file, let callbacks):
                    if let segmentation = request.segmentation {
                        startGroup(id: id, request: request, segmentation: segmentation, file: file, callbacks: callbacks)
                    } else {
                        start(id: id, request: request, file: file, callbacks: callbacks)
                    }
                case .abort(let id, let reason):
                    if groups[id] != nil {
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
                    isRunning = false
                }
            }
            guard isRunning else { break }
            multi.perform()
            while let done = multi.nextCompleted() {
                guard let context = handles[done.handle] else { continue }
                // libcurl's own words when it wrote some, else the name of its code.
                ended(context, failure: done.failure, detail: context.easy?.errorText ?? done.detail)
            }
            settleRaces()
            let wake = min(watchStalls(), tickGroups())
            // Short enough for the watchdog's granularity; wakeups cut it anyway.
            multi.poll(milliseconds: wake)
        }
        for id in Array(groups.keys) { abortGroup(id, reason: .shutdown) }
        for id in Array(transfers.keys) { finish(id, forcedResult: .aborted(.shutdown), failure: nil, detail: "") }
        multi.cleanup()
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
                let seconds = Double(transfer.stallTimeout.milliseconds) / 1000
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
                                                          requiresValidator: request.requiresValidator))
        let now = ContinuousClock.now
        let transfer = Transfer(id: id, request: request, file: file, callbacks: callbacks,
                                stall: StallDetector(minimum: request.settings.stallSuspicion,
                                                     maximum: request.settings.stallTimeout, now: now))
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
            connectTimeoutMilliseconds: max(1, Int(connectTimeout.milliseconds)),
            lowSpeedLimitBytesPerSecond: settings.stallBytesPerSecond,
            lowSpeedTimeSeconds: max(1, Int((settings.stallTimeout.milliseconds + 999) / 1000)),
            maximumRedirects: settings.maximumRedirects,
            keepAliveIdleSeconds: max(1, Int(settings.keepAliveIdle.milliseconds / 1000)),
            receiveBufferSize: settings.maximumBytesPerSecond.map {
                ReceiveRateLimiter.receiveBufferSize(bytesPerSecond: $0, maximum: settings.receiveBufferSize)
            } ?? settings.receiveBufferSize,
            userAgent: settings.userAgent, certificateAuthorityFile: settings.certificateAuthorityFile,
            additionalHeaders: settings.additionalHeaders,
            verifiesCertificates: settings.verifiesCertificates, proxy: settings.proxy)
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
    private var chunk = Data()
    private var chunkOffset: Int64 = 0
    static let chunkSize = 128 << 10

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
                begin(acceptance)
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
                return .abort
            }
            transfer.raceDecision = .racerWon
            transfer.primary.isDiscarded = true
            transfer.primary.flushChunk()
            becomePrimary()
        } else if transfer.racer != nil, transfer.raceDecision == nil {
            transfer.raceDecision = .originalWon
            transfer.racer?.isDiscarded = true
        }
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
        if let resumeAt = transfer.rate?.admit(bytes.count, at: now) {
            // libcurl keeps the chunk and delivers it again once the engine unpauses at `resumeAt`.
            rateResumeAt = resumeAt
            return .pause
        }
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
            gather(bytes, at: offset)
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

    /// Adds body bytes to the gather buffer (handed to the file when full).
    func gather(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        if !chunk.isEmpty, chunkOffset + Int64(chunk.count) != offset { flushChunk() }
        if chunk.isEmpty {
            chunkOffset = offset
            chunk.reserveCapacity(Self.chunkSize)
        }
        chunk.append(bytes.bindMemory(to: UInt8.self))
        if chunk.count >= Self.chunkSize { flushChunk() }
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

extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        let parts = components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}

/// Connections open to each server from this process, over every engine (every agent): the
/// per-host bound of segmented downloads counts them all, so two agents (the CLI's downloads each
/// have one) to one server share it.
final class HostConnections: Sendable {
    static let shared = HostConnections()
    private let open = Mutex<(now: [String: Int], most: [String: Int])>(([:], [:]))

    func opened(_ host: String) {
        open.withLock { open in
            open.now[host, default: 0] += 1
            open.most[host] = max(open.most[host] ?? 0, open.now[host] ?? 0)
        }
    }

    func closed(_ host: String) {
        open.withLock { open in
            let count = (open.now[host] ?? 1) - 1
            open.now[host] = count > 0 ? count : nil
        }
    }

    /// Open connections to `host`.
    func count(_ host: String) -> Int { open.withLock { $0.now[host] ?? 0 } }

    /// The most connections to `host` that were open at once (for tests).
    func most(_ host: String) -> Int { open.withLock { $0.most[host] ?? 0 } }
}
