import FoundationEssentials
import ReachabilityBase

/// Every recovery decision of one download, as a pure state machine: it is fed what happened
/// (bytes arrived, a stall suspected, a race decided, an attempt ended with a classified result,
/// the path changed, a timer fired, pause/resume/cancel) and answers with the actions its
/// executor (`DownloadAgent`'s driver) carries out. It touches no socket, file or clock: time
/// comes in with every input, randomness as a number, so tests replay any story exactly.
///
/// The rules it holds:
/// - Waiting never spends the failure budget: not for a path (none, or an unusable one), not for
///   a server that does not answer on a working path (refused, reset, timed out, DNS), which is
///   probed on `ServerWaitSchedule` by one download per host. `maximumOutageWait` bounds every
///   kind of wait, from the first failure until bytes flow again, and names the one that ran out.
/// - The budget counts failures that made no progress: an attempt makes progress only when the
///   stored bytes pass the furthest point ever stored, so a server that rewinds the file (a 200
///   to a range) and drops the connection again cannot reset it. HTTP 5xx/408/429 and TLS
///   failures are counted and backed off (honouring a capped `Retry-After`).
/// - Restarts from zero (a 200 to a range, a changed entity, an overlap that differs) are
///   bounded by `maximumRestarts` and backed off; every attempt start goes through a token
///   bucket, so no server behaviour causes a request storm.
/// - Two responses in a row cut at one offset, the second with no new byte, make the next
///   attempt a seam probe (the byte at the offset, validators only): another version there is a
///   cache holding part of an older one, which restarts from zero once and then fails saying so.
/// - A transfer suspected of stalling (the engine saw no byte for a while, or no answer to its
///   request) is raced by a fresh connection (before an answer, one that sends the request
///   again), when its host's turn comes: races to one host take turns, at most two a second,
///   and none while the host is waited for. When the racer cannot even connect, the server is
///   gone: the transfer is ended and the server waited for, and so are the host's other
///   transfers waiting for their turn to race.
//
// Longer than 400 lines on purpose: every decision reads and writes the same private state
// (phase, attempt, outage, budget), which would otherwise have to be widened to the module. Its
// vocabulary (inputs, actions, facts, policy) lives in DownloadStateMachine+Vocabulary.swift.
struct DownloadStateMachine: Sendable {
    typealias Instant = ContinuousClock.Instant

    private enum Stop: Sendable, Hashable {
        case pause, pauseThenRequeue, cancel, shutdown
        /// The path under the transfer went away or changed.
        case pathChanged
        /// The transfer stalled and the server did not answer a fresh connection (`racerProbed`:
        /// this attempt's racer was that connection, a probe of the server just now).
        case stalled(DownloadError, racerProbed: Bool)
        /// A limit was reached during the attempt.
        case gaveUp(DownloadError)

        /// Pause, resume and cancel stay in charge once requested; recovery stops yield to them.
        var isByRequest: Bool {
            switch self {
            case .pause, .pauseThenRequeue, .cancel, .shutdown: true
            case .pathChanged, .stalled, .gaveUp: false
            }
        }
    }

    private enum RaceState: Sendable, Hashable { case idle, requested, running, unavailable }

    private struct Attempt: Sendable, Hashable {
        var id: Int
        var isProbe: Bool
        /// A retry right after a connection that was delivering died.
        var isRecovery = false
        /// A seam probe (`AttemptPlan.probesSeam`).
        var probesSeam = false
        /// The resume overlap planned for it.
        var overlap: Int64 = 0
        var sawResponse = false
        var race: RaceState = .idle
        var stop: Stop?
    }

    private enum RetryReason: Sendable, Hashable {
        /// A counted transport failure: a path update ends it at once.
        case transportBackoff
        /// The server asked for the wait (5xx, 408, 429, Retry-After), or restarts are spaced.
        case serverBackoff
        /// The attempt rate limit.
        case rateLimited
        /// Staggered restarts after one path update.
        case stagger
    }

    private enum Phase: Sendable, Hashable {
        /// Not started (queued).
        case idle
        /// No usable path (or none reported yet).
        case waitingForPath
        /// A working path, a server that does not answer: waiting for a probe grant or a release.
        case waitingForServer
        case retryScheduled(RetryReason)
        case transferring(Attempt)
        /// Verifying and moving the file into place.
        case completing
        /// The driver has ended (or is ending).
        case finished
    }

    private struct Outage: Sendable, Hashable {
        var since: Instant
        var kind: WaitKind
        var lastError: DownloadError?
        var announcedServerWait = false
    }

    let policy: Policy
    private var phase: Phase = .idle
    private var path = PathFacts(usability: .unknown)
    private var file = FileFacts(storedBytes: 0)
    /// The furthest the stored bytes ever reached: only passing it counts as progress.
    private(set) var highWater: Int64 = 0
    private(set) var consecutiveFailures = 0
    private(set) var restarts = 0
    private var outage: Outage?
    /// The state last reported to the `Download`, so waits are announced once.
    private var shownState: DownloadState = .queued
    private var limiter: TokenBucket
    private var overlap = ResumeOverlap()
    /// Responses whose ETag differed from the recorded one for an entity of the same length.
    private(set) var entityTagChanges = 0
    /// Set once ETags vary and an expected digest proves the result: resumes stop using validators.
    private(set) var ignoresValidators = false
    /// Where the last response the server cut short left the stored bytes.
    private var lastCut: Int64?
    /// A response was cut again where the one before it was, without a new byte: the next
    /// attempt probes that seam.
    private var suspectsSeam = false
    /// Seam probes that found another version past the seam (a cache holding part of an older one).
    private(set) var versionSeams = 0
    private var nextAttempt = 1
    private var nextGeneration = 1
    private var armed: [Timer.Kind: Int] = [:]

    init(policy: Policy) {
        self.policy = policy
        limiter = policy.attemptRate
    }

    /// Whether the driver is done (completing or exited).
    var isFinished: Bool {
        switch phase {
        case .completing, .finished: true
        default: false
        }
    }

    /// The current attempt's id while one runs.
    var runningAttempt: Int? {
        if case .transferring(let attempt) = phase { return attempt.id }
        return nil
    }

    /// Whether the download waits in the server's probe queue.
    var isWaitingForServer: Bool { phase == .waitingForServer }

    /// Whether a race is running.
    var isRacing: Bool {
        if case .transferring(let attempt) = phase { return attempt.race == .running }
        return false
    }

    /// Feeds one input. `random` in 0...1 drives jitter (tests pass a fixed value).
    mutating func handle(_ input: Input, now: Instant, random: Double = 0.5) -> [Action] {
        switch input {
        case .start(let facts, let pathFacts): started(facts, pathFacts, now: now)
        case .pathChanged(let facts, let rank): pathChanged(facts, rank: rank, now: now)
        case .responseStarted(let id): responseStarted(id)
        case .bytesArrived(let id): bytesArrived(id)
        case .restartedFromZero(let id, let reason): restartedFromZero(id, reason)
        case .stallSuspected(let id): stallSuspected(id)
        case .raceGranted(let id): raceGranted(id)
        case .raceRefused(let id): raceRefused(id)
        case .raceEnded(let id, let outcome): raceEnded(id, outcome)
        case .attemptEnded(let id, let result, let facts, let received):
            if case .transferring(let attempt) = phase, attempt.id == id {
                attemptEnded(attempt, result, facts, received: received, now: now, random: random)
            } else {
                []
            }
        case .entityTagChanged(let id): entityTagChanged(id)
        case .probeGranted(let connectTimeout):
            phase == .waitingForServer ? startAttempt(now: now, freshConnection: true, probeConnectTimeout: connectTimeout) : []
        case .serverReachable:
            phase == .waitingForServer ? startAttempt(now: now, freshConnection: true) : []
        case .timerFired(let timer): timerFired(timer, now: now)
        case .pause: stop(.pause, exit: .paused)
        case .shutdown: stop(.shutdown, exit: .paused)
        case .cancel: stop(.cancel, exit: .cancelled)
        case .resume: resumed()
        }
    }

    // MARK: inputs

    private mutating func started(_ facts: FileFacts, _ pathFacts: PathFacts, now: Instant) -> [Action] {
        guard phase == .idle else { return [] }
        file = facts
        highWater = max(highWater, facts.storedBytes)
        path = pathFacts
        guard let deadline = policy.deadline else { return proceed(now: now, freshConnection: false) }
        // A job past its deadline does not start (it may have waited in line, or the agent was down).
        if deadline <= now { return exit(.failed(DownloadError.deadlinePassed(policy.deadlineText))) }
        return arm(.deadline, at: deadline) + proceed(now: now, freshConnection: false)
    }

    private mutating func responseStarted(_ id: Int) -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.id == id, !attempt.sawResponse else { return [] }
        attempt.sawResponse = true
        phase = .transferring(attempt)
        var actions: [Action] = [.reportServer(reachable: true)]
        if attempt.isProbe { actions.append(announceAttempt()) }
        return actions
    }

    private mutating func bytesArrived(_ id: Int) -> [Action] {
        guard case .transferring(let attempt) = phase, attempt.id == id, outage != nil else { return [] }
        // Bytes flow again: the outage is over, whatever it was.
        outage = nil
        return disarm(.outage)
    }

    private mutating func restartedFromZero(_ id: Int, _ reason: String) -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.id == id else { return [] }
        file.storedBytes = 0
        restarts += 1
        var actions: [Action] = [.emit(.restartedFromZero(reason: reason))]
        if restarts > policy.maximumRestarts, attempt.stop == nil {
            attempt.stop = .gaveUp(restartLimitError(reason))
            phase = .transferring(attempt)
            actions.append(.abortAttempt(.recovery))
        }
        return actions
    }

    /// Before the response started, the engine's racer sends the request again (a request sent
    /// into a server that went away, or a tarpit, would otherwise wait for the stall timeout).
    /// Either way the host's turn comes first.
    private mutating func stallSuspected(_ id: Int) -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.id == id, attempt.stop == nil,
              attempt.race == .idle, path.isUsable else { return [] }
        attempt.race = .requested
        phase = .transferring(attempt)
        return [.requestRace(attempt: id)]
    }

    private mutating func raceGranted(_ id: Int) -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.id == id, attempt.race == .requested,
              attempt.stop == nil else {
            // Too late (the attempt ended or stops): hand the turn back unused. A finished
            // driver has already given up every turn.
            return isFinished ? [] : [.finishRace(attempt: id, reachable: nil)]
        }
        attempt.race = .running
        phase = .transferring(attempt)
        return [.race]
    }

    private mutating func raceRefused(_ id: Int) -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.id == id, attempt.race == .requested,
              attempt.stop == nil else { return [] }
        attempt.race = .unavailable
        attempt.stop = .stalled(DownloadError.networkConnectionLost.with(
            description: "the connection stalled and the server does not answer other connections either"),
            racerProbed: false)
        phase = .transferring(attempt)
        return [.abortAttempt(.recovery)]
    }

    /// With a digest to prove the result, a server whose ETags vary per response (not per
    /// version) can still be resumed: the next requests carry no validator.
    private mutating func entityTagChanged(_ id: Int) -> [Action] {
        guard case .transferring(let attempt) = phase, attempt.id == id else { return [] }
        entityTagChanges += 1
        if file.hasExpectedDigest { ignoresValidators = true }
        return []
    }

    private mutating func timerFired(_ timer: Timer, now: Instant) -> [Action] {
        guard armed[timer.kind] == timer.generation else { return [] }
        armed[timer.kind] = nil
        switch timer.kind {
        case .retry:
            guard case .retryScheduled = phase else { return [] }
            return proceed(now: now, freshConnection: true)
        case .outage:
            return outageLimitReached(now: now)
        case .deadline:
            return giveUp(DownloadError.deadlinePassed(policy.deadlineText))
        }
    }

    private mutating func resumed() -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.stop == .pause else { return [] }
        attempt.stop = .pauseThenRequeue
        phase = .transferring(attempt)
        return []
    }

    // MARK: starting attempts

    /// Attempts now if the path allows, else waits for one.
    private mutating func proceed(now: Instant, freshConnection: Bool) -> [Action] {
        switch path.usability {
        case .usable:
            return startAttempt(now: now, freshConnection: freshConnection)
        case .unusable, .unknown:
            return waitForPath(now: now)
        }
    }

    private mutating func startAttempt(now: Instant, freshConnection: Bool,
                                       probeConnectTimeout: Duration? = nil, isRecovery: Bool = false) -> [Action] {
        var actions: [Action] = []
        let isProbe = probeConnectTimeout != nil
        if !isProbe, let available = limiter.take(at: now) {
            phase = .retryScheduled(.rateLimited)
            return arm(.retry, at: available)
        }
        let attempt = Attempt(id: nextAttempt, isProbe: isProbe, isRecovery: isRecovery, probesSeam: suspectsSeam,
                              overlap: overlap.bytes)
        suspectsSeam = false
        nextAttempt += 1
        phase = .transferring(attempt)
        actions += disarm(.retry)
        // A probe is announced when it gets an answer: a dead server is not "resumed" twice a second.
        if !isProbe { actions.append(announceAttempt()) }
        actions.append(.startAttempt(AttemptPlan(id: attempt.id, freshConnection: freshConnection || isProbe,
                                                 isProbe: isProbe, connectTimeout: probeConnectTimeout,
                                                 isRecovery: isRecovery, overlap: attempt.overlap,
                                                 usesValidators: !ignoresValidators, probesSeam: attempt.probesSeam)))
        return actions
    }

    private mutating func announceAttempt() -> Action {
        shownState = .running
        return .update(.running, file.storedBytes == 0 ? .started : .resumed(at: file.storedBytes))
    }

    // MARK: waiting

    private mutating func waitForPath(now: Instant) -> [Action] {
        var actions = leaveServerWaitIfNeeded()
        phase = .waitingForPath
        actions += disarm(.retry)
        actions += beginOutage(.path, error: nil, now: now)
        // An unknown path (the source has not reported yet) is waited for quietly.
        if path.usability == .unusable, shownState != .waitingForConnectivity {
            shownState = .waitingForConnectivity
            actions.append(.update(.waitingForConnectivity, .waitingForConnectivity))
        }
        return actions
    }

    private mutating func waitForServer(_ error: DownloadError, now: Instant, isRegistered: Bool,
                                        justProbed: Bool = false) -> [Action] {
        phase = .waitingForServer
        var actions = beginOutage(.server, error: error, now: now)
        if outage?.announcedServerWait == false {
            outage?.announcedServerWait = true
            shownState = .running
            actions.append(.update(.running, .waitingForServer(error)))
        }
        if !isRegistered { actions.append(.joinServerWait(justProbed: justProbed)) }
        return actions
    }

    private mutating func beginOutage(_ kind: WaitKind, error: DownloadError?, now: Instant) -> [Action] {
        if outage != nil {
            outage?.kind = kind
            if let error { outage?.lastError = error }
            return []
        }
        outage = Outage(since: now, kind: kind, lastError: error)
        guard let limit = outageLimit else { return [] }
        return arm(.outage, at: now + limit)
    }

    private mutating func leaveServerWaitIfNeeded() -> [Action] {
        phase == .waitingForServer ? [.leaveServerWait] : []
    }

    /// The shorter of the agent's outage bound and the job's no-progress timeout.
    private var outageLimit: Duration? {
        [policy.maximumOutageWait, policy.noProgressTimeout].compactMap { $0 }.min()
    }

    private mutating func outageLimitReached(now: Instant) -> [Action] {
        guard let outage, let limit = outageLimit else { return [] }
        if let own = policy.noProgressTimeout, own == limit {
            return giveUp(DownloadError.noProgress(for: own, lastError: outage.lastError))
        }
        return giveUp(DownloadError.outageLimitReached(outage.kind, after: limit, lastError: outage.lastError))
    }

    /// Ends the download with `error` from whatever it is doing (a time limit ran out).
    private mutating func giveUp(_ error: DownloadError) -> [Action] {
        switch phase {
        case .waitingForServer:
            return [.leaveServerWait] + exit(.failed(error))
        case .waitingForPath, .retryScheduled:
            return exit(.failed(error))
        case .transferring(var attempt):
            // A probe or a retry was still trying: it is ended, and the download fails.
            guard attempt.stop == nil else { return [] }
            attempt.stop = .gaveUp(error)
            phase = .transferring(attempt)
            return [.abortAttempt(.recovery)]
        case .idle, .completing, .finished:
            return []
        }
    }

    // MARK: path

    private mutating func pathChanged(_ facts: PathFacts, rank: Int, now: Instant) -> [Action] {
        let wasUsable = path.isUsable
        path = facts
        switch phase {
        case .idle, .completing, .finished:
            return []
        case .waitingForPath:
            guard facts.isUsable else { return waitForPath(now: now) }
            return restartOnNewPath(rank: rank, now: now)
        case .waitingForServer:
            // A new path may well reach the server: try on it now (or wait for a usable one).
            guard facts.isUsable else { return waitForPath(now: now) }
            guard facts.isNewPath else { return [] }
            var actions: [Action] = [.leaveServerWait]
            phase = .retryScheduled(.stagger)
            actions += restartOnNewPath(rank: rank, now: now)
            return actions
        case .retryScheduled(let reason):
            switch reason {
            case .transportBackoff:
                // The failure may have been the old path's fault.
                guard facts.isUsable else { return waitForPath(now: now) }
                guard facts.isNewPath else { return [] }
                return restartOnNewPath(rank: rank, now: now)
            case .stagger:
                guard facts.isUsable else { return waitForPath(now: now) }
                return []
            case .serverBackoff, .rateLimited:
                // The server asked for the wait, or the limit holds: the timer decides (and
                // checks the path then).
                return []
            }
        case .transferring(var attempt):
            guard attempt.stop == nil, facts.invalidatesTransfer || (wasUsable && !facts.isUsable) else { return [] }
            attempt.stop = .pathChanged
            phase = .transferring(attempt)
            return [.abortAttempt(.pathChanged)]
        }
    }

    private mutating func restartOnNewPath(rank: Int, now: Instant) -> [Action] {
        if rank > 0, policy.restartStagger > .zero {
            // Many downloads waking on one path update: spread their reconnects slightly.
            phase = .retryScheduled(.stagger)
            return arm(.retry, at: now + policy.restartStagger * rank)
        }
        return startAttempt(now: now, freshConnection: true)
    }

    // MARK: races

    private mutating func raceEnded(_ id: Int, _ outcome: RaceOutcome) -> [Action] {
        guard case .transferring(var attempt) = phase, attempt.id == id, attempt.race == .running else { return [] }
        var actions: [Action] = []
        switch outcome {
        case .racerWon, .originalWon:
            attempt.race = .idle
            actions.append(.finishRace(attempt: id, reachable: true))
        case .notPossible:
            attempt.race = .unavailable
            actions.append(.finishRace(attempt: id, reachable: nil))
        case .racerFailed(let result):
            // Do not race this attempt again either way.
            attempt.race = .unavailable
            if case .transport(let error) = result, RetryClass(error.urlCode) == .connectionLevel {
                // A fresh connection cannot reach the server either: the old one is dead too.
                actions.append(.finishRace(attempt: id, reachable: false))
                if attempt.stop == nil {
                    attempt.stop = .stalled(error, racerProbed: true)
                    phase = .transferring(attempt)
                    return actions + [.abortAttempt(.recovery)]
                }
            } else {
                // The server answers, but not with the rest (busy, ignoring ranges, ...): let the
                // old connection carry on until the stall timeout.
                actions.append(.finishRace(attempt: id, reachable: true))
            }
        }
        phase = .transferring(attempt)
        return actions
    }

    // MARK: attempt results

    private mutating func attemptEnded(_ attempt: Attempt, _ result: AttemptResult, _ facts: FileFacts,
                                       received: Int64, now: Instant, random: Double) -> [Action] {
        let (actions, madeProgress, isRegistered) = recordEnd(of: attempt, result, facts, received: received)
        if let stop = attempt.stop {
            return actions + next(afterStop: stop, result, now: now)
        }
        return actions + next(after: result, of: attempt, madeProgress: madeProgress, isRegistered: isRegistered,
                              now: now, random: random)
    }

    /// What an ended attempt leaves behind whatever comes next: the file's facts, progress
    /// (which refunds the attempt's token and resets the failure count), the resume overlap, the
    /// race turn it held, and its place in the host's server wait. `isRegistered`: a probe that
    /// could not connect was reported and waits for the next probe with the others.
    private mutating func recordEnd(of attempt: Attempt, _ result: AttemptResult, _ facts: FileFacts,
                                    received: Int64) -> (actions: [Action], madeProgress: Bool, isRegistered: Bool) {
        file = facts
        let madeProgress = facts.storedBytes > highWater
        if madeProgress {
            if facts.storedBytes - highWater >= ResumeOverlap.minimum {
                // The budget limits attempts that get nowhere; a server that ends every
                // connection after some KiB is followed at its own pace.
                limiter.refund()
            }
            highWater = facts.storedBytes
            consecutiveFailures = 0
        }
        if attempt.sawResponse, attempt.stop == nil, !attempt.probesSeam {
            let cutShort = Self.isCutShort(result)
            overlap.connectionEnded(delivered: received, cutShort: cutShort)
            // Cut twice in a row at one offset, the second time with nothing new and no more than
            // its overlap delivered (a resume cut where its new bytes would begin): a seam. A
            // server that ignores ranges and cuts every response is not one (no probe for it).
            suspectsSeam = cutShort && !madeProgress && facts.storedBytes > 0 && lastCut == facts.storedBytes
                && received <= attempt.overlap
            lastCut = cutShort ? facts.storedBytes : nil
        }
        var actions: [Action] = []
        // A race turn asked for or held ends with the attempt.
        if attempt.race == .requested || attempt.race == .running { actions.append(.finishRace(attempt: attempt.id, reachable: nil)) }
        // A probe that ended without an answer leaves its host's queue, unless it simply failed
        // to connect (then it waits for the next probe like the others).
        var isRegistered = false
        if attempt.isProbe, !attempt.sawResponse {
            if attempt.stop == nil, case .transport(let error) = result, RetryClass(error.urlCode) == .connectionLevel,
               path.isUsable {
                actions.append(.reportServer(reachable: false))
                isRegistered = true
            } else {
                actions.append(.leaveServerWait)
            }
        }
        return (actions, madeProgress, isRegistered)
    }

    /// After an attempt this machine stopped on purpose (pause, cancel, a path change, a stall,
    /// giving up): what the stop asked for, unless the attempt completed or could not write.
    private mutating func next(afterStop stop: Stop, _ result: AttemptResult, now: Instant) -> [Action] {
        if case .aborted(.writeFailed(let error)) = result, !stop.isByRequest {
            return exit(.failed(error))
        }
        if case .completed(let total) = result, stop != .cancel {
            phase = .completing
            return [.complete(totalLength: total)]
        }
        switch stop {
        case .pause, .shutdown: return exit(.paused)
        case .pauseThenRequeue: return exit(.requeued)
        case .cancel: return exit(.cancelled)
        case .gaveUp(let error): return exit(.failed(error))
        case .pathChanged:
            phase = .retryScheduled(.stagger)
            return path.isUsable ? startAttempt(now: now, freshConnection: true) : waitForPath(now: now)
        case .stalled(let error, let racerProbed):
            guard path.isUsable else { return waitForPath(now: now) }
            return waitForServer(error, now: now, isRegistered: false, justProbed: racerProbed)
        }
    }

    /// After an attempt that ended by itself: complete, retry (at once, after a backoff, or
    /// after a restart from zero), wait for the path or the server, or fail.
    private mutating func next(after result: AttemptResult, of attempt: Attempt, madeProgress: Bool, isRegistered: Bool,
                               now: Instant, random: Double) -> [Action] {
        switch result {
        case .completed(let total):
            phase = .completing
            return [.complete(totalLength: total)]

        case .incomplete:
            if madeProgress { return startAttempt(now: now, freshConnection: false) }
            let error = DownloadError.badServerResponse.with(description: "the server keeps ending the body early")
            return countedRetry(error, kind: .serverError, reason: .serverBackoff, retryAfter: nil, now: now, random: random)

        case .restartFromZero(let reason):
            restarts += 1
            if attempt.probesSeam {
                versionSeams += 1
                // The seam came back after a restart: the cache still holds the old version's
                // first part, and restarting again would only fetch it again.
                if versionSeams > 1 { return exit(.failed(versionSeamError(reason))) }
            }
            if restarts > policy.maximumRestarts { return exit(.failed(restartLimitError(reason))) }
            file.storedBytes = 0
            let restart = Action.restartFromZero(reason: reason)
            if restarts == 1 { return [restart] + startAttempt(now: now, freshConnection: false) }
            // Repeated restarts: back off, as after failures.
            phase = .retryScheduled(.serverBackoff)
            return [restart] + arm(.retry, at: now + policy.backoff.delay(afterFailures: restarts - 1, jitter: random))

        case .serverBusy(let status, let retryAfter):
            return countedRetry(.httpStatus(status), kind: .serverError, reason: .serverBackoff,
                                retryAfter: retryAfter, now: now, random: random)

        case .failed(let error), .aborted(.writeFailed(let error)):
            return exit(.failed(error))

        case .transport(let error):
            return next(afterTransport: error, of: attempt, madeProgress: madeProgress, isRegistered: isRegistered,
                        now: now, random: random)

        case .aborted(.pathChanged):
            phase = .retryScheduled(.stagger)
            return path.isUsable ? startAttempt(now: now, freshConnection: true) : waitForPath(now: now)

        case .aborted(.paused), .aborted(.shutdown), .aborted(.recovery):
            // The engine stopped (shut down) without our asking: keep everything.
            return exit(.paused)

        case .aborted(.cancelled):
            return exit(.cancelled)
        }
    }

    /// After a transport failure, by its class: fail, spend the budget, or (a connection-level
    /// failure) retry at once after progress, back off after an answer, else wait for the server.
    private mutating func next(afterTransport error: DownloadError, of attempt: Attempt, madeProgress: Bool,
                               isRegistered: Bool, now: Instant, random: Double) -> [Action] {
        switch RetryClass(error.urlCode) {
        case .permanent:
            return exit(.failed(error))
        case .counted:
            return countedRetry(error, kind: .server, reason: .transportBackoff, retryAfter: nil, now: now, random: random)
        case .connectionLevel:
            guard path.isUsable else { return waitForPath(now: now) }
            if madeProgress {
                // A connection that was delivering died: usually a blip, so ask again at once
                // (the rate limit still holds).
                return [.emit(.retrying(after: .zero, error: error))] + startAttempt(now: now, freshConnection: true, isRecovery: true)
            }
            if attempt.sawResponse {
                // The server answered and then dropped the connection before any new byte:
                // it is there but misbehaving, so this spends the budget and backs off.
                return countedRetry(error, kind: .server, reason: .transportBackoff, retryAfter: nil, now: now, random: random)
            }
            return waitForServer(error, now: now, isRegistered: isRegistered, justProbed: attempt.isRecovery)
        }
    }

    /// A failure that spends the budget: retry after a backoff, or give up.
    private mutating func countedRetry(_ error: DownloadError, kind: WaitKind, reason: RetryReason,
                                       retryAfter: Duration?, now: Instant, random: Double) -> [Action] {
        consecutiveFailures += 1
        if consecutiveFailures > policy.maximumConsecutiveFailures {
            return exit(.failed(error.with(description: error.description + " (after \(consecutiveFailures) attempts)")))
        }
        var actions = beginOutage(kind, error: error, now: now)
        if reason == .transportBackoff, consecutiveFailures == 1 {
            // The first transport failure is retried at once (a dropped connection on a healthy
            // path is usually a blip); later ones back off.
            actions.append(.emit(.retrying(after: .zero, error: error)))
            return actions + startAttempt(now: now, freshConnection: true, isRecovery: true)
        }
        let failures = reason == .transportBackoff ? consecutiveFailures - 1 : consecutiveFailures
        let delay = policy.backoff.delay(afterFailures: failures, retryAfter: retryAfter, jitter: random)
        phase = .retryScheduled(reason)
        shownState = .running
        actions.append(.update(.running, .retrying(after: delay, error: error)))
        return actions + arm(.retry, at: now + delay)
    }

    private func restartLimitError(_ reason: String) -> DownloadError {
        if versionSeams > 0, reason.hasPrefix(ResponseStateMachine.changedVersionPrefix) { return versionSeamError(reason) }
        if entityTagChanges >= 2, !file.hasExpectedDigest {
            return .badServerResponse.with(description: """
                the server sent another ETag with each response for a file of the same length (\(entityTagChanges + 1) \
                different ones), as load-balanced servers whose machines make their own ETags do (Apache's \
                inode-based FileETag), so a resumed file cannot be proven to be one version; give the file's \
                SHA-256 (--sha256) and the download resumes with the digest as proof \
                (restarted from zero \(restarts) times)
                """)
        }
        return .badServerResponse.with(description: "\(reason) (restarted from zero \(restarts) times)")
    }

    /// A download that keeps meeting the seam between two versions: what it is and what to do.
    private func versionSeamError(_ reason: String) -> DownloadError {
        .badServerResponse.with(description: """
            \(reason); the same after restarting from zero (restarted \(restarts) times): a cache between \
            (the proxy, or the site's own, such as an nginx slice cache) still holds the first part of an older \
            version. Purge the URL from the cache (or wait until its entries expire), or download around it \
            (without the proxy), then run again
            """)
    }

    /// Whether the server ended the connection before the end of the entity.
    private static func isCutShort(_ result: AttemptResult) -> Bool {
        switch result {
        case .incomplete: true
        case .transport(let error): RetryClass(error.urlCode) == .connectionLevel
        default: false
        }
    }

    // MARK: pause, cancel, shutdown

    private mutating func stop(_ stop: Stop, exit reason: Exit) -> [Action] {
        switch phase {
        case .completing, .finished:
            return []
        case .transferring(var attempt):
            if let current = attempt.stop, current.isByRequest {
                // Cancel overrides a pause in flight; a second pause re-asserts one that a
                // resume had turned into a requeue.
                guard stop == .cancel && current != .cancel || stop == .pause && current == .pauseThenRequeue else { return [] }
                attempt.stop = stop
                phase = .transferring(attempt)
                return stop == .cancel ? [.abortAttempt(.cancelled)] : []
            }
            attempt.stop = stop
            phase = .transferring(attempt)
            let abort: AbortReason = switch stop {
            case .cancel: .cancelled
            case .shutdown: .shutdown
            default: .paused
            }
            return [.abortAttempt(abort)]
        case .idle, .waitingForPath, .retryScheduled:
            return exit(reason)
        case .waitingForServer:
            return [.leaveServerWait] + exit(reason)
        }
    }

    private mutating func exit(_ reason: Exit) -> [Action] {
        var actions: [Action] = []
        for kind in [Timer.Kind.retry, .outage, .deadline] where armed[kind] != nil { actions += disarm(kind) }
        phase = .finished
        return actions + [.exit(reason)]
    }

    // MARK: timers

    private mutating func arm(_ kind: Timer.Kind, at deadline: Instant) -> [Action] {
        let timer = Timer(kind: kind, generation: nextGeneration)
        nextGeneration += 1
        armed[kind] = timer.generation
        return [.armTimer(timer, at: deadline)]
    }

    private mutating func disarm(_ kind: Timer.Kind) -> [Action] {
        guard armed.removeValue(forKey: kind) != nil else { return [] }
        return [.cancelTimer(kind)]
    }
}
