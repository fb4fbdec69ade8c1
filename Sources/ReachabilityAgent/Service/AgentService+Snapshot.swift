import FoundationEssentials
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization

/// What `status` and `queue list` are answered from on the connection's own thread (issue 29):
/// through the service actor they waited behind adds and 10,000 downloads' events, and the
/// cooperative pool they hop through has one thread per core (status p99 284 ms, list 540 ms
/// at 10,000 jobs). The service mirrors here the few values those answers read; each is
/// written where the service changes it, under this lock, so an answer is one consistent view.
final class ServiceSnapshot: Sendable {
    struct State: Sendable {
        var settings: AgentSettings
        var path: NetworkPath?
        var agent: DownloadAgent
        /// Downloads that ended under an earlier `DownloadAgent` of this process.
        var history: [AgentDownload] = []
        /// Whether background sessions or their transfers exist: their rows live in the actor's
        /// registry, so those answers still go through it.
        var hasBackground = false
    }

    private let state: Mutex<State>
    /// Who asked for each download, written per add (a dictionary in place, not copied).
    let owners = DownloadOwners()

    init(settings: AgentSettings, agent: DownloadAgent) {
        state = Mutex(State(settings: settings, agent: agent))
    }

    func update(_ body: (inout State) -> Void) { state.withLock { body(&$0) } }

    var current: State { state.withLock { $0 } }
}

/// Who asked for each download (the uid of an `add`, a background session's uid), readable
/// from any thread; a download without an entry is the agent's own user's.
final class DownloadOwners: Sendable {
    private let owners = Mutex<[UUID: UInt32]>([:])

    subscript(id: UUID) -> UInt32? {
        get { owners.withLock { $0[id] } }
        set { owners.withLock { $0[id] = newValue } }
    }

    /// Whether `uid` sees download `id`: its own (root sees every one).
    func isVisible(_ id: UUID, to uid: UInt32) -> Bool {
        uid == 0 || (self[id] ?? CurrentProcess.effectiveUserID) == uid
    }
}

extension AgentService {
    /// Answers `status` and `list` at once from the snapshot, on the calling (connection)
    /// thread; nil for every other request, or when background sessions exist (their rows are
    /// the actor's), which then go through `handle`.
    package nonisolated func answerWithoutWaiting(_ command: ControlCommand, id: ControlRequestID?,
                                                  peer: ControlPeer) -> ControlResponse? {
        let uid = peer.credentials.uid
        switch command {
        case .status:
            let state = mirror.current
            guard !state.hasBackground else { return nil }
            return .success(id: id, status: status(state, visibleTo: uid))
        case .list:
            let state = mirror.current
            guard !state.hasBackground else { return nil }
            let path = state.path, cache = reportCache
            return .success(id: id, downloads: state.history + state.agent.downloadsNow.map { cache.report($0, path: path) }
                                + uploadRows(visibleTo: uid))
        default:
            return nil
        }
    }

    /// The agent's status as `uid` sees it from `state`: counts and summary of its own
    /// downloads; the total of every user's only for root.
    nonisolated func status(_ state: ServiceSnapshot.State, visibleTo uid: UInt32) -> AgentStatus {
        let owners = mirror.owners
        let every = state.agent.downloadsNow
        let downloads = uid == 0 ? every : every.filter { owners.isVisible($0.id, to: uid) }
        var counts: [String: Int] = [:]
        var states: [DownloadState] = []
        states.reserveCapacity(downloads.count)
        var priorities: [String: Int] = [:]
        for download in downloads {
            // One read of each download's state (a lock each): 10,000 of them per status.
            let downloadState = download.state
            states.append(downloadState)
            counts[Self.stateName(downloadState), default: 0] += 1
            if !downloadState.isFinal { priorities[DownloadPriority(value: download.options.priority).rawValue, default: 0] += 1 }
        }
        for entry in state.history where UUID(uuidString: entry.id).map({ owners.isVisible($0, to: uid) }) ?? (uid == 0) {
            counts[entry.state.rawValue, default: 0] += 1
        }
        let path = state.path, settings = state.settings
        // UPower's facts, read per status (bounded to 250 ms; "unknown" without UPower).
        let power = environment.power()
        var status = AgentStatus(
            pid: CurrentProcess.id, stateDirectory: environment.stateDirectory,
            startedAt: Timestamp.iso8601(startedAt),
            maximumConcurrentDownloads: settings.maximumConcurrentDownloads, allowsExpensive: settings.allowsExpensive,
            pathStatus: path?.status.rawValue, connection: path?.connection.rawValue,
            interface: path?.isSatisfied == true ? path?.primaryInterface?.name : nil, isExpensive: path?.isExpensive,
            allowsRoaming: settings.allowsRoaming, isRoaming: path?.isRoaming,
            counts: counts, summary: Self.summary(states), totalDownloads: uid == 0 ? every.count + state.history.count : nil,
            priorities: priorities)
        (status.power, status.isOnBattery) = (power.description, power.isOnBattery)
        describeLimit(in: &status)
        return status
    }
}

extension AgentService {
    /// Mirrors whether background sessions or their transfers exist (a flag, not the registry:
    /// copying it per change would cost what the snapshot saves).
    func backgroundChanged() {
        let exists = !background.sessions.isEmpty || !backgroundEngineIDs.isEmpty
        mirror.update { $0.hasBackground = exists }
    }
}
