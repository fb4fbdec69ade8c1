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
