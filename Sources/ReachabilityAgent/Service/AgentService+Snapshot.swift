import FoundationEssentials
import LinuxReachability
import LinuxSystem
import ReachabilityBase
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
    /// UPower's facts as `status` last read them.
    let power = RecentPowerFacts()

    init(settings: AgentSettings, agent: DownloadAgent) {
        state = Mutex(State(settings: settings, agent: agent))
    }

    func update(_ body: (inout State) -> Void) { state.withLock { body(&$0) } }

    var current: State { state.withLock { $0 } }
}

/// Who asked for each download (the uid of an `add`, a background session's uid), readable
/// from any thread; a download without an entry is the agent's own user's.
final class DownloadOwners: Sendable {
    private struct Table {
        var owners: [UUID: UInt32] = [:]
        /// How many downloads belong to another uid than the agent's own.
        var foreign = 0
    }

    private let table = Mutex(Table())
    private let own = CurrentProcess.effectiveUserID

    subscript(id: UUID) -> UInt32? {
        get { table.withLock { $0.owners[id] } }
        set {
            table.withLock { [own] table in
                let old = if let newValue { table.owners.updateValue(newValue, forKey: id) } else { table.owners.removeValue(forKey: id) }
                if let old, old != own { table.foreign -= 1 }
                if let newValue, newValue != own { table.foreign += 1 }
            }
        }
    }

    /// Whether `uid` sees download `id`: its own (root sees every one).
    func isVisible(_ id: UUID, to uid: UInt32) -> Bool {
        uid == 0 || (self[id] ?? CurrentProcess.effectiveUserID) == uid
    }

    /// `isVisible(_:to: uid)` for many downloads from one copy of the table (no lock per
    /// download), or nil when `uid` sees every download: root, or the agent's own user while
    /// nobody else has added one (the common case, which then costs nothing per download).
    func visibility(to uid: UInt32) -> (@Sendable (UUID) -> Bool)? {
        guard uid != 0 else { return nil }
        let (owners, foreign) = table.withLock { ($0.owners, $0.foreign) }
        if uid == own, foreign == 0 { return nil }
        let own = own
        return { (owners[$0] ?? own) == uid }
    }
}

/// A `list` row before its report is made.
enum ListRow {
    /// A report made already (a download of an earlier agent, an upload).
    case earlier(AgentDownload)
    /// A download of the current agent.
    case live(Download)

    var isFinished: Bool {
        switch self {
        case .earlier(let report): [.completed, .failed].contains(report.state)
        case .live(let download): download.state.isFinal
        }
    }
}

/// The rows a `list` with `rows` sends (aria2's `tellWaiting`/`tellStopped` paging): the first
/// `rows` of those not finished and the latest `rows` finished ones, in list order; every row
/// without `rows`. Pure: tested without an agent.
struct ListPage<Row> {
    private(set) var rows: [Row] = []
    /// How many were left out.
    private(set) var omitted = 0

    init(_ all: [Row], rows limit: Int?, isFinished: (Row) -> Bool) {
        guard let limit else {
            rows = all
            return
        }
        // Read once per row: a download finishing meanwhile must not change the count.
        let flags = all.map(isFinished)
        let finished = flags.reduce(0) { $0 + ($1 ? 1 : 0) }
        var unfinishedTaken = 0, finishedSeen = 0
        for (row, isFinished) in zip(all, flags) {
            if isFinished {
                finishedSeen += 1
                guard finished - finishedSeen < limit else { continue }
            } else {
                guard unfinishedTaken < limit else { continue }
                unfinishedTaken += 1
            }
            rows.append(row)
        }
        omitted = all.count - rows.count
    }
}

/// UPower's facts, read again once they are a second old: the read (a system-bus connection
/// and two calls, up to 250 ms) runs on a thread of its own while `status` answers with the
/// facts it has, so a status polled every 50 ms never waits for it; only the first waits.
final class RecentPowerFacts: Sendable {
    private struct Latest {
        var facts: PowerFacts?
        var at: ContinuousClock.Instant?
        var isReading = false
    }

    private let latest = Mutex(Latest())

    /// The latest facts, read by `read` on the calling thread if there are none yet; facts a
    /// second old are read again in the background.
    func facts(read: @escaping @Sendable () -> PowerFacts) -> PowerFacts {
        let now = ContinuousClock.now
        let (known, isStale) = latest.withLock { latest -> (PowerFacts?, Bool) in
            guard let facts = latest.facts, let at = latest.at else { return (nil, false) }
            let isStale = now - at >= .seconds(1) && !latest.isReading
            if isStale { latest.isReading = true }
            return (facts, isStale)
        }
        guard let known else {
            let facts = read()
            latest.withLock { $0 = Latest(facts: facts, at: .now) }
            return facts
        }
        if isStale {
            SystemThread.detach(name: "power-facts") { [self] in
                let facts = read()
                latest.withLock { $0 = Latest(facts: facts, at: .now) }
            }
        }
        return known
    }
}

/// Downloads per reported state and per class (of those not finished), counted in one pass.
struct DownloadTally {
    private static let states = AgentDownload.State.allCases
    private static let classes = DownloadPriority.allCases
    private var stateCounts = [Int](repeating: 0, count: states.count)
    private var classCounts = [Int](repeating: 0, count: classes.count)

    mutating func count(_ state: DownloadState, priority: Float) {
        count(AgentService.reportedState(state))
        guard !state.isFinal else { return }
        classCounts[Self.index(of: DownloadPriority(value: priority))] += 1
    }

    mutating func count(_ state: AgentDownload.State) { stateCounts[Self.index(of: state)] += 1 }

    /// Adds a census's counts.
    mutating func add(_ census: DownloadCensus.Counts) {
        for kind in DownloadCensus.Kind.allCases {
            let state = AgentService.reportedState(kind)
            for priority in Self.classes {
                let count = census.count(kind, priority)
                stateCounts[Self.index(of: state)] += count
                if ![.completed, .failed].contains(kind) { classCounts[Self.index(of: priority)] += count }
            }
        }
    }

    // By a switch, not `allCases.firstIndex`: no array is made per download.
    private static func index(of state: AgentDownload.State) -> Int {
        switch state {
        case .queued: 0
        case .running: 1
        case .waitingForConnectivity: 2
        case .paused: 3
        case .completed: 4
        case .failed: 5
        case .unknown: 6
        }
    }

    private static func index(of priority: DownloadPriority) -> Int {
        switch priority {
        case .foreground: 0
        case .high: 1
        case .normal: 2
        case .low: 3
        }
    }

    private func count(of state: AgentDownload.State) -> Int { stateCounts[Self.index(of: state)] }

    /// Per state name, the states with none left out.
    var counts: [String: Int] {
        Dictionary(uniqueKeysWithValues: Self.states.filter { count(of: $0) > 0 }.map { ($0.rawValue, count(of: $0)) })
    }

    /// Per class name, the classes with none left out.
    var priorities: [String: Int] {
        Dictionary(uniqueKeysWithValues: Self.classes.filter { classCounts[Self.index(of: $0)] > 0 }
            .map { ($0.rawValue, classCounts[Self.index(of: $0)]) })
    }

    /// `AgentService.summary` of the counted downloads.
    var summary: String {
        AgentService.summary(running: count(of: .running), waiting: count(of: .waitingForConnectivity),
                             queued: count(of: .queued), paused: count(of: .paused))
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
        case .list(let rows):
            let state = mirror.current
            guard !state.hasBackground else { return nil }
            let path = state.path, cache = reportCache
            guard let rows else {
                // Every row, without the page's enum rows: a copy and a release per row were a
                // tenth of a whole list's CPU time (perf, issue 29).
                var reports = state.history
                let live = state.agent.downloadsNow
                reports.reserveCapacity(reports.count + live.count)
                for download in live { reports.append(cache.report(download, path: path)) }
                return .success(id: id, downloads: reports + uploadRows(visibleTo: uid))
            }
            // A page's candidates from the census's order (O(rows), issue 29): the first `rows`
            // unfinished and latest `rows` finished of the current agent's downloads hold every
            // one of theirs the page can take. Reports are made only for the page's rows.
            let censusPage = state.agent.census.page(rows: rows)
            let (live, listed) = (censusPage.rows, censusPage.listed)
            let uploads = uploadRows(visibleTo: uid)
            let rowsNow: [ListRow] = state.history.map { .earlier($0) } + live.map { .live($0) } + uploads.map { .earlier($0) }
            let page = ListPage(rowsNow, rows: rows) { $0.isFinished }
            var response = ControlResponse.success(id: id, downloads: page.rows.map {
                switch $0 {
                case .earlier(let report): report
                case .live(let download): cache.report(download, path: path)
                }
            })
            response.omittedDownloads = state.history.count + listed + uploads.count - page.rows.count
            return response
        default:
            return nil
        }
    }

    /// The agent's status as `uid` sees it from `state`: counts and summary of its own
    /// downloads; the total of every user's only for root. One pass with a lock per download
    /// and no name hashed or array built per download: at 10,000 jobs under load, a status's
    /// latency is its CPU time stretched by the machine's run queue (issue 29).
    nonisolated func status(_ state: ServiceSnapshot.State, visibleTo uid: UInt32) -> AgentStatus {
        let visible = mirror.owners.visibility(to: uid)
        let census = state.agent.census.current
        var tally = DownloadTally()
        if let visible {
            for download in state.agent.downloadsNow where visible(download.id) {
                tally.count(download.state, priority: download.options.priority)
            }
        } else {
            // Everyone's downloads: the agent's census, without visiting them.
            tally.add(census)
        }
        for entry in state.history where UUID(uuidString: entry.id).map({ visible?($0) ?? true }) ?? (uid == 0) {
            tally.count(entry.state)
        }
        let path = state.path, settings = state.settings
        // UPower's facts ("unknown" without UPower), asked at most once a second: each ask is a
        // system-bus connection and two calls (up to 250 ms), which a status polled every 50 ms
        // must not wait for every time.
        let power = mirror.power.facts(read: environment.power)
        var status = AgentStatus(
            pid: CurrentProcess.id, stateDirectory: environment.stateDirectory,
            startedAt: Timestamp.iso8601(startedAt),
            maximumConcurrentDownloads: settings.maximumConcurrentDownloads, allowsExpensive: settings.allowsExpensive,
            pathStatus: path?.status.rawValue, connection: path?.connection.rawValue,
            interface: path?.isSatisfied == true ? path?.primaryInterface?.name : nil, isExpensive: path?.isExpensive,
            allowsRoaming: settings.allowsRoaming, isRoaming: path?.isRoaming,
            counts: tally.counts, summary: tally.summary, totalDownloads: uid == 0 ? census.listed + state.history.count : nil,
            priorities: tally.priorities)
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
