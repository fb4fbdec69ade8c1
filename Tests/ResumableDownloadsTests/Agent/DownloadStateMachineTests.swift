import Foundation
import ReachabilityBase
import Testing
@testable import ResumableDownloads

/// The per-download recovery machine, driven without sockets, files or clocks: each test plays
/// a story of inputs and checks the actions the executor would carry out.
@Suite("Download state machine")
struct DownloadStateMachineTests {
    typealias M = DownloadStateMachine
    typealias Action = M.Action

    static let usable = M.PathFacts(usability: .usable(pinnedInterface: nil))
    static let newUsable = M.PathFacts(usability: .usable(pinnedInterface: nil), isNewPath: true)
    static let moved = M.PathFacts(usability: .usable(pinnedInterface: nil), invalidatesTransfer: true, isNewPath: true)
    static let offline = M.PathFacts(usability: .unusable, invalidatesTransfer: true, isNewPath: true)
    static let unknown = M.PathFacts(usability: .unknown)
    static let empty = M.FileFacts(storedBytes: 0)
    static let half = M.FileFacts(storedBytes: 500)
    static let refused = DownloadError.transport(.cannotConnectToHost, osErrorCode: ECONNREFUSED)

    /// A machine with a clock the test moves.
    struct Harness {
        var machine: M
        let start = ContinuousClock.now
        var now: ContinuousClock.Instant

        init(maximumOutageWait: Duration? = nil, maximumFailures: Int = 3, maximumRestarts: Int = 2,
             burst: Int = 4) {
            machine = M(policy: .init(backoff: Backoff(initial: .seconds(1), maximum: .seconds(8), maximumRetryAfter: .seconds(60)),
                                      maximumConsecutiveFailures: maximumFailures, maximumRestarts: maximumRestarts,
                                      maximumOutageWait: maximumOutageWait, restartStagger: .milliseconds(2),
                                      attemptRate: TokenBucket(burst: burst, interval: .milliseconds(500))))
            now = start
        }

        @discardableResult
        mutating func send(_ input: M.Input, after delay: Duration = .zero, random: Double = 1) -> [Action] {
            now += delay
            return machine.handle(input, now: now, random: random)
        }

        func at(_ offset: Duration) -> ContinuousClock.Instant { start + offset }

        var attempt: Int { machine.runningAttempt ?? -1 }

        /// Ends the running attempt, which received `received` body bytes.
        @discardableResult
        mutating func end(_ result: AttemptResult, file: M.FileFacts = DownloadStateMachineTests.half,
                          received: Int64 = 1 << 20, after delay: Duration = .zero, random: Double = 1) -> [Action] {
            send(.attemptEnded(attempt: attempt, result, file: file, received: received), after: delay, random: random)
        }
    }

    static func plan(_ id: Int, fresh: Bool = false, probe: Duration? = nil, recovery: Bool = false) -> Action {
        .startAttempt(.init(id: id, freshConnection: fresh || probe != nil, isProbe: probe != nil, connectTimeout: probe,
                            isRecovery: recovery))
    }

    static func starts(_ actions: [Action]) -> [M.AttemptPlan] {
        actions.compactMap { if case .startAttempt(let plan) = $0 { plan } else { nil } }
    }

    static func timers(_ actions: [Action]) -> [(M.Timer, ContinuousClock.Instant)] {
        actions.compactMap { if case .armTimer(let timer, let at) = $0 { (timer, at) } else { nil } }
    }

    static func exits(_ actions: [Action]) -> [M.Exit] {
        actions.compactMap { if case .exit(let exit) = $0 { exit } else { nil } }
    }

    // MARK: states, reached by stories

    /// Every state the machine can be in, reached the way the executor would reach it.
    enum Situation: String, CaseIterable, CustomTestStringConvertible {
        case idle, waitingForPath, waitingForUnknownPath, transferring, receiving, awaitingRaceTurn, racing, pausing, probing,
             waitingForServer, serverBackoff, transportBackoff, rateLimited, staggered, finished

        var testDescription: String { rawValue }

        func make() -> Harness {
            var h = Harness(maximumOutageWait: .seconds(60))
            switch self {
            case .idle: break
            case .waitingForPath: h.send(.start(empty, offline))
            case .waitingForUnknownPath: h.send(.start(empty, unknown))
            case .transferring: h.send(.start(half, usable))
            case .receiving:
                h.send(.start(half, usable))
                h.send(.responseStarted(attempt: h.attempt))
            case .awaitingRaceTurn:
                h.send(.start(half, usable))
                h.send(.responseStarted(attempt: h.attempt))
                h.send(.stallSuspected(attempt: h.attempt))
            case .racing:
                h.send(.start(half, usable))
                h.send(.responseStarted(attempt: h.attempt))
                h.send(.stallSuspected(attempt: h.attempt))
                h.send(.raceGranted(attempt: h.attempt))
            case .pausing:
                h.send(.start(half, usable))
                h.send(.pause)
            case .probing:
                h.send(.start(half, usable))
                h.end(.transport(refused))
                h.send(.probeGranted(connectTimeout: .milliseconds(500)))
            case .waitingForServer:
                h.send(.start(half, usable))
                h.end(.transport(refused))
            case .serverBackoff:
                h.send(.start(half, usable))
                h.end(.serverBusy(status: 503, retryAfter: .seconds(5)))
            case .transportBackoff:
                h.send(.start(half, usable))
                h.send(.responseStarted(attempt: h.attempt))
                h.end(.transport(.networkConnectionLost))   // answered, then dropped: retried at once
                h.send(.responseStarted(attempt: h.attempt))
                h.end(.transport(.networkConnectionLost))   // again: backs off
            case .rateLimited:
                h = Harness(maximumOutageWait: .seconds(60), burst: 1)
                h.send(.start(half, usable))
                h.send(.responseStarted(attempt: h.attempt))
                h.end(.incomplete(offset: 600), file: .init(storedBytes: 600))
            case .staggered:
                h.send(.start(empty, offline))
                h.send(.pathChanged(newUsable, rank: 3))
            case .finished:
                h.send(.start(half, usable))
                h.send(.cancel)
                h.end(.aborted(.cancelled))
            }
            return h
        }
    }

    static func inputs(for h: Harness) -> [M.Input] {
        let id = h.machine.runningAttempt ?? 1
        return [
            .start(half, usable), .pathChanged(newUsable, rank: 0), .pathChanged(offline, rank: 0),
            .pathChanged(moved, rank: 0), .responseStarted(attempt: id), .bytesArrived(attempt: id),
            .restartedFromZero(attempt: id, reason: "200"), .stallSuspected(attempt: id),
            .raceGranted(attempt: id), .raceRefused(attempt: id),
            .raceEnded(attempt: id, .racerWon), .raceEnded(attempt: id, .originalWon),
            .raceEnded(attempt: id, .racerFailed(.transport(.timedOut))), .raceEnded(attempt: id, .notPossible),
            .attemptEnded(attempt: id, .completed(totalLength: 1000), file: .init(storedBytes: 1000)),
            .attemptEnded(attempt: id, .transport(refused), file: half),
            .attemptEnded(attempt: id, .aborted(.paused), file: half),
            .probeGranted(connectTimeout: .milliseconds(500)), .serverReachable,
            .timerFired(.init(kind: .retry, generation: 1)), .timerFired(.init(kind: .outage, generation: 1)),
            .pause, .resume, .cancel, .shutdown,
        ]
    }

    /// Invariants for every input in every state: nothing starts while an attempt runs, an
    /// abort targets a running attempt, an exit is last and final, a finished machine is inert.
    @Test(arguments: Situation.allCases)
    func everyInputInEveryStateKeepsTheInvariants(_ situation: Situation) {
        let template = situation.make()
        for input in Self.inputs(for: template) {
            var h = template
            let running = h.machine.runningAttempt
            let wasFinished = h.machine.isFinished
            let actions = h.send(input, after: .milliseconds(10))
            if wasFinished { #expect(actions.isEmpty, "\(situation) \(input)") }
            let endsRunning: Bool = if case .attemptEnded(let id, _, _, _) = input { id == running } else { false }
            if running != nil, !endsRunning {
                #expect(Self.starts(actions).isEmpty, "\(situation) \(input): started while attempt \(running!) runs")
            }
            if actions.contains(where: { if case .abortAttempt = $0 { true } else { false } }) {
                #expect(running != nil && h.machine.runningAttempt == running, "\(situation) \(input): abort without attempt")
            }
            if let index = actions.firstIndex(where: { if case .exit = $0 { true } else { false } }) {
                #expect(index == actions.count - 1, "\(situation) \(input): exit is not last: \(actions)")
                #expect(h.machine.isFinished)
                for later in Self.inputs(for: h) { #expect(h.send(later).isEmpty, "\(situation) after exit: \(later)") }
            }
            if Self.starts(actions).count > 1 { Issue.record("\(situation) \(input): two attempts at once \(actions)") }
            let joins = actions.filter { if case .joinServerWait = $0 { true } else { false } }.count
            let leaves = actions.filter { $0 == .leaveServerWait }.count
            #expect(joins <= 1 && leaves <= 1 && !(joins == 1 && leaves == 1), "\(situation) \(input): \(actions)")
        }
    }

    // MARK: start and path

    @Test func startsAtOnceOnAUsablePath() {
        var h = Harness()
        #expect(h.send(.start(Self.empty, Self.usable)) == [.update(.running, .started), Self.plan(1)])
        var resumed = Harness()
        #expect(resumed.send(.start(Self.half, Self.usable)) == [.update(.running, .resumed(at: 500)), Self.plan(1)])
    }

    @Test func waitsForAPathAndAnnouncesOnlyAnUnusableOne() {
        var quiet = Harness()
        #expect(quiet.send(.start(Self.empty, Self.unknown)).isEmpty)
        #expect(quiet.send(.pathChanged(Self.offline, rank: 0)) == [.update(.waitingForConnectivity, .waitingForConnectivity)])
        #expect(quiet.send(.pathChanged(Self.offline, rank: 0)).isEmpty, "announced once")
        #expect(quiet.send(.pathChanged(Self.newUsable, rank: 0)) == [.update(.running, .started), Self.plan(1, fresh: true)])
    }

    @Test func restartsOnOnePathUpdateAreStaggeredByRank() {
        var h = Harness()
        h.send(.start(Self.empty, Self.offline))
        let actions = h.send(.pathChanged(Self.newUsable, rank: 3))
        #expect(actions == [.armTimer(.init(kind: .retry, generation: 1), at: h.at(.milliseconds(6)))])
        #expect(h.send(.timerFired(.init(kind: .retry, generation: 1)), after: .milliseconds(6))
                == [.update(.running, .started), Self.plan(1, fresh: true)])
    }

    @Test func aPathChangeUnderATransferAbortsItAndRestartsOnTheNewPath() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        #expect(h.send(.pathChanged(Self.usable, rank: 0)).isEmpty, "same path: nothing to do")
        #expect(h.send(.pathChanged(Self.moved, rank: 0)) == [.abortAttempt(.pathChanged)])
        #expect(h.send(.pathChanged(Self.moved, rank: 0)).isEmpty, "aborted once")
        #expect(h.end(.aborted(.pathChanged)) == [.update(.running, .resumed(at: 500)), Self.plan(2, fresh: true)])
        #expect(h.machine.consecutiveFailures == 0)
    }

    @Test func aLostPathUnderATransferWaitsWithoutSpendingBudget() {
        var h = Harness(maximumFailures: 0)
        h.send(.start(Self.half, Self.usable))
        #expect(h.send(.pathChanged(Self.offline, rank: 0)) == [.abortAttempt(.pathChanged)])
        #expect(h.end(.aborted(.pathChanged)) == [.update(.waitingForConnectivity, .waitingForConnectivity)])
        #expect(h.send(.pathChanged(Self.newUsable, rank: 0)) == [.update(.running, .resumed(at: 500)), Self.plan(2, fresh: true)])
    }

    // MARK: waiting for the server

    @Test func aRefusingServerIsWaitedForWithoutSpendingTheBudget() {
        var h = Harness(maximumFailures: 0)
        h.send(.start(Self.half, Self.usable))
        #expect(h.end(.transport(Self.refused)) == [.update(.running, .waitingForServer(Self.refused)), .joinServerWait(justProbed: false)])
        for attempt in 2...50 {
            let started = h.send(.probeGranted(connectTimeout: .milliseconds(500)), after: .milliseconds(500))
            #expect(started == [Self.plan(attempt, probe: .milliseconds(500))], "a probe is not announced")
            #expect(h.end(.transport(Self.refused)) == [.reportServer(reachable: false)], "no new announcement, no join")
        }
        #expect(h.machine.consecutiveFailures == 0)
        // The server answers the next probe: it is announced, and the other waiters released.
        h.send(.probeGranted(connectTimeout: .milliseconds(500)), after: .milliseconds(500))
        #expect(h.send(.responseStarted(attempt: h.attempt)) == [.reportServer(reachable: true), .update(.running, .resumed(at: 500))])
        #expect(h.end(.completed(totalLength: 1000), file: .init(storedBytes: 1000)) == [.complete(totalLength: 1000)])
    }

    @Test func anotherDownloadsAnswerReleasesTheWait() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        h.end(.transport(.timedOut))
        #expect(h.machine.isWaitingForServer)
        #expect(h.send(.serverReachable) == [.update(.running, .resumed(at: 500)), Self.plan(2, fresh: true)])
        #expect(h.send(.serverReachable).isEmpty)
    }

    /// A machine whose transfer was refused and whose host probe was just granted.
    static func probing() -> Harness {
        var h = Harness()
        h.send(.start(half, usable))
        h.end(.transport(refused))
        h.send(.probeGranted(connectTimeout: .milliseconds(500)))
        return h
    }

    @Test func aPathChangeDuringAProbeAbortsItAndLeavesTheQueue() {
        var h = Self.probing()
        #expect(h.send(.pathChanged(Self.moved, rank: 0)) == [.abortAttempt(.pathChanged)])
        // The probe ends aborted: it leaves the host's queue and tries at once on the new path.
        #expect(h.end(.aborted(.pathChanged)) == [.leaveServerWait, .update(.running, .resumed(at: 500)), Self.plan(3, fresh: true)])
    }

    @Test func aPathLostDuringAProbeWaitsForThePath() {
        var h = Self.probing()
        #expect(h.send(.pathChanged(Self.offline, rank: 0)) == [.abortAttempt(.pathChanged)])
        #expect(h.end(.aborted(.pathChanged)) == [.leaveServerWait, .update(.waitingForConnectivity, .waitingForConnectivity)])
    }

    @Test func aNewPathWhileWaitingForTheServerTriesAtOnce() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        h.end(.transport(Self.refused))
        #expect(h.send(.pathChanged(Self.usable, rank: 0)).isEmpty, "the same path: keep waiting")
        #expect(h.send(.pathChanged(Self.newUsable, rank: 0)) == [.leaveServerWait, .update(.running, .resumed(at: 500)),
                                                                  Self.plan(2, fresh: true)])
        var lost = Harness()
        lost.send(.start(Self.half, Self.usable))
        lost.end(.transport(Self.refused))
        #expect(lost.send(.pathChanged(Self.offline, rank: 0)) == [.leaveServerWait, .update(.waitingForConnectivity, .waitingForConnectivity)])
    }

    @Test func aDeliveringConnectionThatDiesIsRetriedAtOnceThenWaitedFor() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        h.send(.responseStarted(attempt: 1))
        let progressed = M.FileFacts(storedBytes: 800)
        #expect(h.end(.transport(.networkConnectionLost), file: progressed)
                == [.emit(.retrying(after: .zero, error: .networkConnectionLost)), .update(.running, .resumed(at: 800)),
                    Self.plan(2, fresh: true, recovery: true)])
        // The retry is refused: the server is gone.
        // The retry counts as the first probe.
        #expect(h.end(.transport(Self.refused), file: progressed) == [.update(.running, .waitingForServer(Self.refused)),
                                                                      .joinServerWait(justProbed: true)])
    }

    @Test func aServerThatAnswersAndDropsSpendsTheBudget() {
        var h = Harness(maximumFailures: 3)
        h.send(.start(Self.half, Self.usable))
        var delays: [Duration] = []
        for _ in 1...3 {
            h.send(.responseStarted(attempt: h.attempt))
            let actions = h.end(.transport(.networkConnectionLost))
            if let (_, at) = Self.timers(actions).first(where: { $0.0.kind == .retry }) {
                delays.append(at - h.now)
                h.send(.timerFired(Self.timers(actions).first { $0.0.kind == .retry }!.0), after: at - h.now)
            } else {
                delays.append(.zero)
            }
        }
        #expect(delays == [.zero, .seconds(1), .seconds(2)], "at once, then backed off")
        h.send(.responseStarted(attempt: h.attempt))
        #expect(Self.exits(h.end(.transport(.networkConnectionLost))) == [.failed(.networkConnectionLost)])
    }

    // MARK: the outage limit

    @Test(arguments: [
        ("path", M.WaitKind.path), ("server", .server), ("serverError", .serverError),
    ])
    func theOutageLimitBoundsEveryWaitAndNamesIt(_ name: String, _ kind: M.WaitKind) {
        var h = Harness(maximumOutageWait: .seconds(10), maximumFailures: 100)
        switch kind {
        case .path: h.send(.start(Self.half, Self.offline))
        case .server:
            h.send(.start(Self.half, Self.usable))
            h.end(.transport(Self.refused))
        case .serverError:
            h.send(.start(Self.half, Self.usable))
            h.end(.serverBusy(status: 503, retryAfter: nil))
        }
        let outage = M.Timer(kind: .outage, generation: 1)
        let actions = h.send(.timerFired(outage), after: .seconds(10))
        guard case .failed(let error) = Self.exits(actions).first else { Issue.record("\(actions)"); return }
        #expect(error == .connectivityTimeout)
        #expect(error.isResumable)
        let words = ["path": "no usable network path for 10 s", "server": "server could not be reached for 10 s",
                     "serverError": "server kept failing for 10 s"]
        #expect(error.description.contains(words[name]!), "\(error)")
        if kind == .server { #expect(actions.first == .leaveServerWait) }
    }

    @Test func theOutageClockRunsAcrossKindsAndStopsWhenBytesFlow() {
        var h = Harness(maximumOutageWait: .seconds(10))
        h.send(.start(Self.half, Self.usable))
        let first = h.end(.transport(Self.refused))
        #expect(Self.timers(first).map(\.1) == [h.at(.seconds(10))])
        // Path lost, then back: still the same outage (no new clock).
        #expect(Self.timers(h.send(.pathChanged(Self.offline, rank: 0), after: .seconds(2))).isEmpty)
        h.send(.pathChanged(Self.newUsable, rank: 0), after: .seconds(2))
        #expect(h.send(.bytesArrived(attempt: h.attempt)) == [.cancelTimer(.outage)])
        #expect(h.send(.timerFired(.init(kind: .outage, generation: 1)), after: .seconds(6)).isEmpty, "a stale timer")
        // A later outage starts its own clock.
        let again = h.end(.transport(Self.refused), file: Self.half)
        #expect(Self.timers(again).map(\.1) == [h.now + .seconds(10)])
    }

    @Test func theOutageLimitDuringAProbeAbortsItThenFails() {
        var h = Harness(maximumOutageWait: .seconds(3))
        h.send(.start(Self.half, Self.usable))
        h.end(.transport(Self.refused))
        h.send(.probeGranted(connectTimeout: .milliseconds(500)), after: .seconds(2))
        #expect(h.send(.timerFired(.init(kind: .outage, generation: 1)), after: .seconds(1)) == [.abortAttempt(.recovery)])
        let actions = h.end(.aborted(.recovery))
        #expect(actions.first == .leaveServerWait)
        #expect(Self.exits(actions).first == .failed(.connectivityTimeout))
    }

    // MARK: server errors

    @Test func serverErrorsHonourRetryAfterAndSpendTheBudget() {
        var h = Harness(maximumFailures: 2)
        h.send(.start(Self.half, Self.usable))
        let busy = h.end(.serverBusy(status: 503, retryAfter: .seconds(5)))
        #expect(busy.contains(.update(.running, .retrying(after: .seconds(5), error: .httpStatus(503)))))
        #expect(Self.timers(busy).contains { $0.0.kind == .retry && $0.1 == h.at(.seconds(5)) })
        #expect(h.send(.pathChanged(Self.newUsable, rank: 0)).isEmpty, "the server asked for the wait")
        h.send(.timerFired(Self.timers(busy).first { $0.0.kind == .retry }!.0), after: .seconds(5))
        let second = h.end(.serverBusy(status: 500, retryAfter: nil), random: 0)
        #expect(second.contains(.update(.running, .retrying(after: .seconds(1), error: .httpStatus(500)))))
        h.send(.timerFired(Self.timers(second).first { $0.0.kind == .retry }!.0), after: .seconds(1))
        #expect(Self.exits(h.end(.serverBusy(status: 500, retryAfter: nil))) == [.failed(.httpStatus)])
    }

    @Test func aTransportBackoffEndsOnANewPath() {
        var h = Situation.transportBackoff.make()
        #expect(h.send(.pathChanged(Self.usable, rank: 0)).isEmpty)
        #expect(Self.starts(h.send(.pathChanged(Self.newUsable, rank: 0))).count == 1)
    }

    // MARK: budgets and storms

    @Test func restartsFromZeroAreBoundedAndBackedOff() {
        var h = Harness(maximumRestarts: 2)
        h.send(.start(Self.half, Self.usable))
        #expect(h.end(.restartFromZero(reason: "x")) == [.restartFromZero(reason: "x"), .update(.running, .started), Self.plan(2)])
        let second = h.end(.restartFromZero(reason: "x"), file: Self.empty)
        #expect(second.prefix(1) == [.restartFromZero(reason: "x")])
        #expect(Self.timers(second).map(\.1) == [h.now + .seconds(1)], "the second restart waits")
        h.send(.timerFired(Self.timers(second)[0].0), after: .seconds(1))
        guard case .failed(let error) = Self.exits(h.end(.restartFromZero(reason: "x"))).first else { Issue.record(); return }
        #expect(error == .badServerResponse)
        #expect(error.description.contains("restarted from zero 3 times"))
    }

    @Test func aResponseThatRewindsTheFileCountsAsARestart() {
        var h = Harness(maximumRestarts: 1)
        h.send(.start(Self.half, Self.usable))
        #expect(h.send(.restartedFromZero(attempt: 1, reason: "200")) == [.emit(.restartedFromZero(reason: "200"))])
        h.send(.responseStarted(attempt: 1))
        // It got as far as before (no progress), then the connection dropped: counted, retried at once.
        #expect(Self.starts(h.end(.transport(.networkConnectionLost), file: Self.half)).count == 1)
        let actions = h.send(.restartedFromZero(attempt: 2, reason: "200"))
        #expect(actions == [.emit(.restartedFromZero(reason: "200")), .abortAttempt(.recovery)])
        guard case .failed(let error) = Self.exits(h.end(.aborted(.recovery))).first else { Issue.record(); return }
        #expect(error == .badServerResponse)
    }

    @Test func progressOnlyCountsPastTheFurthestPointEverStored() {
        var h = Harness(maximumFailures: 10)
        h.send(.start(Self.half, Self.usable))
        h.send(.responseStarted(attempt: 1))
        h.end(.transport(.networkConnectionLost), file: .init(storedBytes: 300))
        #expect(h.machine.consecutiveFailures == 1)
        #expect(h.machine.highWater == 500)
        h.send(.responseStarted(attempt: 2))
        h.end(.transport(.networkConnectionLost), file: .init(storedBytes: 700))
        #expect(h.machine.consecutiveFailures == 0)
        #expect(h.machine.highWater == 700)
    }

    @Test func attemptsAreRateLimitedWhateverTheServerDoes() {
        // Every attempt makes a little progress and is cut: at most the burst goes at once,
        // then one every half second.
        var h = Harness(burst: 4)
        h.send(.start(Self.half, Self.usable))
        var stored: Int64 = 500
        var startTimes: [Duration] = [.zero]
        for _ in 0..<20 {
            stored += 10
            var actions = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored))
            while Self.starts(actions).isEmpty {
                guard let (timer, at) = Self.timers(actions).first(where: { $0.0.kind == .retry }) else {
                    Issue.record("neither a start nor a timer: \(actions)"); return
                }
                actions = h.send(.timerFired(timer), after: at - h.now)
            }
            startTimes.append(h.now - h.start)
        }
        #expect(startTimes.prefix(4) == [.zero, .zero, .zero, .zero])
        let last = startTimes.last!
        #expect(last >= .milliseconds(8_500), "21 attempts with a burst of 4 take 8.5 s at two a second: \(startTimes)")
    }

    @Test func aCleanShortBodyContinuesWhenItProgressedAndBacksOffWhenNot() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        #expect(Self.starts(h.end(.incomplete(offset: 800), file: .init(storedBytes: 800))).count == 1)
        let stuck = h.end(.incomplete(offset: 800), file: .init(storedBytes: 800))
        #expect(Self.starts(stuck).isEmpty)
        #expect(Self.timers(stuck).contains { $0.0.kind == .retry })
    }

    @Test func terminalResults() {
        for (result, exit) in [(AttemptResult.failed(.httpStatus(404)), M.Exit.failed(.httpStatus)),
                               (.transport(.httpStatus), .failed(.httpStatus)),
                               (.transport(.transport(.serverCertificateUntrusted)), .failed(.transport(.serverCertificateUntrusted))),
                               (.aborted(.writeFailed(.diskFull)), .failed(.diskFull)),
                               (.aborted(.shutdown), .paused)] {
            var h = Harness()
            h.send(.start(Self.half, Self.usable))
            #expect(Self.exits(h.end(result)) == [exit], "\(result)")
        }
    }

    // MARK: stalls and races

    @Test func aSuspectedStallIsRacedOnceInItsHostsTurnAndARacerThatCannotConnectEndsTheTransfer() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        h.send(.responseStarted(attempt: 1))
        #expect(h.send(.stallSuspected(attempt: 1)) == [.requestRace(attempt: 1)], "the host's turn first")
        #expect(h.send(.stallSuspected(attempt: 1)).isEmpty, "one race at a time")
        #expect(h.send(.raceGranted(attempt: 1)) == [.race])
        #expect(h.send(.raceEnded(attempt: 1, .racerFailed(.transport(.timedOut))))
                == [.finishRace(attempt: 1, reachable: false), .abortAttempt(.recovery)])
        // The transfer ends; it made progress, but the racer already showed the server is gone
        // (its connection attempt counts as the wait's first probe).
        let ended = h.end(.aborted(.recovery), file: .init(storedBytes: 900))
        #expect(ended == [.update(.running, .waitingForServer(.timedOut)), .joinServerWait(justProbed: true)])
        #expect(h.machine.consecutiveFailures == 0)
    }

    @Test func aRefusedTurnEndsTheTransferAndWaitsForTheServer() {
        // Another racer to the same host could not connect: this stalled transfer is dead too,
        // and waits for the server without a connection attempt of its own.
        var h = Situation.awaitingRaceTurn.make()
        #expect(h.send(.raceRefused(attempt: 1)) == [.abortAttempt(.recovery)])
        let ended = h.end(.aborted(.recovery), file: .init(storedBytes: 900))
        #expect(Self.starts(ended).isEmpty)
        #expect(ended.contains(.joinServerWait(justProbed: false)), "\(ended)")
        #expect(h.machine.consecutiveFailures == 0)
    }

    @Test func aTurnThatComesTooLateIsHandedBack() {
        var h = Situation.awaitingRaceTurn.make()
        // Bytes came meanwhile and the attempt ended (the next one runs): the turn is released, not used.
        let ended = h.end(.incomplete(offset: 950), file: .init(storedBytes: 950))
        #expect(ended.first == .finishRace(attempt: 1, reachable: nil), "\(ended)")
        #expect(h.machine.runningAttempt == 2)
        #expect(h.send(.raceGranted(attempt: 1)) == [.finishRace(attempt: 1, reachable: nil)])
        var done = Situation.awaitingRaceTurn.make()
        done.end(.completed(totalLength: 1000), file: .init(storedBytes: 1000))
        #expect(done.send(.raceGranted(attempt: 1)).isEmpty, "a finished driver gave every turn back")
        var paused = Situation.awaitingRaceTurn.make()
        #expect(paused.send(.pause) == [.abortAttempt(.paused)])
        #expect(paused.send(.raceGranted(attempt: 1)) == [.finishRace(attempt: 1, reachable: nil)], "stopping: no race")
        #expect(paused.send(.raceRefused(attempt: 1)).isEmpty, "the pause stays in charge")
    }

    @Test func aRequestWithoutAnAnswerIsRacedAndARacerThatCannotConnectWaitsForTheServer() {
        // No answer yet: the engine's racer sends the request again on a fresh connection. It
        // cannot connect: the server went away after the request was sent, so the request is
        // abandoned at once.
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        #expect(h.send(.stallSuspected(attempt: 1)) == [.requestRace(attempt: 1)])
        #expect(h.send(.raceGranted(attempt: 1)) == [.race])
        #expect(h.send(.stallSuspected(attempt: 1)).isEmpty, "one race at a time")
        #expect(h.send(.raceEnded(attempt: 1, .racerFailed(.transport(.cannotConnectToHost))))
                == [.finishRace(attempt: 1, reachable: false), .abortAttempt(.recovery)])
        let ended = h.end(.aborted(.recovery))
        #expect(ended == [.update(.running, .waitingForServer(.cannotConnectToHost)), .joinServerWait(justProbed: true)])
        #expect(h.machine.consecutiveFailures == 0, "waiting for a server spends no budget")

        // The old connection answers first: the request carries on, and the body may be raced later.
        var slow = Harness()
        slow.send(.start(Self.half, Self.usable))
        slow.send(.stallSuspected(attempt: 1))
        #expect(slow.send(.raceGranted(attempt: 1)) == [.race])
        #expect(slow.send(.raceEnded(attempt: 1, .originalWon)) == [.finishRace(attempt: 1, reachable: true)])
        slow.send(.responseStarted(attempt: 1))
        #expect(slow.send(.stallSuspected(attempt: 1)) == [.requestRace(attempt: 1)])
    }

    @Test func raceOutcomesThatKeepTheTransfer() {
        for outcome in [M.RaceOutcome.racerWon, .originalWon] {
            var h = Situation.racing.make()
            #expect(h.send(.raceEnded(attempt: 1, outcome)) == [.finishRace(attempt: 1, reachable: true)])
            #expect(h.send(.stallSuspected(attempt: 1)) == [.requestRace(attempt: 1)], "may race again after \(outcome)")
        }
        for (outcome, reachable) in [(M.RaceOutcome.notPossible, Bool?.none),
                                     (.racerFailed(.serverBusy(status: 503, retryAfter: nil)), true),
                                     (.racerFailed(.restartFromZero(reason: "200")), true)] {
            var h = Situation.racing.make()
            #expect(h.send(.raceEnded(attempt: 1, outcome)) == [.finishRace(attempt: 1, reachable: reachable)])
            #expect(h.send(.stallSuspected(attempt: 1)).isEmpty, "no second race after \(outcome)")
        }
    }

    @Test func noRaceWithoutAUsablePath() {
        var h = Harness()
        h.send(.start(Self.half, Self.usable))
        h.send(.responseStarted(attempt: 1))
        h.send(.pathChanged(M.PathFacts(usability: .unusable), rank: 0))   // not yet aborted by the executor's facts
        #expect(h.send(.stallSuspected(attempt: 1)).isEmpty)
    }

    // MARK: short connections, varying ETags

    static func overlaps(_ actions: [Action]) -> [Int64] { starts(actions).map(\.overlap) }

    @Test func theOverlapShrinksForAServerThatCutsConnectionsShortButNeverBelowTheFloor() {
        var h = Harness()
        h.send(.start(Self.empty, Self.usable))
        h.send(.responseStarted(attempt: 1))
        // Every connection ends after 32 KiB: the next resume compares 8 KiB, not 64.
        var stored: Int64 = 32 << 10
        var next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored), received: 32 << 10)
        #expect(Self.overlaps(next) == [8 << 10], "\(next)")
        for _ in 0..<20 {
            h.send(.responseStarted(attempt: h.attempt))
            stored += 24 << 10
            next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored), received: 32 << 10)
            #expect(Self.overlaps(next) == [8 << 10], "each connection stores 24 KiB: \(next)")
        }
        #expect(h.machine.consecutiveFailures == 0)
        // Even shorter connections: never below 4 KiB.
        h.send(.responseStarted(attempt: h.attempt))
        next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored + 4000), received: 8000)
        #expect(Self.overlaps(next) == [ResumeOverlap.minimum], "\(next)")
        // Our own stops say nothing about the server.
        var paused = Harness()
        paused.send(.start(Self.empty, Self.usable))
        paused.send(.responseStarted(attempt: 1))
        paused.send(.pathChanged(Self.moved, rank: 0))
        #expect(Self.overlaps(paused.end(.aborted(.pathChanged), file: .init(storedBytes: 4096), received: 4096))
                == [ResumeOverlap.maximum])
    }

    @Test func attemptsThatStoreNewBytesDoNotSpendTheAttemptBudget() {
        // Four tokens, two a second: 40 short connections in a row, each storing 12 KiB, all start at once.
        var h = Harness()
        h.send(.start(Self.empty, Self.usable))
        var stored: Int64 = 0
        for _ in 0..<40 {
            h.send(.responseStarted(attempt: h.attempt))
            stored += 12 << 10
            let next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored), received: 16 << 10)
            #expect(Self.starts(next).count == 1, "\(next)")
        }
        // A server that gives a byte per connection is still held to the budget.
        var trickle = Harness()
        trickle.send(.start(Self.empty, Self.usable))
        var delayed = false
        for _ in 0..<8 {
            trickle.send(.responseStarted(attempt: trickle.attempt))
            stored += 1
            let next = trickle.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored), received: 1)
            if Self.starts(next).isEmpty {
                delayed = true
                break
            }
        }
        #expect(delayed, "a byte per attempt is rate limited")
    }

    @Test func varyingETagsWithADigestAreResumedWithoutValidators() {
        var h = Harness(maximumRestarts: 3)
        h.send(.start(M.FileFacts(storedBytes: 500, hasExpectedDigest: true), Self.usable))
        h.send(.responseStarted(attempt: 1))
        #expect(h.send(.entityTagChanged(attempt: 1)).isEmpty)
        h.send(.restartedFromZero(attempt: 1, reason: "200"))
        let next = h.end(.transport(.networkConnectionLost), file: M.FileFacts(storedBytes: 300, hasExpectedDigest: true))
        #expect(Self.starts(next).first?.usesValidators == false, "\(next)")
        #expect(h.machine.ignoresValidators)

        // Without a digest the validators stay, and the restart limit explains what the server does.
        var plain = Harness(maximumRestarts: 2)
        plain.send(.start(Self.half, Self.usable))
        var failure: M.Exit?
        for _ in 0..<5 where failure == nil {
            plain.send(.responseStarted(attempt: plain.attempt))
            plain.send(.entityTagChanged(attempt: plain.attempt))
            let actions = plain.send(.restartedFromZero(attempt: plain.attempt, reason: "200"))
            #expect(Self.starts(actions).isEmpty)
            let ended = plain.end(.transport(.networkConnectionLost), file: .init(storedBytes: 300), after: .seconds(10))
            #expect(!Self.starts(ended).contains { !$0.usesValidators })
            failure = Self.exits(ended).first
            if failure == nil, Self.starts(ended).isEmpty { plain.send(.timerFired(.init(kind: .retry, generation: 1)), after: .seconds(10)) }
        }
        guard case .failed(let error)? = failure else {
            Issue.record("expected a failure, got \(String(describing: failure))")
            return
        }
        #expect(error.description.contains("another ETag with each response"), "\(error.description)")
        #expect(error.description.contains("--sha256"), "\(error.description)")
    }

    // MARK: pause, resume, cancel, shutdown

    @Test func pauseDuringARaceAbortsBothAndPauses() {
        var h = Situation.racing.make()
        #expect(h.send(.pause) == [.abortAttempt(.paused)])
        #expect(h.send(.raceEnded(attempt: 1, .racerFailed(.transport(.timedOut)))) == [.finishRace(attempt: 1, reachable: false)],
                "the pause stays in charge (the host's waiting racers learn the server is gone)")
        #expect(Self.exits(h.end(.aborted(.paused))) == [.paused])
    }

    @Test func pauseThenResumeBeforeTheAbortLandsRequeues() {
        var h = Situation.pausing.make()
        #expect(h.send(.resume).isEmpty)
        #expect(Self.exits(h.end(.aborted(.paused))) == [.requeued])
        var again = Situation.pausing.make()
        again.send(.resume)
        #expect(again.send(.pause).isEmpty)
        #expect(Self.exits(again.end(.aborted(.paused))) == [.paused])
    }

    @Test func cancelOverridesAPauseInFlight() {
        var h = Situation.pausing.make()
        #expect(h.send(.cancel) == [.abortAttempt(.cancelled)])
        #expect(Self.exits(h.end(.aborted(.paused))) == [.cancelled])
    }

    @Test func anAttemptThatCompletedAsThePauseLandedCompletes() {
        var h = Situation.pausing.make()
        #expect(h.end(.completed(totalLength: 1000)) == [.complete(totalLength: 1000)])
        var cancelled = Situation.transferring.make()
        cancelled.send(.cancel)
        #expect(Self.exits(cancelled.end(.completed(totalLength: 1000))) == [.cancelled])
    }

    @Test(arguments: [Situation.waitingForPath, .waitingForServer, .serverBackoff, .transportBackoff, .staggered, .idle])
    func pauseAndCancelWhileWaitingEndAtOnce(_ situation: Situation) {
        for (input, exit) in [(M.Input.pause, M.Exit.paused), (.cancel, .cancelled), (.shutdown, .paused)] {
            var h = situation.make()
            let actions = h.send(input)
            #expect(Self.exits(actions) == [exit], "\(situation) \(input)")
            #expect(actions.contains(.leaveServerWait) == (situation == .waitingForServer))
            #expect(!actions.contains { if case .abortAttempt = $0 { true } else { false } })
        }
    }

    @Test func pauseDuringAProbeLeavesTheQueue() {
        var h = Situation.probing.make()
        #expect(h.send(.pause) == [.abortAttempt(.paused)])
        let actions = h.end(.aborted(.paused))
        #expect(actions.first == .leaveServerWait)
        #expect(Self.exits(actions) == [.paused])
    }

    @Test func staleInputsAreIgnored() {
        var h = Situation.receiving.make()
        #expect(h.send(.responseStarted(attempt: 7)).isEmpty)
        #expect(h.send(.stallSuspected(attempt: 7)).isEmpty)
        #expect(h.send(.attemptEnded(attempt: 7, .completed(totalLength: 1), file: Self.half)).isEmpty)
        #expect(h.send(.timerFired(.init(kind: .retry, generation: 99))).isEmpty)
        #expect(h.send(.probeGranted(connectTimeout: .seconds(1))).isEmpty)
        #expect(h.send(.serverReachable).isEmpty)
        #expect(h.send(.start(Self.half, Self.usable)).isEmpty)
    }
}

/// A cache holding the first part of an older version (nginx slice) cuts every response at the
/// seam between the versions: the resume's overlap gets the old bytes, the next byte never
/// comes. Two cuts in a row at one offset make the next attempt a seam probe; another version
/// past the seam restarts from zero once, and fails at once with what to do when it comes back.
@Suite("Download state machine: the seam of a cache holding an older version")
struct DownloadStateMachineSeamTests {
    typealias M = DownloadStateMachine
    typealias T = DownloadStateMachineTests
    static let seam: Int64 = 8 << 20
    static let changed = "\(ResponseStateMachine.changedVersionPrefix): every response was cut at offset 8388608, "
        + "and from there the ETag changed from \"A\" to \"B\""

    /// The attempt `actions` start, at once or when their retry timer fires.
    static func plan(_ h: inout T.Harness, after actions: [M.Action]) -> M.AttemptPlan? {
        if let plan = T.starts(actions).first { return plan }
        guard let (timer, at) = T.timers(actions).first else { return nil }
        return T.starts(h.send(.timerFired(timer), after: at - h.now)).first
    }

    /// Runs A's first part up to the seam and one more resume cut there; returns the next plan.
    static func cutTwiceAtTheSeam(_ h: inout T.Harness) -> M.AttemptPlan? {
        h.send(.responseStarted(attempt: h.attempt))
        let next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: seam), received: seam)
        #expect(T.starts(next).map(\.probesSeam) == [false], "a cut after progress is a blip first: \(next)")
        return cutAtTheSeam(&h, after: next)
    }

    /// A resume planned by `actions` gets its overlap and is cut at the seam; returns the next plan.
    static func cutAtTheSeam(_ h: inout T.Harness, after actions: [M.Action]) -> M.AttemptPlan? {
        let resume = plan(&h, after: actions)
        h.send(.responseStarted(attempt: h.attempt))
        let next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: seam), received: resume?.overlap ?? 0)
        return plan(&h, after: next)
    }

    @Test func twoCutsAtOneOffsetProbeTheSeamAndAnotherVersionThereEndsTheDownloadSayingWhy() {
        var h = T.Harness(maximumRestarts: 3)
        h.send(.start(T.empty, T.usable))
        let probe = Self.cutTwiceAtTheSeam(&h)
        #expect(probe?.probesSeam == true, "\(String(describing: probe))")
        h.send(.responseStarted(attempt: h.attempt))
        // The probe's byte is another version: restart from zero, once, at once.
        var next = h.end(.restartFromZero(reason: Self.changed), file: .init(storedBytes: Self.seam), received: 0)
        #expect(next.contains(.restartFromZero(reason: Self.changed)), "\(next)")
        #expect(T.starts(next).map(\.probesSeam) == [false], "\(next)")
        // The cache still holds A's first part: cut at the same seam (A's part again is no
        // progress past the furthest ever stored, and more than an overlap: no probe yet), then
        // a resume cut there is probed, and the same seam ends the download.
        h.send(.responseStarted(attempt: h.attempt))
        next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: Self.seam), received: Self.seam)
        #expect(Self.cutAtTheSeam(&h, after: next)?.probesSeam == true, "\(next)")
        h.send(.responseStarted(attempt: h.attempt))
        next = h.end(.restartFromZero(reason: Self.changed), file: .init(storedBytes: Self.seam), received: 0)
        guard case .failed(let error) = T.exits(next).first else { Issue.record("expected a failure: \(next)"); return }
        #expect(error.description.contains(ResponseStateMachine.changedVersionPrefix), "\(error)")
        #expect(error.description.contains("Purge the URL from the cache"), "says what to do: \(error)")
    }

    @Test func aProbeThatFindsTheSameVersionResumesAsBeforeAndLeavesTheOverlapAlone() {
        var h = T.Harness()
        h.send(.start(T.empty, T.usable))
        #expect(Self.cutTwiceAtTheSeam(&h)?.probesSeam == true)
        h.send(.responseStarted(attempt: h.attempt))
        let next = h.end(.transport(.networkConnectionLost.with(description: "cut, same validators")),
                         file: .init(storedBytes: Self.seam), received: 0, after: .seconds(10))
        let plan = Self.plan(&h, after: next)
        #expect(plan?.probesSeam == false, "a normal resume follows: \(next)")
        // The probe's empty answer did not shrink the overlap below what the 64 KiB cut left.
        #expect(plan?.overlap == 16 << 10, "\(String(describing: plan))")
    }

    @Test func cutsAtDifferentOffsetsOrWithProgressAreNoSeam() {
        var h = T.Harness()
        h.send(.start(T.empty, T.usable))
        var stored: Int64 = 0
        for _ in 0..<6 {
            stored += 100 << 10
            h.send(.responseStarted(attempt: h.attempt))
            let next = h.end(.transport(.networkConnectionLost), file: .init(storedBytes: stored), received: 164 << 10)
            #expect(Self.plan(&h, after: next)?.probesSeam == false, "\(next)")
        }
    }
}
