import FoundationEssentials
import Synchronization
import ReachabilityBase

/// Waiting for servers that do not answer on a working path, one probe per host however many
/// downloads wait on it. Pure: the agent feeds it joins, leaves, probe results and timer firings,
/// and carries out what it answers (grant a download the next probe, release every waiter,
/// arm a timer).
///
/// The probe is a real attempt of one waiting download (so when the server is back, that
/// download is already resuming); when it gets an answer, the host's other waiters are released
/// at once. Probes follow `ServerWaitSchedule`, per host, from the first download's join until
/// the server answers or nobody waits any more.
///
/// Races share the host's budget: a transfer suspected of stalling races a fresh connection
/// only in its host's turn (one race at a time per host, at most two started a second), and not
/// at all while the host is waited for; a race whose fresh connection could not reach the server
/// refuses every race still waiting for its turn, so many transfers stalled by one outage cost
/// the server one connection attempt, not one each.
struct ServerProbeScheduler: Sendable {
    typealias Instant = ContinuousClock.Instant

    enum Action: Sendable, Hashable {
        /// This download's next attempt is the host's probe, with this connect timeout.
        case grant(UUID, connectTimeout: Duration)
        /// The server answered: these downloads try at once.
        case release([UUID])
        /// Call `timerFired(host:generation:now:)` at this instant.
        case arm(host: String, generation: Int, at: Instant)
        /// It is this attempt's turn to race.
        case grantRace(UUID, attempt: Int)
        /// This attempt may not race: its server does not answer other connections.
        case refuseRace(UUID, attempt: Int)
        /// Call `raceTimerFired(host:generation:now:)` at this instant.
        case armRace(host: String, generation: Int, at: Instant)
    }

    /// A download's attempt asking to race.
    private struct RaceClaim: Sendable, Hashable {
        var id: UUID
        var attempt: Int
    }

    /// The race turns of one host.
    private struct RaceTurns: Sendable {
        var holder: RaceClaim?
        var queue: [RaceClaim] = []
        var limiter: TokenBucket
        var armedGeneration: Int?
    }

    private struct Host: Sendable {
        var waiters: [UUID] = []
        var prober: UUID?
        var probes = 0
        /// Attempts charged to this wait: the failed one that began it, then every probe.
        var attempts = 1
        /// Drawn once per wait (0...1): the phase of its settled probes.
        var phase: Double
        var since: Instant
        var lastProbeAt: Instant?
        var armedGeneration: Int?
        /// The next probe fell due while the last one was still out (its failure not yet
        /// reported): it goes the moment that probe ends, without another timer.
        var isOverdue = false
    }

    /// A wait whose last waiter left, kept for one interval: a download that leaves and joins
    /// again (a path read, a retry of its own) goes on with the wait instead of restarting it
    /// (a quick first probe and a fresh budget would put the host above two attempts a second).
    private struct EndedWait: Sendable {
        var host: Host
        var until: Instant
    }

    let schedule: ServerWaitSchedule
    private var hosts: [String: Host] = [:]
    private var endedWaits: [String: EndedWait] = [:]
    private var hostOf: [UUID: String] = [:]
    private var races: [String: RaceTurns] = [:]
    private var raceHostOf: [UUID: String] = [:]
    /// Smoothed connect time per host (kept across waits: it sizes probe timeouts).
    private var connectTimes: [String: Duration] = [:]
    /// Smoothed time per host from a request to its answer (it sizes the answer suspicion).
    private var answerTimes: [String: Duration] = [:]
    private var nextGeneration = 1

    init(schedule: ServerWaitSchedule) { self.schedule = schedule }

    /// Probes sent to `host` in its current wait (tests, logs).
    func probes(of host: String) -> Int { hosts[host]?.probes ?? 0 }

    /// Whether `id` waits (or probes) for a server.
    func isWaiting(_ id: UUID) -> Bool { hostOf[id] != nil }

    /// Downloads waiting on `host`, the prober included.
    func waiters(of host: String) -> [UUID] {
        guard let entry = hosts[host] else { return [] }
        return (entry.prober.map { [$0] } ?? []) + entry.waiters
    }

    /// How long a connection to `host` may take to set up while it is suspected gone (probes,
    /// racers, retries after a lost connection).
    func connectTimeout(for host: String, now: Instant) -> Duration {
        let waited = hosts[host].map { now - $0.since } ?? .zero
        return schedule.connectTimeout(waited: waited, connectTime: connectTimes[host])
    }

    /// Records how long a successful connection to `host` took.
    mutating func recordConnectTime(_ duration: Duration, host: String) {
        Self.smooth(&connectTimes, duration, host: host)
    }

    /// Records how long `host` took to answer a request.
    mutating func recordAnswerTime(_ duration: Duration, host: String) {
        Self.smooth(&answerTimes, duration, host: host)
    }

    /// How long a request to `host` may go unanswered before it is raced: `minimum`, or four
    /// times the host's usual answer time (a server that takes seconds to start a response,
    /// generating it, is not raced on every request, only until its pace is known).
    func answerSuspicion(for host: String, minimum: Duration) -> Duration {
        max(minimum, (answerTimes[host] ?? .zero) * 4)
    }

    private static func smooth(_ table: inout [String: Duration], _ duration: Duration, host: String) {
        guard duration > .zero else { return }
        table[host] = table[host].map { $0 * 0.75 + duration * 0.25 } ?? duration
    }

    /// `id` starts waiting for `host`; `justProbed` when its failed attempt (just now) counts as
    /// the host's first probe.
    mutating func join(_ id: UUID, host: String, now: Instant, justProbed: Bool = false, random: Double = 0.5) -> [Action] {
        guard hostOf[id] == nil else { return [] }
        hostOf[id] = host
        endedWaits = endedWaits.filter { $0.value.until > now }
        var entry: Host
        if let existing = hosts[host] {
            entry = existing
        } else if let ended = endedWaits.removeValue(forKey: host) {
            // The wait goes on where it ended; the attempt that failed just now is one of its probes.
            entry = ended.host
            if justProbed {
                entry.probes += 1
                entry.attempts += 1
                entry.lastProbeAt = now
            }
        } else {
            entry = Host(phase: random, since: now)
            if justProbed {
                entry.probes = 1
                entry.lastProbeAt = now
            }
        }
        entry.waiters.append(id)
        hosts[host] = entry
        // The server did not answer this download: the races waiting for a turn would not reach it either.
        return refuseWaitingRaces(host) + armIfIdle(host, now: now, random: random)
    }

    /// `id` stops waiting (paused, cancelled, another path, gave up); a probe it was running is
    /// abandoned and the next waiter gets the next one.
    mutating func leave(_ id: UUID, now: Instant, random: Double = 0.5) -> [Action] {
        guard let host = hostOf.removeValue(forKey: id), var entry = hosts[host] else { return [] }
        entry.waiters.removeAll { $0 == id }
        if entry.prober == id { entry.prober = nil }
        if entry.waiters.isEmpty, entry.prober == nil {
            hosts[host] = nil
            entry.armedGeneration = nil
            entry.isOverdue = false
            endedWaits[host] = EndedWait(host: entry, until: now + schedule.interval)
            return []
        }
        hosts[host] = entry
        if entry.isOverdue, entry.prober == nil { return grantNext(host, now: now, random: random) }
        return armIfIdle(host, now: now, random: random)
    }

    /// What an attempt to `host` learned: `reachable` (any answer) releases every waiter; an
    /// unreachable result from the prober puts it back first in line for the next probe.
    mutating func report(_ id: UUID, host: String, reachable: Bool, now: Instant, random: Double = 0.5) -> [Action] {
        if reachable { endedWaits[host] = nil }
        guard var entry = hosts[host] else { return [] }
        if reachable {
            hosts[host] = nil
            let released = entry.waiters
            if let prober = entry.prober { hostOf[prober] = nil }
            for waiter in released { hostOf[waiter] = nil }
            return released.isEmpty ? [] : [.release(released)]
        }
        guard entry.prober == id else { return [] }
        entry.prober = nil
        entry.waiters.insert(id, at: 0)
        hosts[host] = entry
        // The next probe was armed when this one was granted; if it fell due meanwhile, it goes now.
        if entry.isOverdue { return grantNext(host, now: now, random: random) }
        return armIfIdle(host, now: now, random: random)
    }

    /// The host's timer fired: grant the first waiter the probe, or, while the last probe is
    /// still out, let the next go the moment it ends.
    mutating func timerFired(host: String, generation: Int, now: Instant, random: Double = 0.5) -> [Action] {
        guard var entry = hosts[host], entry.armedGeneration == generation else { return [] }
        entry.armedGeneration = nil
        if entry.prober != nil { entry.isOverdue = true }
        hosts[host] = entry
        return grantNext(host, now: now, random: random)
    }

    /// Grants the first waiter the probe and arms the one after it at once: probes are spaced
    /// from their grants, not from the moment a failure is reported (which comes late on a
    /// loaded machine, and would push the next probe back by as much).
    private mutating func grantNext(_ host: String, now: Instant, random: Double) -> [Action] {
        guard var entry = hosts[host], entry.prober == nil, !entry.waiters.isEmpty else { return [] }
        let prober = entry.waiters.removeFirst()
        entry.prober = prober
        entry.probes += 1
        entry.attempts += 1
        entry.lastProbeAt = now
        entry.isOverdue = false
        hosts[host] = entry
        return [.grant(prober, connectTimeout: connectTimeout(for: host, now: now))] + armNext(host, now: now, random: random)
    }

    // MARK: races

    /// `attempt` of `id` is suspected of stalling and asks for `host`'s turn to race (replacing
    /// any earlier claim of `id`). Refused at once while the host is waited for.
    mutating func requestRace(_ id: UUID, attempt: Int, host: String, now: Instant) -> [Action] {
        var actions = finishRace(id, reachable: nil, now: now)
        if hosts[host] != nil { return actions + [.refuseRace(id, attempt: attempt)] }
        var turns = races[host] ?? RaceTurns(limiter: TokenBucket(burst: 2, interval: schedule.interval))
        turns.queue.append(RaceClaim(id: id, attempt: attempt))
        races[host] = turns
        raceHostOf[id] = host
        actions += grantNextRace(host, now: now)
        return actions
    }

    /// `id`'s race turn (held or waited for) is over; `reachable` is what its racer learned
    /// (false refuses every race waiting for the host: its server is gone). With `attempt`, only
    /// that attempt's claim ends (a late answer about an earlier attempt leaves a newer claim).
    mutating func finishRace(_ id: UUID, attempt: Int? = nil, reachable: Bool?, now: Instant) -> [Action] {
        guard let host = raceHostOf[id], var turns = races[host] else { return [] }
        if let holder = turns.holder, holder.id == id, attempt == nil || holder.attempt == attempt {
            turns.holder = nil
        } else if let index = turns.queue.firstIndex(where: { $0.id == id && (attempt == nil || $0.attempt == attempt) }) {
            turns.queue.remove(at: index)
        } else {
            return []
        }
        raceHostOf[id] = nil
        races[host] = turns
        let refused = reachable == false ? refuseWaitingRaces(host) : []
        return refused + grantNextRace(host, now: now)
    }

    /// The host's race timer fired: the next claim may have its turn.
    mutating func raceTimerFired(host: String, generation: Int, now: Instant) -> [Action] {
        guard var turns = races[host], turns.armedGeneration == generation else { return [] }
        turns.armedGeneration = nil
        races[host] = turns
        return grantNextRace(host, now: now)
    }

    /// Whether `id` holds or waits for a race turn (tests).
    func isRacing(_ id: UUID) -> Bool { raceHostOf[id] != nil }

    private mutating func refuseWaitingRaces(_ host: String) -> [Action] {
        guard var turns = races[host], !turns.queue.isEmpty else { return [] }
        let refused = turns.queue
        turns.queue = []
        races[host] = turns
        for claim in refused { raceHostOf[claim.id] = nil }
        return refused.map { .refuseRace($0.id, attempt: $0.attempt) }
    }

    private mutating func grantNextRace(_ host: String, now: Instant) -> [Action] {
        guard var turns = races[host], turns.holder == nil, turns.armedGeneration == nil,
              let next = turns.queue.first else { return [] }
        if let available = turns.limiter.take(at: now) {
            let generation = nextGeneration
            nextGeneration += 1
            turns.armedGeneration = generation
            races[host] = turns
            return [.armRace(host: host, generation: generation, at: available)]
        }
        turns.queue.removeFirst()
        turns.holder = next
        races[host] = turns
        return [.grantRace(next.id, attempt: next.attempt)]
    }

    /// Arms the next probe when nobody probes and no timer runs.
    private mutating func armIfIdle(_ host: String, now: Instant, random: Double) -> [Action] {
        guard let entry = hosts[host], entry.prober == nil, entry.armedGeneration == nil, !entry.waiters.isEmpty else {
            return []
        }
        return armNext(host, now: now, random: random)
    }

    /// Arms the host's next probe (replacing any timer).
    private mutating func armNext(_ host: String, now: Instant, random: Double) -> [Action] {
        guard var entry = hosts[host] else { return [] }
        let delay = schedule.delay(afterProbes: entry.probes, waited: now - entry.since, random: random)
        var due = (entry.lastProbeAt ?? now) + delay
        if entry.probes > 0 {
            // Never ahead of one attempt per interval since the wait began (the quick first probe
            // is paid back by a longer gap after it).
            due = max(due, entry.since + schedule.earliestStart(ofAttempt: entry.attempts + 1, random: entry.phase))
        }
        // Spacing counts from the previous probe's start, so a probe that used up its connect
        // timeout is followed at once, and a refused one after the rest of the interval.
        due = max(now, due)
        let generation = nextGeneration
        nextGeneration += 1
        entry.armedGeneration = generation
        hosts[host] = entry
        return [.arm(host: host, generation: generation, at: entry.lastProbeAt == nil ? now + delay : due)]
    }
}

