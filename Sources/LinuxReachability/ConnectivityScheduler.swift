import FoundationEssentials
import ReachabilityBase

/// When to check connectivity and what to report meanwhile. Pure: the engine feeds it path
/// changes, check results and the clock, and executes the actions it returns.
///
/// - A path change that moves the primary route (interface, gateway, source, families) makes
///   connectivity `unknown` and starts a check at once; the engine publishes the path first.
///   Any other change (another interface's address) keeps the answer.
/// - No usable route: `offline` (`none`) without a check.
/// - After `full`, the next check is `interval` later; after `limited` or `portal`, after
///   `initialBackoff`, doubling up to `maximumBackoff`.
/// - One check at a time: a path change while one runs cancels it.
struct ConnectivityScheduler: Sendable {
    /// What the check goes out over: the path's per-family routes.
    struct Target: Hashable, Sendable {
        var routes: [PathRoute]
    }

    enum Action: Equatable, Sendable {
        case start(id: Int, target: Target)
        case cancel(id: Int)
    }

    /// A finished check.
    struct Outcome: Equatable, Sendable {
        var connectivity: Connectivity
        var portalURL: String?
        var answer: String
    }

    let check: ConnectivityCheck
    private(set) var connectivity = Connectivity.unknown
    private(set) var portalURL: String?
    private(set) var evidence: ConnectivityEvidence
    private(set) var target: Target?
    private(set) var running: Int?
    /// When the next check is due (none while one runs or without a route).
    private(set) var deadline: ContinuousClock.Instant?
    private(set) var backoff: Duration?
    private var lastID = 0
    private var hasSeenPath = false

    init(check: ConnectivityCheck) {
        self.check = check
        evidence = ConnectivityEvidence(url: check.url, time: nil, answer: "not checked yet")
    }

    mutating func pathChanged(_ path: NetworkPath, at date: Date) -> [Action] {
        let next = path.isSatisfied ? Target(routes: path.routes) : nil
        guard next != target || !hasSeenPath else { return [] }
        hasSeenPath = true
        target = next
        backoff = nil
        deadline = nil
        portalURL = nil
        var actions: [Action] = []
        if let running {
            actions.append(.cancel(id: running))
            self.running = nil
        }
        guard let next else {
            connectivity = .offline
            evidence = ConnectivityEvidence(url: check.url, time: date, answer: "no usable route; nothing sent")
            return actions
        }
        connectivity = .unknown
        evidence = ConnectivityEvidence(url: check.url, time: nil, answer: "checking")
        actions.append(start(next))
        return actions
    }

    /// Applies a finished check; returns whether the published connectivity changed.
    mutating func finished(id: Int, _ outcome: Outcome, at now: ContinuousClock.Instant, date: Date) -> Bool {
        guard id == running else { return false }
        running = nil
        let changed = outcome.connectivity != connectivity || outcome.portalURL != portalURL
        connectivity = outcome.connectivity
        portalURL = outcome.portalURL
        evidence = ConnectivityEvidence(url: check.url, time: date, answer: outcome.answer)
        if outcome.connectivity == .full {
            backoff = nil
            deadline = now + check.interval
        } else {
            let delay = ExponentialBackoff(initial: check.initialBackoff, maximum: check.maximumBackoff).delay(after: backoff)
            backoff = delay
            deadline = now + delay
        }
        return changed
    }

    /// The clock reached `deadline`: start the next check.
    mutating func timerFired(at now: ContinuousClock.Instant) -> [Action] {
        guard let deadline, deadline <= now, running == nil, let target else { return [] }
        self.deadline = nil
        return [start(target)]
    }

    private mutating func start(_ target: Target) -> Action {
        lastID += 1
        running = lastID
        return .start(id: lastID, target: target)
    }

    /// `path` with the current connectivity, portal and evidence.
    func apply(to path: NetworkPath) -> NetworkPath {
        var path = path
        path.connectivity = path.isSatisfied ? connectivity : .offline
        path.portalURL = path.isSatisfied ? portalURL : nil
        path.connectivityEvidence = evidence
        return path
    }
}
