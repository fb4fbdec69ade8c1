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
        #expect(grant == [.grant(a, connectTimeout: .seconds(2))], "no connection seen yet: a generous timeout")
        // Refused: the same download is first in line again. The failed attempt that began the
        // wait and the quick probe were two attempts in 100 ms: the third waits for 1.5 s from the
        // start (plus the wait's phase, 25 ms at random 0.5), keeping two a second on average.
        let next = s.report(a, host: host, reachable: false, now: t0 + .milliseconds(101), random: 0.5)
        #expect(armed(next)?.at == t0 + .milliseconds(1525))
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
        _ = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(100))
        let next = s.leave(a, now: t0 + .milliseconds(200))
        #expect(armed(next)?.at == t0 + .milliseconds(1525))
        #expect(s.timerFired(host: host, generation: armed(next)!.generation, now: t0 + .milliseconds(1525))
                == [.grant(b, connectTimeout: .seconds(2))])
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
            let rearmed = s.report(a, host: host, reachable: false, now: now, random: 0.5)
            guard let (g, at) = armed(rearmed) else { Issue.record("not rearmed"); return }
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
        #expect(s.connectTimeout(for: host, now: t0) == .milliseconds(450), "a fast server: just before the next probe is due")
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
        _ = s.timerFired(host: host, generation: armed(first)!.generation, now: t0 + .milliseconds(100))
        let next = s.report(a, host: host, reachable: false, now: t0 + .milliseconds(2100), random: 0.5)
        #expect(armed(next)?.at == t0 + .milliseconds(2100))
    }
}

@Suite("Attempt rate limit, stall detector, slots and path notices")
struct RecoveryPartsTests {
    let t0 = ContinuousClock.now

    @Test func stallSuspicionFollowsTheRecentPace() {
        var fast = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        for step in 1...100 { fast.bytesArrived(at: t0 + .milliseconds(step)) }
        #expect(fast.interval == .seconds(1), "a fast transfer is suspected after the minimum")
        #expect(fast.deadline == t0 + .milliseconds(100) + .seconds(1))

        var bursty = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        bursty.bytesArrived(at: t0 + .milliseconds(800))
        bursty.bytesArrived(at: t0 + .milliseconds(900))
        #expect(bursty.interval == .milliseconds(3200), "four times its longest gap")
        bursty.falseAlarm()
        #expect(bursty.interval == .milliseconds(6400), "slower to suspect after a false alarm")

        var trickle = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        trickle.bytesArrived(at: t0 + .seconds(20))
        #expect(trickle.interval == .seconds(30), "never past the stall timeout")

        // Old gaps are forgotten after two windows.
        var recovering = StallDetector(minimum: .seconds(1), maximum: .seconds(30), now: t0)
        recovering.bytesArrived(at: t0 + .seconds(2))
        var now = t0 + .seconds(2)
        while now < t0 + .seconds(14) {
            now += .milliseconds(10)
            recovering.bytesArrived(at: now)
        }
        #expect(recovering.interval == .seconds(1))
        // Our own pause does not count as a gap.
        recovering.restart(at: now + .seconds(5))
        recovering.bytesArrived(at: now + .seconds(5) + .milliseconds(10))
        #expect(recovering.interval == .seconds(1))
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
        #expect(waiters.usability(allowsExpensive: true) == .unknown)
        let (a, b, c) = (UUID(), UUID(), UUID())
        let first = waiters.update(wifi, listeners: [.init(id: a, allowsExpensive: true), .init(id: b, allowsExpensive: false),
                                                     .init(id: c, allowsExpensive: true)])
        #expect(first.map(\.rank) == [0, 1, 2])
        #expect(first.allSatisfy { $0.facts.isNewPath && $0.facts.isUsable && !$0.facts.invalidatesTransfer })
        let running = (key: PathKey(wifi), pinnedInterface: String?.none)
        let second = waiters.update(cellular, listeners: [.init(id: a, allowsExpensive: true, transfer: running),
                                                          .init(id: b, allowsExpensive: false),
                                                          .init(id: c, allowsExpensive: true)])
        #expect(second[0].facts.invalidatesTransfer)
        #expect(second[1].facts.usability == .unusable && second[1].rank == 0)
        #expect(second[2].rank == 1, "the cheap-only download is not counted")
        let same = waiters.update(cellular, listeners: [.init(id: c, allowsExpensive: true)])
        #expect(!same[0].facts.isNewPath)
    }
}
