import FoundationEssentials
import ReachabilityBase
import Synchronization

/// One receive limit over every connection of every download of an agent (issue 32 item 2):
/// the schedule every connection's chunks are paid from, and who is paid next. Pure.
///
/// Like `ReceiveRateLimiter`, each chunk is paid for at `bytesPerSecond` and taken only once the
/// bytes before it are paid; unlike it, the schedule is shared, so it decides between the
/// connections asking at once. The engine calls `admit` from libcurl's write callback: a refused
/// connection is paused until the instant returned and then asks again with the same chunk.
///
/// - **Higher classes first.** Of the jobs whose connections are due (their pause ended and they
///   asked again within `contention`), one of the highest class is paid; a lower class gets what
///   the higher ones do not take (a server-limited high job leaves the rest to the others).
/// - **Fair between jobs, not connections.** Within one class the job with the fewest bytes
///   recently (a count fading over `fairnessHalfLife`) is paid: a job over eight segments gets
///   what a job over one does.
/// - **Little credit.** Idle time earns at most `slack` of credit: enough to make up for the
///   engine waking a millisecond late at every chunk (at 16 MiB/s a 128 KiB chunk lasts 8 ms), too
///   little for a burst anyone could see over a second.
package struct AgentRateSchedule: Sendable {
    package typealias Instant = ContinuousClock.Instant

    /// A job's part in the schedule.
    private struct Job: Sendable {
        var rank: Int
        /// Bytes paid recently, fading with `fairnessHalfLife`, as of `updatedAt`.
        var recentBytes: Double
        var updatedAt: Instant
        /// When the job's refused connection was told to ask again (nil: nothing refused).
        var dueAt: Instant?
        /// When any of its connections last asked.
        var lastAsked: Instant
    }

    /// The limit in force; nil lets every chunk through.
    package private(set) var bytesPerSecond: Int64?
    /// When the chunks taken so far are paid for.
    private var paidUntil: Instant?
    private var jobs: [UUID: Job] = [:]

    /// Credit that idle time may earn at most.
    package static let slack: Duration = .milliseconds(60)
    /// How long after its due instant a refused job still counts as asking (it is late: the
    /// engine is busy); later, it is taken for gone and others are paid.
    package static let contention: Duration = .milliseconds(15)
    /// How fast the byte counts fairness compares fade (one over one plus elapsed over this).
    package static let fairnessHalfLife: Duration = .seconds(1)
    /// A job silent this long is forgotten.
    package static let forgetAfter: Duration = .seconds(10)

    /// A schedule at `bytesPerSecond` (nil: unlimited).
    package init(bytesPerSecond: Int64? = nil) {
        self.bytesPerSecond = bytesPerSecond.map { max(1, $0) }
    }

    /// Changes the limit; the chunks already paid keep their price, the next ones pay the new one.
    /// A lower limit takes effect with the next chunk, a higher one too: what was paid ahead at
    /// the old rate is cut to one chunk's worth at the new one, so raising 1 to 16 MiB/s does not
    /// wait out the slow schedule.
    package mutating func setLimit(_ newValue: Int64?, at now: Instant) {
        let newValue = newValue.map { max(1, $0) }
        guard newValue != bytesPerSecond else { return }
        bytesPerSecond = newValue
        if newValue == nil { paidUntil = nil; jobs.removeAll() }
        if let newValue, let paid = paidUntil, paid > now {
            paidUntil = min(paid, now + Self.cost(of: 128 << 10, at: newValue))
        }
    }

    /// Takes `count` bytes for a connection of `job` (of `priority`, `DownloadOptions.priority`)
    /// at `now` and returns nil, or returns the instant to ask again (taking nothing).
    package mutating func admit(_ count: Int, job id: UUID, priority: Float, at now: Instant) -> Instant? {
        guard let limit = bytesPerSecond else { return nil }
        let rank = Self.rank(priority)
        var job = jobs[id] ?? Job(rank: rank, recentBytes: newcomerBytes(rank: rank, at: now), updatedAt: now, dueAt: nil,
                                  lastAsked: now)
        job.rank = rank
        job.lastAsked = now
        let paid = paidUntil ?? now
        if paid > now {
            // Not paid yet: every refused job asks again at the same instant, and the most
            // deserving of them is paid then.
            job.dueAt = paid
            jobs[id] = job
            return paid
        }
        if let rival = mostDeserving(at: now), rival != id {
            // Someone who deserves it more is due now or asked a moment ago; ask again just after it.
            job.dueAt = now + .milliseconds(1)
            jobs[id] = job
            return job.dueAt
        }
        decay(&job, to: now)
        job.recentBytes += Double(count)
        job.dueAt = nil
        jobs[id] = job
        paidUntil = max(paid, now - Self.slack) + Self.cost(of: count, at: limit)
        forgetSilentJobs(at: now)
        return nil
    }

    /// The job to pay next among those due: the highest class, then the fewest recent bytes.
    private func mostDeserving(at now: Instant) -> UUID? {
        var best: (id: UUID, rank: Int, bytes: Double)?
        for (id, job) in jobs {
            guard let due = job.dueAt, due <= now, now - due <= Self.contention else { continue }
            let bytes = decayed(job, to: now)
            if let current = best, (current.rank, -current.bytes) >= (job.rank, -bytes) { continue }
            best = (id, job.rank, bytes)
        }
        return best?.id
    }

    /// A new job starts level with the least served job of its class, so it neither waits for the
    /// others' counts to decay nor takes the whole limit until its count catches up.
    private func newcomerBytes(rank: Int, at now: Instant) -> Double {
        jobs.values.filter { $0.rank == rank }.map { decayed($0, to: now) }.min() ?? 0
    }

    private func decayed(_ job: Job, to now: Instant) -> Double {
        // 1/(1 + t/T) rather than 2^(-t/T) (no libm here): updated at every chunk, the product of
        // the small steps is close to e^(-t/T), and the order between jobs is all that matters.
        let elapsed = max(0, (now - job.updatedAt).timeInterval)
        return job.recentBytes / (1 + elapsed / Self.fairnessHalfLife.timeInterval)
    }

    private func decay(_ job: inout Job, to now: Instant) {
        job.recentBytes = decayed(job, to: now)
        job.updatedAt = now
    }

    private mutating func forgetSilentJobs(at now: Instant) {
        guard jobs.count > 64 || jobs.values.contains(where: { now - $0.lastAsked > Self.forgetAfter }) else { return }
        jobs = jobs.filter { now - $0.value.lastAsked <= Self.forgetAfter }
    }

    /// How long `count` bytes take at `bytesPerSecond`.
    static func cost(of count: Int, at bytesPerSecond: Int64) -> Duration {
        .nanoseconds(Int64(count) * 1_000_000_000 / bytesPerSecond)
    }

    /// The class of a priority as a number, higher first (foreground 3 ... low 0).
    static func rank(_ priority: Float) -> Int {
        switch DownloadPriority(value: priority) {
        case .foreground: 3
        case .high: 2
        case .normal: 1
        case .low: 0
        }
    }
}

/// The agent's limit as the engine thread and the control thread share it: one
/// `AgentRateSchedule` behind a lock. Every transfer of an agent holds the same one, so a change
/// (`setLimit`) reaches running transfers at their next chunk without restarting them.
package final class AgentRateLimit: Sendable {
    private let schedule: Mutex<AgentRateSchedule>

    /// A shared limit at `bytesPerSecond` (nil: unlimited until `setLimit`).
    package init(bytesPerSecond: Int64? = nil) {
        schedule = Mutex(AgentRateSchedule(bytesPerSecond: bytesPerSecond))
    }

    /// The limit in force (nil: none).
    package var bytesPerSecond: Int64? { schedule.withLock { $0.bytesPerSecond } }

    /// Changes the limit for every transfer at its next chunk.
    package func setLimit(_ bytesPerSecond: Int64?) {
        let now = ContinuousClock.now
        schedule.withLock { $0.setLimit(bytesPerSecond, at: now) }
    }

    /// `AgentRateSchedule.admit` under the lock.
    func admit(_ count: Int, job: UUID, priority: Float, at now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        schedule.withLock { $0.admit(count, job: job, priority: priority, at: now) }
    }
}

/// What a transfer needs to draw from the agent's limit: the limit and whose bytes they are.
struct AgentRateShare: Sendable {
    let limit: AgentRateLimit
    let job: UUID
    let priority: Float
}
