import FoundationEssentials
import ReachabilityBase

/// What `DownloadStateMachine` is fed and what it answers: its policy, the facts it decides on,
/// its inputs, the attempts it plans and the actions its driver carries out.
extension DownloadStateMachine {
    struct Policy: Sendable, Hashable {
        var backoff: Backoff
        /// Consecutive counted failures without progress before giving up.
        var maximumConsecutiveFailures: Int
        /// Restarts from zero before giving up.
        var maximumRestarts: Int
        /// Bound on any one outage (path, server or server errors); nil waits forever.
        var maximumOutageWait: Duration?
        /// Spacing between downloads restarting on one path update.
        var restartStagger: Duration
        /// Attempt starts per download.
        var attemptRate: TokenBucket
        /// The job's own bound on an outage (`DownloadOptions.noProgressTimeout`), beside
        /// `maximumOutageWait`: the shorter ends it, and names itself in the error.
        var noProgressTimeout: Duration? = nil
        /// When the job must be done (`DownloadOptions.deadline` on this clock), and how to name it.
        var deadline: Instant? = nil
        var deadlineText = ""
    }

    /// What the executor knows about the partial file after a checkpoint.
    struct FileFacts: Sendable, Hashable {
        /// Contiguous bytes of the entity on disk.
        var storedBytes: Int64
        /// Whether the finished file is checked against an expected SHA-256: the digest then
        /// proves the result, whatever the server's validators say.
        var hasExpectedDigest = false
    }

    /// What the path means for this download now (computed by the executor from `PathPolicy`).
    /// The place for more facts about the path, such as whether it really reaches the Internet.
    struct PathFacts: Sendable, Hashable {
        var usability: PathUsability
        /// Whether the running transfer was started under a path this one replaces (another
        /// interface or source address, or none): its socket is dead or leaves the wrong way.
        var invalidatesTransfer: Bool
        /// Whether the path itself changed (satisfied, interface, source address): a server
        /// that did not answer on the old path may answer on this one.
        var isNewPath: Bool

        init(usability: PathUsability, invalidatesTransfer: Bool = false, isNewPath: Bool = false) {
            self.usability = usability
            self.invalidatesTransfer = invalidatesTransfer
            self.isNewPath = isNewPath
        }

        var isUsable: Bool { if case .usable = usability { true } else { false } }
    }

    /// How a race between a stalled transfer and a fresh connection ended.
    enum RaceOutcome: Sendable, Hashable {
        /// The fresh connection delivered the next byte first; it carries on, the old one is closed.
        case racerWon
        /// The old connection delivered the next byte first; the racer is closed.
        case originalWon
        /// The racer failed (could not connect, or answered something unusable); the old
        /// connection is still open.
        case racerFailed(AttemptResult)
        /// The transfer cannot be raced (no validator to ask for the rest safely).
        case notPossible
    }

    struct Timer: Sendable, Hashable {
        enum Kind: Sendable, Hashable {
            /// The end of a backoff, a stagger or a rate-limit delay.
            case retry
            /// `maximumOutageWait` since the outage began.
            case outage
            /// The job's deadline.
            case deadline
        }

        var kind: Kind
        /// Only the latest timer of a kind counts; older ones that still fire are ignored.
        var generation: Int
    }

    enum Input: Sendable, Hashable {
        /// The scheduler gave the download a slot.
        case start(FileFacts, PathFacts)
        /// The path (or what it means for this download) changed; `rank` orders the downloads
        /// woken by one update, for staggering.
        case pathChanged(PathFacts, rank: Int)
        /// The attempt got a response head: the server answers.
        case responseStarted(attempt: Int)
        /// Body bytes arrived.
        case bytesArrived(attempt: Int)
        /// The response made the partial file start over (a 200 to a range, another entity).
        case restartedFromZero(attempt: Int, reason: String)
        /// No byte for longer than this transfer's recent pace explains.
        case stallSuspected(attempt: Int)
        /// The host's turn to race came for this attempt.
        case raceGranted(attempt: Int)
        /// The attempt may not race: its server did not answer another connection just now (a
        /// race or an attempt of another download to the same host).
        case raceRefused(attempt: Int)
        /// A race ended.
        case raceEnded(attempt: Int, RaceOutcome)
        /// The attempt ended with this result; `file` is what is on disk after the checkpoint,
        /// `received` the body bytes the attempt got (the resume overlap included).
        case attemptEnded(attempt: Int, AttemptResult, file: FileFacts, received: Int64 = 0)
        /// A response carried another ETag than the one recorded, for an entity of the same
        /// length (a load balancer whose machines make their own ETags, or a changed file).
        case entityTagChanged(attempt: Int)
        /// This download's attempt is the next probe of its waited-for server.
        case probeGranted(connectTimeout: Duration)
        /// Another attempt to the waited-for server got an answer: try at once.
        case serverReachable
        case timerFired(Timer)
        case pause
        case resume
        case cancel
        case shutdown
    }

    struct AttemptPlan: Sendable, Hashable {
        var id: Int
        /// Open a new connection (and resolve the name again) rather than reuse one.
        var freshConnection: Bool
        /// This attempt is its host's probe.
        var isProbe: Bool
        /// A connect timeout shorter than the configured one (probes), or nil.
        var connectTimeout: Duration?
        /// A retry right after the connection died: connect with the host's probe timeout (the
        /// server may be gone, and the configured timeout is for first contact).
        var isRecovery = false
        /// The most bytes before the offset to fetch again and compare (`ResumeOverlap`).
        var overlap: Int64 = ResumeOverlap.maximum
        /// Whether the recorded ETag and Last-Modified guard the resume (`If-Range`, the 206's
        /// validators); false once they vary between responses and an expected SHA-256 proves
        /// the result instead (the overlap and length checks still apply).
        var usesValidators = true
        /// Responses were cut at the stored offset twice in a row without a new byte: ask for
        /// the byte at the offset only, to read its validators (`ResponseStateMachine`'s seam
        /// probe), instead of resuming.
        var probesSeam = false
    }

    /// How the driver ends.
    enum Exit: Sendable, Hashable {
        /// Paused (or shut down): checkpoint, close, keep the resume data.
        case paused
        /// Paused, but resumed meanwhile: checkpoint, close, and queue again.
        case requeued
        /// Cancelled: delete the partial file and record.
        case cancelled
        /// Failed; the resume data is kept when the error is resumable.
        case failed(DownloadError)
    }

    enum Action: Sendable, Hashable {
        case startAttempt(AttemptPlan)
        /// Abort the running attempt (it then ends with `.aborted(reason)`).
        case abortAttempt(AbortReason)
        /// Ask for the host's turn to race this attempt (`raceGranted` or `raceRefused` follows).
        case requestRace(attempt: Int)
        /// Race the running transfer with a fresh connection.
        case race
        /// The host's race turn of this attempt is over: what it learned about the server (`nil`:
        /// nothing; the attempt ended or the turn was not used).
        case finishRace(attempt: Int, reachable: Bool?)
        case armTimer(Timer, at: Instant)
        case cancelTimer(Timer.Kind)
        /// Wait for the server with the other downloads of its host (probes are granted).
        /// `justProbed`: the attempt that failed was itself a retry of a dropped connection, so
        /// it counts as the first probe (the ramp's quick first probe would only repeat it).
        case joinServerWait(justProbed: Bool)
        /// No longer waiting for the server (paused, path changed, gave up, probe abandoned).
        case leaveServerWait
        /// Tell the host's waiters what this attempt learned about the server.
        case reportServer(reachable: Bool)
        /// Drop the stored bytes before the next attempt.
        case restartFromZero(reason: String)
        /// Move the download to a state, with its event.
        case update(DownloadState, DownloadEvent?)
        /// An event that does not change the state.
        case emit(DownloadEvent)
        /// Every byte is in: verify and move into place (the driver ends).
        case complete(totalLength: Int64)
        case exit(Exit)
    }

    /// The kinds of waiting `maximumOutageWait` bounds.
    enum WaitKind: Sendable, Hashable {
        case path, server, serverError
    }
}

extension DownloadError {
    /// `connectivityTimeout`, saying which wait ran out.
    static func outageLimitReached(_ kind: DownloadStateMachine.WaitKind, after limit: Duration,
                                   lastError: DownloadError?) -> DownloadError {
        let span = "\(limit.formattedSeconds) s"
        let last = lastError.map { " (last: \($0.description))" } ?? ""
        switch kind {
        case .path:
            return DownloadError.connectivityTimeout.with(description: "no usable network path for \(span), the outage limit")
        case .server:
            return DownloadError(.connectivityTimeout, "the server could not be reached for \(span), the outage limit\(last)",
                                 urlErrorCode: .cannotConnectToHost)
        case .serverError:
            return DownloadError(.connectivityTimeout, "the server kept failing for \(span), the outage limit\(last)",
                                 urlErrorCode: .badServerResponse, httpStatusCode: lastError?.httpStatusCode)
        }
    }
}
