import FoundationEssentials
import ReachabilityBase

// A job's own time limits (issue 32 item 5): `DownloadOptions.deadline` (BITS' MaxDownloadTime,
// URLSession's timeoutIntervalForResource) and `noProgressTimeout` (BITS' NoProgressTimeout).
// `DownloadStateMachine` enforces both on its clock; these are the conversions around it.

extension DownloadOptions {
    /// These options with the time limits a resume record kept.
    func withTimeLimits(deadline: Date?, noProgressTimeout: Duration?) -> DownloadOptions {
        var options = self
        options.deadline = deadline
        options.noProgressTimeout = noProgressTimeout
        return options
    }
}

extension DownloadStateMachine.Policy {
    /// The policy of one job: its no-progress timeout, and its wall-clock deadline turned into an
    /// instant of the machine's monotonic clock (`now` and `wallClock` read at the same moment).
    func limitingTime(of options: DownloadOptions, now: ContinuousClock.Instant, wallClock: Date) -> Self {
        var policy = self
        policy.noProgressTimeout = options.noProgressTimeout
        if let deadline = options.deadline {
            let remaining = deadline.timeIntervalSince(wallClock)
            // Far deadlines are capped (a year) so the instant cannot overflow.
            policy.deadline = now + .milliseconds(Int64(max(0, min(remaining, 365 * 86_400)) * 1000))
            policy.deadlineText = Timestamp.iso8601(deadline)
        }
        return policy
    }
}

extension DownloadError {
    /// The job's deadline passed: `timedOut`, resumable (the bytes and record stay).
    static func deadlinePassed(_ deadline: String) -> DownloadError {
        DownloadError.timedOut.with(description: "the job's deadline passed (\(deadline)); its bytes and resume record are kept")
    }

    /// The job went `limit` without a byte after a transient error or a lost path.
    static func noProgress(for limit: Duration, lastError: DownloadError?) -> DownloadError {
        let last = lastError.map { " (last: \($0.description))" } ?? ""
        return DownloadError.timedOut.with(description:
            "no progress for \(limit.formattedSeconds) s, the job's no-progress timeout\(last); its resume data is kept")
    }
}

/// The deadlines of the agent's downloads, so that one waiting in line fails at its deadline,
/// not when its turn comes (a running one's state machine arms its own timer): one timer, for
/// the earliest deadline of a waiting download. Pure but for the timer it holds.
struct QueuedDeadlineWatch: Sendable {
    /// Every download that has a deadline (few: most have none).
    private(set) var deadlines: [UUID: Date] = [:]
    /// The armed timer and when it fires.
    var timer: (at: Date, task: Task<Void, Never>)?

    /// Notes download `id`'s deadline (nil: none).
    mutating func track(_ id: UUID, deadline: Date?) { deadlines[id] = deadline }

    /// Stops tracking the downloads `isKnown` rejects (forgotten ones).
    mutating func prune(keeping isKnown: (UUID) -> Bool) {
        deadlines = deadlines.filter { isKnown($0.key) }
    }

    /// Of the downloads `isWaiting` accepts (queued, no driver), the ones whose deadline is
    /// `now` or earlier, in deadline order, and the earliest deadline still ahead (when to look
    /// again; nil: no waiting download has one).
    func check(now: Date, isWaiting: (UUID) -> Bool) -> (due: [UUID], next: Date?) {
        var due: [(UUID, Date)] = []
        var next: Date?
        for (id, deadline) in deadlines where isWaiting(id) {
            if deadline <= now {
                due.append((id, deadline))
            } else if next.map({ deadline < $0 }) ?? true {
                next = deadline
            }
        }
        return (due.sorted { ($0.1, $0.0.uuidString) < ($1.1, $1.0.uuidString) }.map(\.0), next)
    }
}

extension DownloadAgent {
    /// Fails each download waiting in line whose deadline passed (`deadlinePassed`, its record
    /// and bytes kept, as a running one's), and arms the one timer for the next deadline.
    /// Called after each scheduling pass and when the timer fires.
    func checkQueuedDeadlines() {
        guard !isShutDown, !deadlineWatch.deadlines.isEmpty else { return }
        let now = Date()
        deadlineWatch.prune { entries[$0] != nil }
        let (due, next) = deadlineWatch.check(now: now) { id in
            guard let entry = entries[id] else { return false }
            return entry.driver == nil && scheduler.isQueued(id)
        }
        for id in due {
            guard let entry = entries[id], let deadline = deadlineWatch.deadlines[id] else { continue }
            scheduler.dequeue(id)
            let error = DownloadError.deadlinePassed(Timestamp.iso8601(deadline))
            configuration.logger.info("a queued download's deadline passed", metadata: ["id": id.uuidString])
            entry.download.update(state: .failed(error), event: .failed(error))
        }
        guard deadlineWatch.timer?.at != next else { return }
        deadlineWatch.timer?.task.cancel()
        deadlineWatch.timer = next.map { at in
            let wait = Duration.milliseconds(Int64(max(0, min(at.timeIntervalSince(now), 365 * 86_400)) * 1000) + 1)
            return (at, Task { [weak self] in
                try? await Task.sleep(for: wait)
                guard !Task.isCancelled, let self else { return }
                await self.queuedDeadlineTimerFired()
            })
        }
    }

    private func queuedDeadlineTimerFired() {
        deadlineWatch.timer = nil
        checkQueuedDeadlines()
    }
}
