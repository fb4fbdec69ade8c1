import LinuxReachability

/// `wait`'s life as a plain state machine: facts arrive as events, the machine answers with what
/// to print and whether to exit. Tested without sockets or clocks (WaitTests).
struct WaitStateMachine: Sendable {
    /// Something the command learned.
    enum Event: Sendable, Equatable {
        /// The monitor's path changed (or its first path).
        case path(NetworkPath)
        /// The route to `--host` changed.
        case host(HostPath)
        /// The DNS check has a new answer.
        case dns(WaitPlan.DNSState)
        /// `elapsed` since the start: a 5 s report is due, or the timeout.
        case tick(elapsed: Duration)
        /// The monitor stopped (its stream finished).
        case monitorStopped
    }

    /// What the command does next.
    enum Action: Sendable, Equatable {
        /// Keep waiting, print nothing.
        case keepWaiting
        /// Keep waiting; say what is still missing.
        case report(elapsed: Duration, missing: [String])
        /// Exit 0: everything asked for holds.
        case online
        /// Exit 1: the timeout passed; the last line names what was missing.
        case timedOut(elapsed: Duration, missing: [String])
        /// Exit 1: the monitor stopped first.
        case stopped(missing: [String])
    }

    /// How often a waiting line is printed.
    static let reportInterval = Duration.seconds(5)

    let plan: WaitPlan
    /// nil waits for ever.
    let timeout: Duration?
    private(set) var facts: WaitPlan.Facts
    private(set) var isFinished = false

    init(plan: WaitPlan, timeout: Duration?, path: NetworkPath) {
        self.plan = plan
        self.timeout = timeout
        facts = WaitPlan.Facts(path: path)
    }

    /// What is missing now.
    var missing: [String] { plan.missing(facts) }

    /// The first decision, before any event: online at once, or keep waiting.
    mutating func start() -> Action {
        settle()
    }

    /// Applies one event.
    mutating func handle(_ event: Event) -> Action {
        guard !isFinished else { return .keepWaiting }
        switch event {
        case .path(let path):
            facts.path = path
        case .host(let hostPath):
            facts.hostPath = hostPath
        case .dns(let state):
            // An answer is kept: a later failed retry (there is none after an answer) cannot undo it.
            if case .answered = facts.dns { break }
            facts.dns = state
        case .tick(let elapsed):
            let missing = self.missing
            guard !missing.isEmpty else { return settle() }
            if let timeout, elapsed >= timeout {
                isFinished = true
                return .timedOut(elapsed: elapsed, missing: missing)
            }
            return .report(elapsed: elapsed, missing: missing)
        case .monitorStopped:
            isFinished = true
            return .stopped(missing: missing)
        }
        return settle()
    }

    private mutating func settle() -> Action {
        guard missing.isEmpty else { return .keepWaiting }
        isFinished = true
        return .online
    }

    /// The moments a tick is due, after `elapsed`: every 5 s, and the timeout itself.
    static func nextTick(after elapsed: Duration, timeout: Duration?) -> Duration? {
        let report = reportInterval * (Int(elapsed / reportInterval) + 1)
        guard let timeout else { return report }
        if elapsed >= timeout { return nil }
        return min(report, timeout)
    }
}
