import FoundationEssentials
import ReachabilityBase
import ResumableDownloads

/// A job's time limits on the control protocol and the command line (issue 32 item 5).
package enum JobTimeLimits {
    /// `--deadline` and `--no-progress-timeout`: seconds above 0, at most a year.
    package static let seconds = Seconds.positive(upTo: .seconds(365 * 86_400))
}

extension ControlCodec {
    /// `add`'s `deadline` and `noProgressTimeout`, in seconds, within `JobTimeLimits.seconds`.
    static func decodeTimeLimits(_ request: ControlRequest) -> Result<(Duration?, Duration?), ControlError> {
        func limit(_ value: Double?, _ name: String) -> Result<Duration?, ControlError> {
            guard let value else { return .success(nil) }
            guard value.isFinite, let span = JobTimeLimits.seconds.value(from: String(value)) else {
                return .failure(.invalidArgument("'\(name)' must be \(JobTimeLimits.seconds.expectation)"))
            }
            return .success(span)
        }
        return limit(request.deadline, "deadline").flatMap { deadline in
            limit(request.noProgressTimeout, "noProgressTimeout").map { (deadline, $0) }
        }
    }
}

extension DownloadOptions {
    /// These options with a queued job's time limits, the deadline counted from `now`.
    func limitingTime(_ job: QueueJobOptions, now: Date) -> DownloadOptions {
        var options = self
        options.deadline = job.deadline.map { now.addingTimeInterval($0.timeInterval) }
        options.noProgressTimeout = job.noProgressTimeout
        return options
    }
}
