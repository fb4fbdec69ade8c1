import FoundationEssentials
import Synchronization
import ReachabilityBase

/// `ServerProbeScheduler` shared by every agent of the process, with its timers: the
/// `reachability download` command runs one agent per URL, and a host waited for by several of
/// them still gets one probe at a time.
final class ServerProbeCoordinator: Sendable {
    /// How a waiting download is told it may probe, or that the server answers.
    typealias Deliver = @Sendable (DownloadStateMachine.Input) -> Void

    private struct State: Sendable {
        var scheduler: ServerProbeScheduler
        var deliver: [UUID: Deliver] = [:]
        var raceDeliver: [UUID: Deliver] = [:]
        var timers: [String: Task<Void, Never>] = [:]
        var raceTimers: [String: Task<Void, Never>] = [:]
    }

    private let state: Mutex<State>

    init(schedule: ServerWaitSchedule) {
        state = Mutex(State(scheduler: ServerProbeScheduler(schedule: schedule)))
    }

    private static let registry = Mutex<[ServerWaitSchedule: ServerProbeCoordinator]>([:])

    /// The process's coordinator for `schedule` (agents configured alike share one).
    static func shared(_ schedule: ServerWaitSchedule) -> ServerProbeCoordinator {
        registry.withLock { registry in
            if let existing = registry[schedule] { return existing }
            let coordinator = ServerProbeCoordinator(schedule: schedule)
            registry[schedule] = coordinator
            return coordinator
        }
    }

    /// `id` waits for `host`; `deliver` receives `.probeGranted` and `.serverReachable`.
    func join(_ id: UUID, host: String, justProbed: Bool, deliver: @escaping Deliver) {
        run { state in
            state.deliver[id] = deliver
            return state.scheduler.join(id, host: host, now: .now, justProbed: justProbed, random: .random(in: 0...1))
        }
    }

    /// `id` stops waiting (a no-op when it does not wait).
    func leave(_ id: UUID) {
        run { state in
            state.deliver[id] = nil
            return state.scheduler.leave(id, now: .now, random: .random(in: 0...1))
        }
    }

    /// `attempt` of `id` asks for `host`'s turn to race; `deliver` receives `.raceGranted` or
    /// `.raceRefused`.
    func requestRace(_ id: UUID, attempt: Int, host: String, deliver: @escaping Deliver) {
        run { state in
            state.raceDeliver[id] = deliver
            return state.scheduler.requestRace(id, attempt: attempt, host: host, now: .now)
        }
    }

    /// `id`'s race turn is over (a no-op when it has none; with `attempt`, only that attempt's);
    /// see `ServerProbeScheduler.finishRace`.
    func finishRace(_ id: UUID, attempt: Int? = nil, reachable: Bool?) {
        run { state in
            let actions = state.scheduler.finishRace(id, attempt: attempt, reachable: reachable, now: .now)
            if !state.scheduler.isRacing(id) { state.raceDeliver[id] = nil }
            return actions
        }
    }

    /// What an attempt of `id` to `host` learned about the server.
    func report(_ id: UUID, host: String, reachable: Bool) {
        run { $0.scheduler.report(id, host: host, reachable: reachable, now: .now, random: .random(in: 0...1)) }
    }

    /// See `ServerProbeScheduler.connectTimeout(for:now:)`.
    func connectTimeout(for host: String) -> Duration {
        state.withLock { $0.scheduler.connectTimeout(for: host, now: .now) }
    }

    /// See `ServerProbeScheduler.recordConnectTime(_:host:)`.
    func recordConnectTime(_ duration: Duration, host: String) {
        state.withLock { $0.scheduler.recordConnectTime(duration, host: host) }
    }

    /// See `ServerProbeScheduler.recordAnswerTime(_:host:)`.
    func recordAnswerTime(_ duration: Duration, host: String) {
        state.withLock { $0.scheduler.recordAnswerTime(duration, host: host) }
    }

    /// See `ServerProbeScheduler.answerSuspicion(for:minimum:)`.
    func answerSuspicion(for host: String, minimum: Duration) -> Duration {
        state.withLock { $0.scheduler.answerSuspicion(for: host, minimum: minimum) }
    }

    private func timerFired(host: String, generation: Int) {
        run { $0.scheduler.timerFired(host: host, generation: generation, now: .now) }
    }

    private func raceTimerFired(host: String, generation: Int) {
        run { $0.scheduler.raceTimerFired(host: host, generation: generation, now: .now) }
    }

    /// A task that calls `fire` at `deadline` unless it is cancelled first.
    private static func timer(at deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void) -> Task<Void, Never> {
        Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            guard !Task.isCancelled else { return }
            fire()
        }
    }

    /// Applies the scheduler's actions under the lock; tells the downloads after releasing it.
    private func run(_ body: (inout State) -> [ServerProbeScheduler.Action]) {
        let deliveries = state.withLock { state -> [(Deliver, DownloadStateMachine.Input)] in
            var deliveries: [(Deliver, DownloadStateMachine.Input)] = []
            for action in body(&state) {
                switch action {
                case .grant(let id, let connectTimeout):
                    if let deliver = state.deliver[id] { deliveries.append((deliver, .probeGranted(connectTimeout: connectTimeout))) }
                case .release(let ids):
                    for id in ids {
                        if let deliver = state.deliver.removeValue(forKey: id) { deliveries.append((deliver, .serverReachable)) }
                    }
                case .arm(let host, let generation, let deadline):
                    state.timers[host]?.cancel()
                    state.timers[host] = Self.timer(at: deadline) { [weak self] in self?.timerFired(host: host, generation: generation) }
                case .grantRace(let id, let attempt):
                    if let deliver = state.raceDeliver[id] { deliveries.append((deliver, .raceGranted(attempt: attempt))) }
                case .refuseRace(let id, let attempt):
                    if let deliver = state.raceDeliver.removeValue(forKey: id) {
                        deliveries.append((deliver, .raceRefused(attempt: attempt)))
                    }
                case .armRace(let host, let generation, let deadline):
                    state.raceTimers[host]?.cancel()
                    state.raceTimers[host] = Self.timer(at: deadline) { [weak self] in
                        self?.raceTimerFired(host: host, generation: generation)
                    }
                }
            }
            return deliveries
        }
        for (deliver, input) in deliveries { deliver(input) }
    }
}
