import Foundation
import LinuxReachability
import Testing
@testable import ResumableDownloads

@Suite("Waiting for servers: one probe per host")
struct ServerProbeSchedulerTests {
    typealias S = ServerProbeScheduler
    let t0 = ContinuousClock.now
    let a = UUID(), b = UUID(), c = UUID()
    let host = "http://10.0.0.1:80"

    func armed(_ actions: [S.Action]) -> (generation: Int, at: ContinuousClock.Instant)? {
        for action in actions { if case .arm(_, let generation, let at) = action { return (generation, at) } }
        return nil
    }

    @Test func oneProbeAtATimeHoweverManyWait() {
        var s = S(schedule: ServerWaitSchedule())
        let first = s.join(a, host: host, now: t0)
        #expect(armed(first)?.at == t0 + .milliseconds(100), "the first probe within 100 ms")
        #expect(s.join(b, host: host, now: t0).isEmpty)
        #expect(s.join(c, host: host, now: t0).isEmpty)
        #expect(s.join(a, host: host, now: t0).isEmpty, "joining twice changes nothing")
        let grant = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(100))
        #expect(grant.first == .grant(a, connectTimeout: .seconds(2)), "no connection seen yet: a generous timeout")
        // The next probe is armed with the grant. The failed attempt that began the wait and the
        // quick probe were two attempts in 100 ms: the third waits for 1.5 s from the start (plus
        // the wait's phase, 25 ms at random 0.5), keeping two a second on average.
        #expect(armed(grant)?.at == t0 + .milliseconds(1525))
        // Refused: the same download is first in line again, for the probe already armed.
        #expect(s.report(a, host: host, reachable: false, now: t0 + .milliseconds(101), random: 0.5).isEmpty)
        #expect(s.probes(of: host) == 1)
        #expect(s.waiters(of: host) == [a, b, c])
        // A stale timer does nothing.
        #expect(s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(600)).isEmpty)
    }

    @Test func anAnswerReleasesEveryWaiter() {
        var s = S(schedule: ServerWaitSchedule())
        let first = s.join(a, host: host, now: t0)
        _ = s.join(b, host: host, now: t0)
        _ = s.join(c, host: host, now: t0)
        _ = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(100))
        #expect(s.report(a, host: host, reachable: true, now: t0 + .milliseconds(102)) == [.release([b, c])])
        #expect(!s.isWaiting(a) && !s.isWaiting(b) && !s.isWaiting(c))
        #expect(s.probes(of: host) == 0, "a new wait starts a new schedule")
    }

    @Test func anAnswerFromAnyAttemptReleasesTheWaiters() {
        var s = S(schedule: ServerWaitSchedule())
        _ = s.join(b, host: host, now: t0)
        #expect(s.report(a, host: host, reachable: true, now: t0) == [.release([b])])
        #expect(s.report(a, host: "http://other:80", reachable: true, now: t0).isEmpty)
    }

    @Test func aProberThatLeavesHandsTheNextProbeOn() {
        var s = S(schedule: ServerWaitSchedule())
        let first = s.join(a, host: host, now: t0)
        _ = s.join(b, host: host, now: t0)
        let grant = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(100))
        #expect(s.leave(a, now: t0 + .milliseconds(200)).isEmpty, "the next probe is armed already")
        #expect(armed(grant)?.at == t0 + .milliseconds(1525))
        #expect(s.timerFired(host: host, generation: armed(grant)!.generation, now: t0 + .milliseconds(1525)).first
                == .grant(b, connectTimeout: .seconds(2)))
        // The last one leaves: the host is forgotten.
        #expect(s.leave(b, now: t0 + .seconds(1)).isEmpty)
        #expect(s.waiters(of: host).isEmpty)
        #expect(!s.isWaiting(b))
    }

    @Test func probesSettleAtTheIntervalAndSlowDownAfterMinutes() {
        var s = S(schedule: ServerWaitSchedule())
        var (generation, now) = armed(s.join(a, host: host, now: t0))!
        var starts: [ContinuousClock.Instant] = []
        // A server down for 15 minutes, refusing at once.
        while now < t0 + .seconds(900) {
            let next = s.timerFired(host: host, generation: generation, now: now)
            if next.isEmpty {
                Issue.record("timer not honoured"); return
            }
            starts.append(now)
            #expect(s.report(a, host: host, reachable: false, now: now, random: 0.5).isEmpty)
            guard let (g, at) = armed(next) else { Issue.record("not rearmed"); return }
            generation = g
            now = at
        }
        // Probe starts: 100 ms, then 1.5 s (the quick probe paid back) and every 500 ms for two
        // minutes, 1 s until ten minutes, then 2 s.
        #expect(starts[0] == t0 + .milliseconds(100))
        #expect(starts[1] == t0 + .milliseconds(1525))
        #expect(starts[2] - starts[1] == .milliseconds(500))
        #expect(starts[3] - starts[2] == .milliseconds(500))
        // With the attempt that failed before the wait, at most two a second over any stretch
        // from its start: a 5 s outage costs the server 10 attempts, a minute 120.
        for seconds in [1, 2, 5, 10, 15, 30, 60, 90, 119] {
            let attempts = 1 + starts.filter { $0 <= t0 + .seconds(seconds) }.count
            #expect(attempts <= 2 * seconds, "\(attempts) attempts in the first \(seconds) s")
            #expect(attempts >= 2 * seconds - 1, "as many as the budget allows: \(attempts) in \(seconds) s")
        }
        let late = starts.filter { $0 >= t0 + .seconds(840) }.count
        #expect(late == 30, "one every two seconds after ten minutes: \(late)")
        #expect(starts.count < 2 * 120 + 480 + 150 + 10)
    }

    @Test func jitterSpreadsTheIntervalAroundItsMean() {
        let schedule = ServerWaitSchedule()
        // Settled probes are evenly spaced (the mean wait after a server's return is half the
        // spacing only for an even schedule); each wait gets a phase of 0-50 ms instead.
        #expect(schedule.delay(afterProbes: 3, waited: .seconds(1), random: 0) == .milliseconds(500))
        #expect(schedule.delay(afterProbes: 3, waited: .seconds(1), random: 1) == .milliseconds(500))
        #expect(schedule.phase(random: 0) == .zero)
        #expect(schedule.phase(random: 1) == .milliseconds(50))
        #expect(schedule.earliestStart(ofAttempt: 3, random: 1) == .milliseconds(1550))
        // The slow intervals after minutes vary by ±10 %.
        #expect(schedule.delay(afterProbes: 300, waited: .seconds(130), random: 0) == .milliseconds(900))
        #expect(schedule.delay(afterProbes: 300, waited: .seconds(700), random: 1) == .milliseconds(2200))
        #expect(schedule.delay(afterProbes: 0, waited: .zero, random: 1) == .milliseconds(100))
    }

    @Test func connectTimeoutsFollowTheIntervalAndTheHostsRoundTrip() {
        var s = S(schedule: ServerWaitSchedule())
        #expect(s.connectTimeout(for: host, now: t0) == .seconds(2))
        s.recordConnectTime(.microseconds(200), host: host)
        #expect(s.connectTimeout(for: host, now: t0) == .milliseconds(350),
                "a fast server: early enough for its failure to be known before the next probe is due")
        s.recordConnectTime(.milliseconds(400), host: "https://far:443")
        #expect(s.connectTimeout(for: "https://far:443", now: t0) == .milliseconds(1600), "a far one: four round trips")
    }

    @Test func aRetryThatJustFailedCountsAsTheFirstProbe() {
        var s = S(schedule: ServerWaitSchedule())
        // The retry that failed is attempt one: the next (attempt two) after two intervals.
        #expect(armed(s.join(a, host: host, now: t0, justProbed: true, random: 0.5))?.at == t0 + .milliseconds(1025))
        #expect(s.probes(of: host) == 1)
        // Someone already waiting: the host's schedule stands.
        var busy = S(schedule: ServerWaitSchedule())
        _ = busy.join(b, host: host, now: t0)
        #expect(busy.join(a, host: host, now: t0 + .milliseconds(50), justProbed: true).isEmpty)
        #expect(busy.probes(of: host) == 0)
    }

    @Test func aTimedOutProbeIsFollowedAtOnce() {
        // A probe that used its whole connect timeout: the next one goes without further delay.
        var s = S(schedule: ServerWaitSchedule())
        let first = s.join(a, host: host, now: t0)
        let grant = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(100))
        #expect(s.timerFired(host: host, generation: armed(grant)!.generation, now: t0 + .milliseconds(1525)).isEmpty,
                "one probe at a time: the next waits for this one's end")
        let next = s.report(a, host: host, reachable: false, now: t0 + .milliseconds(2100), random: 0.5)
        #expect(next.first == .grant(a, connectTimeout: .seconds(2)), "granted in the report itself: \(next)")
    }

    /// Probes of a blackholed server, each failure reported 140 ms after its connect gave up
    /// (a loaded machine): settled probes still go exactly 500 ms apart, since the next is armed
    /// with the grant and the connect timeout leaves room for the report. A report later than
    /// that sends the next probe at once, with no timer in between.
    @Test func probesOfABlackholedServerAreExactlyAnIntervalApart() {
        var s = S(schedule: ServerWaitSchedule())
        s.recordConnectTime(.microseconds(300), host: host)
        var actions = s.join(a, host: host, now: t0, justProbed: true, random: 0.5)
        var starts: [ContinuousClock.Instant] = []
        for _ in 0..<12 {
            guard let (generation, at) = armed(actions) else { Issue.record("not armed: \(actions)"); return }
            let grant = s.timerFired(host: host, generation: generation, now: at)
            guard case .grant(let id, let connectTimeout)? = grant.first, id == a else { Issue.record("no grant: \(grant)"); return }
            starts.append(at)
            #expect(connectTimeout == .milliseconds(350))
            // The connect gives up after its timeout; the failure arrives 140 ms later.
            #expect(s.report(a, host: host, reachable: false, now: at + connectTimeout + .milliseconds(140)).isEmpty)
            actions = grant
        }
        let gaps = zip(starts.dropFirst(), starts).map { $0 - $1 }
        #expect(gaps.dropFirst().allSatisfy { $0 == .milliseconds(500) }, "\(gaps)")
        // A failure reported after the next probe fell due: that probe goes with the report.
        guard let (generation, at) = armed(actions) else { Issue.record("not armed"); return }
        let grant = s.timerFired(host: host, generation: generation, now: at)
        #expect(s.timerFired(host: host, generation: armed(grant)!.generation, now: at + .milliseconds(500)).isEmpty)
        let late = s.report(a, host: host, reachable: false, now: at + .milliseconds(560))
        #expect(late.first == .grant(a, connectTimeout: .milliseconds(350)), "\(late)")
        #expect(armed(late)?.at == at + .milliseconds(1060), "the next one 500 ms after this late one")
    }

    /// A download that leaves the wait and joins again (another path read, a retry of its own)
    /// goes on with the host's wait within an interval: no quick first probe, no fresh budget.
    @Test func aProberLeavingAndJoiningAgainGoesOnWithTheWait() {
        var s = S(schedule: ServerWaitSchedule())
        s.recordConnectTime(.microseconds(300), host: host)
        let first = s.join(a, host: host, now: t0, justProbed: true, random: 0)
        var grant = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(1000))
        #expect(grant.first == .grant(a, connectTimeout: .milliseconds(350)))
        _ = s.report(a, host: host, reachable: false, now: t0 + .milliseconds(1360))
        grant = s.timerFired(host: host, generation: armed(grant)!.generation, now: t0 + .milliseconds(1500))
        #expect(s.probes(of: host) == 3)
        // The prober leaves mid-probe, and the host's wait ends with it...
        #expect(s.leave(a, now: t0 + .milliseconds(1600)).isEmpty)
        #expect(s.waiters(of: host).isEmpty && !s.isWaiting(a))
        // ...but it joins again 200 ms later, its probe failed: the wait goes on.
        let again = s.join(a, host: host, now: t0 + .milliseconds(1800), justProbed: true)
        #expect(s.probes(of: host) == 4, "the failed attempt counts as the wait's probe")
        #expect(armed(again)?.at == t0 + .milliseconds(2500), "not a quick first probe at 1.9 s: \(again)")
        // Another download joining instead goes on with it too.
        var other = S(schedule: ServerWaitSchedule())
        let start = other.join(a, host: host, now: t0, random: 0)
        let probe = other.timerFired(host: host, generation: armed(start)!.generation, now: t0 + .milliseconds(100))
        _ = other.leave(a, now: t0 + .milliseconds(300))
        let joined = other.join(b, host: host, now: t0 + .milliseconds(400))
        #expect(armed(joined)?.at == armed(probe)?.at, "the probe armed before the leave: \(joined)")
        // After an interval the ended wait is forgotten: a new wait, a quick first probe.
        _ = other.leave(b, now: t0 + .milliseconds(500))
        #expect(armed(other.join(c, host: host, now: t0 + .milliseconds(1001)))?.at == t0 + .milliseconds(1101))
        // An answer forgets it at once.
        _ = other.leave(c, now: t0 + .milliseconds(1200))
        _ = other.report(b, host: host, reachable: true, now: t0 + .milliseconds(1250))
        #expect(armed(other.join(a, host: host, now: t0 + .milliseconds(1300)))?.at == t0 + .milliseconds(1400))
    }

}

@Suite("Attempt rate limit, stall detector, slots and path notices")
struct RecoveryPartsTests {
    let t0 = ContinuousClock.now

    /// Bytes every `step` from `start` until `end` (the first one included).
    static func steady(_ detector: inout StallDetector, from start: ContinuousClock.Instant, to end: ContinuousClock.Instant,
                       every step: Duration) {
        var now = start
        while now <= end {
            detector.bytesArrived(at: now)
            now += step
        }
    }

    @Test func stallSuspicionFollowsTheRecentPace() {
        var fast = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        Self.steady(&fast, from: t0, to: t0 + .seconds(4), every: .milliseconds(10))
        #expect(fast.interval == .seconds(1), "a fast transfer is suspected after the minimum")
        #expect(fast.deadline == t0 + .seconds(4) + .seconds(1))

        var bursty = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        Self.steady(&bursty, from: t0, to: t0 + .seconds(4), every: .milliseconds(800))
        #expect(bursty.interval == .milliseconds(3200), "four times its longest gap")
        bursty.falseAlarm()
        #expect(bursty.interval == .milliseconds(6400), "slower to suspect after a false alarm")

        var trickle = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        trickle.bytesArrived(at: t0)
        trickle.bytesArrived(at: t0 + .seconds(20))
        #expect(trickle.interval == .seconds(30), "never past the stall timeout")

        // Old gaps are forgotten after two windows.
        var recovering = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        recovering.bytesArrived(at: t0)
        recovering.bytesArrived(at: t0 + .seconds(2))
        Self.steady(&recovering, from: t0 + .seconds(2), to: t0 + .seconds(14), every: .milliseconds(10))
        #expect(recovering.interval == .seconds(1))
        // Our own pause does not count as a gap.
        let now = t0 + .seconds(14)
        recovering.restart(at: now + .seconds(5))
        recovering.bytesArrived(at: now + .seconds(5) + .milliseconds(10))
        #expect(recovering.interval == .seconds(1))
    }

    /// A per-second rate limiter (lighttpd's connection.kbytes-per-second, nginx's limit_rate):
    /// a second's quota at once, then silence until the next second. The first silence is not
    /// taken for a stall: it comes while the transfer is still learning its pace, and once seen it
    /// sets the pace.
    @Test func aPerSecondLimitersSilenceIsLearnedNotSuspected() {
        var limited = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        // The answer took 200 ms: that wait is latency, not a gap of the body.
        let first = t0 + .milliseconds(200)
        Self.steady(&limited, from: first, to: first + .milliseconds(30), every: .milliseconds(1))
        #expect(limited.isLearning)
        #expect(limited.deadline > first + .milliseconds(30) + .milliseconds(1500),
                "the first silence of a per-second limiter is not suspected")
        for second in 1...4 {
            Self.steady(&limited, from: first + .seconds(second), to: first + .seconds(second) + .milliseconds(30),
                        every: .milliseconds(1))
        }
        #expect(!limited.isLearning)
        #expect(limited.interval >= .milliseconds(3800), "four times the ~970 ms silences: \(limited.interval)")

        // Learning is short: a transfer that dies after its first seconds is suspected after the
        // minimum again.
        var dying = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        Self.steady(&dying, from: t0, to: t0 + .milliseconds(2900), every: .milliseconds(10))
        #expect(dying.isLearning && dying.interval == .seconds(2))
        Self.steady(&dying, from: t0 + .milliseconds(2910), to: t0 + .seconds(6), every: .milliseconds(10))
        #expect(!dying.isLearning && dying.interval == .seconds(1))
    }

    /// Between a head and its first body byte: a direct server is suspected after the learning
    /// minimum, as before; through a proxy (squid holding a range's body until its one fetch of
    /// the object reaches it) only after `proxiedBodyStart`. Once the body flows, a proxied
    /// transfer is judged like any other.
    @Test func aProxysSilenceAfterTheHeadIsACacheFillingNotAStall() {
        let head = t0 + .milliseconds(50)
        var direct = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        direct.restart(at: head)
        #expect(direct.deadline == head + .seconds(2), "direct: unchanged")

        var proxied = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0, isProxied: true)
        proxied.restart(at: head)
        #expect(proxied.deadline == head + StallDetector.proxiedBodyStart)
        #expect(StallDetector.proxiedBodyStart >= .seconds(10))
        let body = head + .seconds(7)
        Self.steady(&proxied, from: body, to: body + .seconds(4), every: .milliseconds(10))
        #expect(proxied.interval == .seconds(1), "once the body flows, the pace rules: \(proxied.interval)")
        #expect(proxied.deadline == body + .seconds(4) + .seconds(1))

        // Never past the stall timeout; a false alarm doubles the wait.
        var capped = StallDetector(minimum: .seconds(1), maximum: .seconds(8), now: t0, isProxied: true)
        capped.restart(at: head)
        #expect(capped.interval == .seconds(8))
        var alarmed = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0, isProxied: true)
        alarmed.falseAlarm()
        #expect(alarmed.interval == StallDetector.proxiedBodyStart * 2)
    }

    // MARK: race turns

    static let host = "http://server:80"

    @Test func aHostSlowToAnswerIsSuspectedLater() {
        var scheduler = ServerProbeScheduler(schedule: ServerWaitSchedule())
        #expect(scheduler.answerSuspicion(for: Self.host, minimum: .seconds(1)) == .seconds(1))
        scheduler.recordAnswerTime(.milliseconds(1500), host: Self.host)
        #expect(scheduler.answerSuspicion(for: Self.host, minimum: .seconds(1)) == .seconds(6))
        #expect(scheduler.answerSuspicion(for: "http://other:80", minimum: .seconds(1)) == .seconds(1))
        scheduler.recordAnswerTime(.milliseconds(10), host: "http://fast:80")
        #expect(scheduler.answerSuspicion(for: "http://fast:80", minimum: .seconds(1)) == .seconds(1), "never below the minimum")
    }

    @Test func racesToOneHostTakeTurnsAtMostTwoASecond() {
        var scheduler = ServerProbeScheduler(schedule: ServerWaitSchedule())
        let (a, b, c) = (UUID(), UUID(), UUID())
        #expect(scheduler.requestRace(a, attempt: 1, host: Self.host, now: t0) == [.grantRace(a, attempt: 1)])
        #expect(scheduler.requestRace(b, attempt: 4, host: Self.host, now: t0).isEmpty, "one race at a time")
        #expect(scheduler.requestRace(c, attempt: 2, host: Self.host, now: t0).isEmpty)
        // Another host is not held up.
        let other = UUID()
        #expect(scheduler.requestRace(other, attempt: 1, host: "http://other:80", now: t0) == [.grantRace(other, attempt: 1)])
        #expect(scheduler.finishRace(a, reachable: true, now: t0 + .milliseconds(10)) == [.grantRace(b, attempt: 4)])
        // Two started within 10 ms: the third waits for the bucket (one per 0.5 s).
        let third = scheduler.finishRace(b, reachable: true, now: t0 + .milliseconds(20))
        guard case .armRace(let host, let generation, let at)? = third.first, third.count == 1 else {
            Issue.record("expected a race timer: \(third)")
            return
        }
        #expect(host == Self.host && at > t0 + .milliseconds(499) && at < t0 + .milliseconds(501), "\(at - t0)")
        #expect(scheduler.raceTimerFired(host: host, generation: generation + 1, now: at).isEmpty, "stale timer")
        #expect(scheduler.raceTimerFired(host: host, generation: generation, now: at) == [.grantRace(c, attempt: 2)])
        #expect(scheduler.isRacing(c))
        #expect(scheduler.finishRace(c, reachable: nil, now: at).isEmpty)
        #expect(!scheduler.isRacing(c))
    }

    @Test func aRacerThatCannotConnectRefusesTheHostsWaitingRaces() {
        var scheduler = ServerProbeScheduler(schedule: ServerWaitSchedule())
        let ids = (0..<5).map { _ in UUID() }
        #expect(scheduler.requestRace(ids[0], attempt: 1, host: Self.host, now: t0) == [.grantRace(ids[0], attempt: 1)])
        for id in ids.dropFirst() { #expect(scheduler.requestRace(id, attempt: 1, host: Self.host, now: t0).isEmpty) }
        // The first racer could not connect: every other stalled transfer of the host is dead
        // too, and none of them opens a connection to find out.
        let refused = scheduler.finishRace(ids[0], reachable: false, now: t0 + .milliseconds(500))
        #expect(refused == ids.dropFirst().map { .refuseRace($0, attempt: 1) })
        // While the host is waited for, a race is refused at once.
        _ = scheduler.join(ids[0], host: Self.host, now: t0 + .milliseconds(500), justProbed: true)
        let late = UUID()
        #expect(scheduler.requestRace(late, attempt: 3, host: Self.host, now: t0 + .seconds(1)) == [.refuseRace(late, attempt: 3)])
        #expect(!scheduler.isRacing(late))
    }

    @Test func aDownloadJoiningTheWaitRefusesTheHostsWaitingRaces() {
        var scheduler = ServerProbeScheduler(schedule: ServerWaitSchedule())
        let (racer, waiting, failed) = (UUID(), UUID(), UUID())
        _ = scheduler.requestRace(racer, attempt: 1, host: Self.host, now: t0)
        _ = scheduler.requestRace(waiting, attempt: 1, host: Self.host, now: t0)
        // Another download's attempt to the host could not connect.
        let actions = scheduler.join(failed, host: Self.host, now: t0 + .milliseconds(100))
        #expect(actions.contains(.refuseRace(waiting, attempt: 1)), "\(actions)")
        #expect(!actions.contains(.refuseRace(racer, attempt: 1)), "the racer already holds its turn")
        #expect(scheduler.isRacing(racer) && !scheduler.isRacing(waiting))
    }

    @Test func aLateAnswerAboutAnEarlierAttemptLeavesTheNewerClaim() {
        var scheduler = ServerProbeScheduler(schedule: ServerWaitSchedule())
        let (a, b) = (UUID(), UUID())
        _ = scheduler.requestRace(a, attempt: 1, host: Self.host, now: t0)
        _ = scheduler.requestRace(b, attempt: 2, host: Self.host, now: t0)
        // b's attempt 1 turn (long gone) is handed back: attempt 2 keeps waiting.
        #expect(scheduler.finishRace(b, attempt: 1, reachable: nil, now: t0).isEmpty)
        #expect(scheduler.isRacing(b))
        #expect(scheduler.finishRace(a, attempt: 1, reachable: true, now: t0) == [.grantRace(b, attempt: 2)])
    }

    @Test func aNewRequestReplacesTheOldClaim() {
        var scheduler = ServerProbeScheduler(schedule: ServerWaitSchedule())
        let (a, b) = (UUID(), UUID())
        _ = scheduler.requestRace(a, attempt: 1, host: Self.host, now: t0)
        _ = scheduler.requestRace(b, attempt: 1, host: Self.host, now: t0)
        // b's attempt 1 ended and attempt 2 asks: one claim per download.
        #expect(scheduler.requestRace(b, attempt: 2, host: Self.host, now: t0).isEmpty)
        #expect(scheduler.finishRace(a, reachable: true, now: t0) == [.grantRace(b, attempt: 2)])
    }

    @Test func schedulerHandsOutSlotsInOrder() {
        let ids = (0..<4).map { _ in UUID() }
        var scheduler = DownloadScheduler(limit: 2)
        for id in ids { scheduler.enqueue(id) }
        scheduler.enqueue(ids[0])
        #expect(scheduler.admit { $0 != ids[0] } == [ids[1], ids[2]], "a paused one keeps its place")
        #expect(scheduler.admit { _ in true }.isEmpty, "no free slot")
        scheduler.release(ids[1])
        #expect(scheduler.admit { _ in true } == [ids[0]])
        scheduler.dequeue(ids[3])
        scheduler.release(ids[0])
        #expect(scheduler.admit { _ in true }.isEmpty)
        #expect(DownloadScheduler(limit: 0).limit == 1)
    }

    /// URLSessionTask.priority: higher first, first come among equals; a download given back
    /// its place (requeued) goes behind its peers of the same priority.
    @Test func schedulerServesHigherPriorityFirst() {
        let ids = (0..<5).map { _ in UUID() }
        var scheduler = DownloadScheduler(limit: 1)
        scheduler.enqueue(ids[0])                    // 0.5
        scheduler.enqueue(ids[1], priority: 0.25)
        scheduler.enqueue(ids[2], priority: 1)
        scheduler.enqueue(ids[3])                    // 0.5, behind ids[0]
        scheduler.enqueue(ids[4], priority: 1)       // behind ids[2]
        #expect(scheduler.queue == [ids[2], ids[4], ids[0], ids[3], ids[1]])
        #expect(scheduler.admit { _ in true } == [ids[2]])
        scheduler.release(ids[2])
        scheduler.enqueue(ids[2], priority: 1)
        #expect(scheduler.queue == [ids[4], ids[2], ids[0], ids[3], ids[1]])
        scheduler.dequeue(ids[4])
        scheduler.enqueue(ids[4])                    // back at the default priority
        #expect(scheduler.queue == [ids[2], ids[0], ids[3], ids[4], ids[1]])
    }

    static func path(_ name: String, _ index: Int32, _ type: InterfaceType, _ address: String,
                     satisfied: Bool = true) -> NetworkPath {
        let interface = NetworkInterface(name: name, index: index, type: type, classificationReason: "scripted", isUp: true,
                                         hasCarrier: true, addresses: [address])
        return NetworkPath(status: satisfied ? .satisfied : .unsatisfied, unsatisfiedReason: satisfied ? nil : .noRoute,
                           primaryInterface: satisfied ? interface : nil,
                           routes: satisfied ? [PathRoute(family: .ipv4, interfaceName: name, interfaceIndex: index,
                                                          gateway: nil, sourceAddress: address)] : [],
                           interfaces: [interface])
    }

    @Test func pathNoticesRankTheDownloadsThatCanGo() {
        let wifi = Self.path("wlan0", 3, .wifi, "192.168.1.2")
        let cellular = Self.path("wwan0", 4, .cellular, "10.64.0.2")
        var waiters = PathWaiters(hasPathSource: true)
        #expect(waiters.usability(access: PathAccess(allowsExpensive: true)) == .unknown)
        let (a, b, c) = (UUID(), UUID(), UUID())
        let first = waiters.update(wifi, listeners: [.init(id: a, access: PathAccess(allowsExpensive: true)), .init(id: b, access: PathAccess(allowsExpensive: false)),
                                                     .init(id: c, access: PathAccess(allowsExpensive: true))])
        #expect(first.map(\.rank) == [0, 1, 2])
        #expect(first.allSatisfy { $0.facts.isNewPath && $0.facts.isUsable && !$0.facts.invalidatesTransfer })
        let running = (key: PathKey(wifi), pinnedInterface: String?.none)
        let second = waiters.update(cellular, listeners: [.init(id: a, access: PathAccess(allowsExpensive: true), transfer: running),
                                                          .init(id: b, access: PathAccess(allowsExpensive: false)),
                                                          .init(id: c, access: PathAccess(allowsExpensive: true))])
        #expect(second[0].facts.invalidatesTransfer)
        #expect(second[1].facts.usability == .unusable && second[1].rank == 0)
        #expect(second[2].rank == 1, "the cheap-only download is not counted")
        let same = waiters.update(cellular, listeners: [.init(id: c, access: PathAccess(allowsExpensive: true))])
        #expect(!same[0].facts.isNewPath)
    }
}

/// `--limit-rate`: the engine's own receive schedule.
@Suite struct ReceiveRateLimiterTests {
    let t0 = ContinuousClock.now

    @Test func aTransferAveragesAtMostItsLimitFromItsFirstByte() {
        var limiter = ReceiveRateLimiter(bytesPerSecond: 256 << 10)
        var now = t0
        var taken = 0
        var pauses = 0
        // libcurl offers 16 KiB chunks as fast as it can; the engine pauses when told.
        while taken < 4 << 20 {
            if let resume = limiter.admit(16 << 10, at: now) {
                #expect(resume > now)
                now = resume
                pauses += 1
                continue
            }
            taken += 16 << 10
            // From the first byte to any point: at most the limit, plus the chunk just taken.
            let parts = (now - t0).components
            let elapsed = Double(parts.seconds) + Double(parts.attoseconds) / 1e18
            #expect(Double(taken - (16 << 10)) <= 262_144 * elapsed + 1, "\(taken) bytes in \(elapsed) s")
        }
        #expect(now - t0 >= .milliseconds(15_900) && now - t0 <= .seconds(16), "4 MiB at 256 KiB/s: \(now - t0)")
        #expect(pauses > 0)
    }

    @Test func idleTimeEarnsNoBurst() {
        var limiter = ReceiveRateLimiter(bytesPerSecond: 1024)
        #expect(limiter.admit(1024, at: t0) == nil)
        #expect(limiter.admit(1024, at: t0 + .milliseconds(500)) == t0 + .seconds(1))
        // A minute without data (a slow server, a reconnect): still one chunk per second after it.
        let later = t0 + .seconds(60)
        #expect(limiter.admit(1024, at: later) == nil)
        #expect(limiter.admit(1024, at: later) == later + .seconds(1))
    }

    @Test func theReceiveBufferIsASixteenthOfASecondOfTheLimit() {
        #expect(ReceiveRateLimiter.receiveBufferSize(bytesPerSecond: 1024, maximum: 128 << 10) == 1024, "libcurl's floor")
        #expect(ReceiveRateLimiter.receiveBufferSize(bytesPerSecond: 256 << 10, maximum: 128 << 10) == 16 << 10)
        #expect(ReceiveRateLimiter.receiveBufferSize(bytesPerSecond: 10 << 20, maximum: 128 << 10) == 128 << 10)
    }
}
