import FoundationEssentials
import LinuxSystem
import LinuxReachability
import ResumableDownloads
import Synchronization
import ReachabilityEvents

/// What the agent does with downloads, separate from sockets, signals and files: handles
/// control commands, keeps user pauses across restarts, reports events and the status summary.
///
/// The `DownloadAgent` it drives is replaced when a reload changes the concurrency limit
/// (`DownloadAgent.Configuration` is fixed at creation): the old one is shut down, which
/// checkpoints every transfer, and the new one restores them from their records.
//
// Longer than 400 lines on purpose: the actor's stored state must be declared here, beside the
// commands that change it; background sessions are in AgentService+Background.swift.
package actor AgentService {
    /// The outside world the service reports to and builds agents with.
    package struct Environment: Sendable {
        /// The state directory (for default destinations and the paused list).
        package var stateDirectory: String
        /// Other spellings of directories the agent writes to, mapped to the real path: the state
        /// directory as it was given, when links lead from there (`AgentDestination.resolve`).
        package var directoryAliases: [String: String] = [:]
        /// Builds a download agent for the settings (paths come from the monitor).
        package var makeAgent: @Sendable (AgentSettings) throws -> DownloadAgent
        /// Receives every event line (`EventSchema`), already encoded.
        package var emit: @Sendable (_ line: String) -> Void
        /// Receives the status summary whenever it changes (sd_notify STATUS=).
        package var summaryChanged: @Sendable (String) -> Void
        /// Wall clock.
        package var now: @Sendable () -> Date = { Date() }
        /// At most one `progress` event per download per interval (bytes, total, rate) while it
        /// transfers, so the log shows movement without a line per callback.
        package var progressInterval: Duration = .seconds(5)
        /// UPower's facts for `status` (issue 32 item 3): asked at each request, a quarter of a
        /// second at most (a wedged UPower must not hold the status up).
        package var power: @Sendable () -> PowerFacts = { PowerFacts.read(timeout: .milliseconds(250)) }
        /// Follows UPower's changes (signals; polling where they cannot be subscribed), giving
        /// each to its argument; nil when no watch can be started.
        package var watchPower: @Sendable (@escaping @Sendable (PowerFacts) -> Void) -> PowerFactsWatch? = { try? PowerFactsWatch(onChange: $0) }
        /// The environment programs launched for background sessions inherit.
        package var launchEnvironment: [String: String] = ProcessInfo.processInfo.environment
        /// How long the partial file behind background resume data nobody used is kept.
        package var resumeDataLifetime: TimeInterval = 7 * 24 * 3600
        /// The agent's one bandwidth limit (`limit-rate=`, `agent limit`); nil: none can be set.
        package var rateLimit: AgentRateLimitControl?
        /// The jobs' `--on-complete` commands.
        package var onComplete = OnCompleteRunner()

        package init(stateDirectory: String, directoryAliases: [String: String] = [:], makeAgent: @escaping @Sendable (AgentSettings) throws -> DownloadAgent,
                     emit: @escaping @Sendable (_ line: String) -> Void, summaryChanged: @escaping @Sendable (String) -> Void,
                     now: @escaping @Sendable () -> Date = { Date() }, progressInterval: Duration = .seconds(5)) {
            self.stateDirectory = stateDirectory
            self.directoryAliases = directoryAliases
            self.makeAgent = makeAgent
            self.emit = emit
            self.summaryChanged = summaryChanged
            self.now = now
            self.progressInterval = progressInterval
        }
    }

    let environment: Environment
    /// What `status` and `list` are answered from without the actor (AgentService+Snapshot.swift);
    /// the properties it mirrors write it when they change.
    let mirror: ServiceSnapshot
    private(set) var settings: AgentSettings { didSet { mirror.update { [settings] in $0.settings = settings } } }
    private(set) var agent: DownloadAgent { didSet { mirror.update { [agent] in $0.agent = agent } } }
    /// Downloads a user paused; restored downloads in this set are paused again at start.
    private var userPaused: Set<UUID> = []
    /// Feeds UPower's facts to the download agent (AgentService+Power.swift).
    var powerWatch: (watch: PowerFactsWatch, relay: Task<Void, Never>)?
    /// `add`s with a client key, by `uid/key`: a repeated add is answered with the first job.
    private var addsByClientKey: [String: ClientKeyedAdd] = [:]
    /// Who asked for each download (the uid of an `add`, a background session's uid); restored
    /// downloads without one are the agent's own user's. `agent status` counts the asker's only.
    var downloadOwners: DownloadOwners { mirror.owners }
    /// A summary refresh is on its way (changes meanwhile are in it).
    private var isSummaryScheduled = false
    /// The fixed parts of each download's report.
    let reportCache = ReportCache()
    /// Downloads that ended under an earlier `DownloadAgent` of this process (after a reload).
    private var history: [AgentDownload] = [] { didSet { mirror.update { [history] in $0.history = history } } }
    private var path: NetworkPath? { didSet { mirror.update { [path] in $0.path = path } } }
    private var lastSummary: String?
    /// Events reported per download, so a new subscription after `resume` of a failed download
    /// (whose event stream had ended) skips the replay.
    var reportedEvents: [UUID: Int] = [:]
    let startedAt: Date
    /// Path status, changes and outage time for `metrics`.
    private var pathMetrics: PathMetrics
    /// Download counters for `metrics`; they outlive the `DownloadAgent`s a reload replaces.
    private let downloadMetrics: DownloadMetrics

    // Background sessions (issue 17; AgentService+Background.swift): the registry deciding, the
    // engine downloads carrying their transfers, the attached connections, their files, and the
    // one timer for dates, deadlines and launches.
    var background = BackgroundRegistry() { didSet { backgroundChanged() } }
    var backgroundDownloads: [UUID: Download] = [:]
    /// Background upload transfers (AgentService+BackgroundUploads).
    var backgroundUploads: [UUID: BackgroundUploadRun] = [:]
    /// Every engine download ever made for a background session: not `queue add` downloads,
    /// whatever their state (a finished one stays in the engine's list).
    var backgroundEngineIDs: Set<UUID> = [] { didSet { backgroundChanged() } }
    var backgroundPeers: [UInt64: ControlPeer] = [:]
    var backgroundStore: BackgroundStore?
    var backgroundRecords: CheckedDirectory?
    var backgroundWake: (at: Date, task: Task<Void, Never>)?
    /// Sessions whose writes a run of pipelined requests put off to its end (`RunCommit`), and
    /// the actions that wait for those writes.
    var backgroundDirty: Set<BackgroundSessionKey> = []
    var backgroundPutOff: [BackgroundRegistry.Action] = []
    var launcher: ProgramLauncher
    /// Upload jobs (`queue add --upload`; AgentService+UploadJobs.swift).
    let uploadJobs = UploadJobTable()
    /// Every `queue add` download's events, in order, for the one task that reports them.
    let eventFeed = DownloadEventFeed()

    package init(settings: AgentSettings, environment: Environment) throws {
        self.settings = settings
        self.environment = environment
        agent = try environment.makeAgent(settings)
        mirror = ServiceSnapshot(settings: settings, agent: agent)
        launcher = ProgramLauncher(environment: environment.launchEnvironment)
        startedAt = environment.now()
        pathMetrics = PathMetrics(startedAt: startedAt)
        downloadMetrics = DownloadMetrics(startedAt: startedAt)
    }

    /// Resumes every unfinished download found in the records directory; the ones a user had
    /// paused stay paused. Returns how many were restored.
    @discardableResult
    package func start() async -> Int {
        userPaused = Self.readPaused(environment.stateDirectory)
        evaluateRateLimit()
        let actions = openBackgroundSessions()
        let count = await restore()
        await applyBackground(actions)
        return count + restoreUploadJobs()
    }

    private func restore() async -> Int {
        // Background sessions' downloads are restored with their own options (headers, priority).
        let owned = background.ownedTransferIDs
        // Records are input: the destination rule of `queue add` holds for them too.
        let filesDirectory = AgentStateDirectory.filesDirectory(in: environment.stateDirectory)
        let allowed = settings.downloadDirectories
        let restored = await agent.restoreDownloads(where: { !owned.contains($0) }, allowingDestination: {
            AgentDestination.isAllowed($0.path, filesDirectory: filesDirectory, allowed: allowed)
        })
        // Before any event of theirs can arrive (the loop below may suspend).
        for download in restored { registerOnComplete(ofRestored: download) }
        startPowerWatch()
        for download in restored {
            observe(download)
            emitDownload(.restored, download, [.init(key: "offset", value: .integer(Int(download.progress.bytesReceived)))])
            if userPaused.contains(download.id) {
                // restoreDownloads() has already scheduled it; the pause lands once its driver stops.
                await agent.pause(download)
                await settle(download) { $0 == .paused || $0.isFinal }
            }
        }
        let restoredIDs = Set(restored.map(\.id))
        if !userPaused.isSubset(of: restoredIDs) {
            userPaused.formIntersection(restoredIDs)
            savePaused()
        }
        let background = await restoreBackgroundTransfers()
        refreshSummary()
        return restored.count + background
    }

    /// Applies new settings; a different concurrency limit, per-server connection bound, free-space
    /// rule or proxy replaces the download agent (its transfers are checkpointed and restored).
    package func reload(_ newSettings: AgentSettings) async {
        let old = settings
        settings = newSettings
        if let state = environment.rateLimit?.reload(newSettings.rateLimit) { reportLimit(state) }
        if newSettings.maximumConcurrentDownloads != old.maximumConcurrentDownloads
            || newSettings.maximumConnectionsPerHost != old.maximumConnectionsPerHost
            || newSettings.minimumFreeSpace != old.minimumFreeSpace || newSettings.proxy != old.proxy {
            let finished = await agent.downloads.filter { $0.state.isFinal }
            history += finished.filter { !backgroundEngineIDs.contains($0.id) }.map { Self.snapshot($0) }
            let uploads = await stopUploadJobs()
            await stopBackgroundUploads()
            await agent.shutdown()
            backgroundEngineReplaced()
            do {
                agent = try environment.makeAgent(newSettings)
            } catch {
                emitAgent("error", [.init(key: "message", value: .string("cannot restart the download agent: \(error)"))])
                return
            }
            _ = await restore()
            restartUploadJobs(uploads)
        }
        emitAgent("reloaded", [.init(key: "maxConcurrent", value: .integer(newSettings.maximumConcurrentDownloads)),
                                   .init(key: "maxConnectionsPerHost", value: .integer(newSettings.maximumConnectionsPerHost)),
                                   .init(key: "allowsExpensive", value: .bool(newSettings.allowsExpensive)),
                                   .init(key: "allowsRoaming", value: .bool(newSettings.allowsRoaming)),
                                   .init(key: "changed", value: .bool(newSettings != old))])
    }

    /// The latest path (a `waiting` event names the portal to log in to).
    package var currentPath: NetworkPath? { path }

    /// Records and reports a new path.
    package func pathChanged(_ newPath: NetworkPath) {
        path = newPath
        let time = environment.now()
        pathMetrics.record(newPath, at: time)
        environment.emit(EventSchema.pathLine(newPath, at: time))
        refreshSummary()
    }

    /// Every metric family: the path's, the downloads', then the background sessions'.
    package func metricFamilies() async -> [MetricFamily] {
        let downloads = await agent.downloads
        return pathMetrics.families(at: environment.now()) + downloadMetrics.families(counts: stateCounts(downloads, visibleTo: 0), at: environment.now())
            + [DownloadMetrics.waitReasonFamily(waitReasonCounts(downloads))]
            + backgroundMetricFamilies() + uploadMetricFamilies()
    }

    /// The metrics as text.
    package func metricsText(_ format: MetricsFormat) async -> String {
        MetricsText.render(await metricFamilies(), format: format)
    }

    /// Checkpoints every transfer and stops the download agent.
    package func shutdown() async {
        backgroundWake?.task.cancel()
        stopPowerWatch()
        await flushBackgroundSessions()
        await stopUploadJobs()
        await stopBackgroundUploads()
        await agent.shutdown()
    }

    deinit { eventFeed.finish() }

    /// Answers the watchdog: the actor is not stuck.
    package func ping() -> Bool { true }

    // MARK: control commands

    /// Runs one control command from a caller without a connection (tests): as the agent's own user.
    package func handle(_ command: ControlCommand, id: ControlRequestID?) async -> ControlResponse {
        await handle(command, id: id, peer: nil) ?? .failure(.failed("no reply"), id: id)
    }

    /// Runs one control command from `peer` (nil: the agent's own user, without a connection);
    /// nil when the reply was sent already (an attach).
    package func handle(_ command: ControlCommand, id: ControlRequestID?, peer: ControlPeer?) async -> ControlResponse? {
        let uid = peer?.credentials.uid ?? CurrentProcess.effectiveUserID
        switch command {
        case .attach, .createTask, .updateTask, .taskAction, .acknowledge, .invalidate:
            return await handleBackground(command, id: id, peer: peer)
        case .addUpload(let url, let request):
            return addUpload(url, request, id: id, peer: peer, uid: uid)
        case .add(let url, let output, let sha256, let replace, let clientKey, let job):
            guard let clientKey else {
                return await add(url, output: output, sha256: sha256, replace: replace, job: job, id: id, uid: uid)
            }
            return await add(clientKey: "\(uid)/\(clientKey)", id: id) {
                await self.add(url, output: output, sha256: sha256, replace: replace, job: job, id: id, uid: uid)
            }
        case .list(let rows):
            let earlier = history, background = backgroundRows(visibleTo: uid)
            guard let rows else {
                let live = await Self.reports(of: agent.downloadsNow, excluding: backgroundEngineIDs, cache: reportCache, path: path)
                return .success(id: id, downloads: earlier + live + background + uploadRows(visibleTo: uid))
            }
            // A page's candidates from the census's order without the background sessions'
            // downloads (their rows are the sessions' own): O(rows), not O(jobs) (issue 29).
            let censusPage = agent.census.page(rows: rows, excluding: backgroundEngineIDs)
            let live = await Self.reports(of: censusPage.rows, excluding: [], cache: reportCache, path: path)
            let uploads = uploadRows(visibleTo: uid)
            let page = ListPage(earlier + live + background + uploads, rows: rows) {
                [.completed, .failed].contains($0.state)
            }
            var response = ControlResponse.success(id: id, downloads: page.rows)
            response.omittedDownloads = earlier.count + censusPage.listed + background.count + uploads.count - page.rows.count
            return response
        case .status:
            var status = status(visibleTo: uid)
            status.backgroundSessions = backgroundStatuses(visibleTo: uid)
            return .success(id: id, status: status)
        case .limit(let bytesPerSecond):
            if let refusal = setLimit(bytesPerSecond, id: id) { return refusal }
            return await handle(.status, id: id, peer: peer)
        case .metrics(let format):
            return .success(id: id, metrics: await metricsText(format))
        case .setURL(let text, let url):
            return await setURL(text, to: url, id: id, uid: uid)
        case .pause(let text), .resume(let text), .cancel(let text):
            let downloads = await agent.downloads.filter { !backgroundEngineIDs.contains($0.id) }
            let backgroundIDs = backgroundTransferIDs(visibleTo: uid)
            switch DownloadIDResolver.resolve(text, among: downloads.map(\.id) + backgroundIDs + uploadJobIDs(visibleTo: uid)) {
            case .failure(let error):
                if history.contains(where: { $0.id.lowercased().hasPrefix(text.lowercased()) }) {
                    return .failure(.invalidArgument("download '\(text)' has already finished"), id: id)
                }
                return .failure(error, id: id)
            case .success(let uuid):
                if let response = await controlUploadJob(command, uuid, id: id) { return response }
                guard let download = downloads.first(where: { $0.id == uuid }) else {
                    return await controlBackground(command, transfer: uuid, id: id, uid: uid)
                }
                return await control(command, download, id: id)
            }
        }
    }

    /// An `add` with a client key: a retry (after a reset) is answered with the job the first
    /// one made instead of making a second one.
    private func add(clientKey key: String, id: ControlRequestID?,
                     _ add: () async -> ControlResponse) async -> ControlResponse {
        // Reserved before the first await: a retry arriving while the first add is still
        // being carried out waits for it instead of racing it.
        while case .pending? = addsByClientKey[key] { try? await Task.sleep(for: .milliseconds(5)) }
        if case .added(let downloadID)? = addsByClientKey[key] {
            if let download = await agent.downloads.first(where: { $0.id == downloadID }) {
                return .success(id: id, download: Self.snapshot(download))
            }
            if let earlier = history.last(where: { $0.id == downloadID.uuidString.lowercased() }) {
                return .success(id: id, download: earlier)
            }
        }
        addsByClientKey[key] = .pending
        let response = await add()
        addsByClientKey[key] = response.download.flatMap { UUID(uuidString: $0.id) }.map { .added($0) }
        return response
    }

    /// Queues one download for `add`.
    private func add(_ url: URL, output: String?, sha256: String?, replace: Bool, job: QueueJobOptions,
                     id: ControlRequestID?, uid: UInt32) async -> ControlResponse {
        let destination: String
        switch AgentDestination.resolve(output: output, url: url,
                                        filesDirectory: AgentStateDirectory.filesDirectory(in: environment.stateDirectory),
                                        allowed: settings.downloadDirectories, aliases: environment.directoryAliases) {
        case .success(let path): destination = path
        case .failure(let error): return .failure(error, id: id)
        }
        if let refusal = refuseOnComplete(job, uid: uid, id: id) { return refusal }
        if !replace, (try? FileSystem.status(ofPath: destination, followingLinks: false)) ?? nil != nil {
            return .failure(.invalidArgument("\(destination) already exists; give --replace to replace it"), id: id)
        }
        do {
            var options = DownloadOptions(expectedSHA256: sha256, allowsExpensive: settings.allowsExpensive,
                                          replacesExistingFile: replace, allowsRoaming: settings.allowsRoaming,
                                          allowsConstrained: job.allowsConstrained, maximumConnections: job.connections,
                                          priority: job.priority.value)
                .limitingTime(job, now: environment.now())
            options.waitsForACPower = job.waitsForACPower
            options.opensAllConnections = job.connections != nil
            options.completionCommand = job.onComplete.map { CompletionCommand(arguments: $0, owner: uid) }
            options.mirrors = job.mirrors
            options.pieceHashes = job.pieceHashes
            options.proxy = job.proxy
            if job.waitsForACPower { await refreshPower() }
            let download = try await agent.download(from: url, to: URL(fileURLWithPath: destination), options: options)
            downloadOwners[download.id] = uid
            if let argv = job.onComplete { environment.onComplete.register(argv, for: download.id) }
            observe(download)
            emitDownload(.queued, download)
            refreshSummary()
            return .success(id: id, download: Self.snapshot(download))
        } catch {
            return .failure(.failed("\(error)"), id: id)
        }
    }

    private func control(_ command: ControlCommand, _ download: Download, id: ControlRequestID?) async -> ControlResponse {
        switch command {
        case .pause:
            if download.state.isFinal {
                return .failure(.invalidArgument("download \(Self.shortID(download.id)) has already finished"), id: id)
            }
            userPaused.insert(download.id)
            savePaused()
            await agent.pause(download)
            await settle(download) { $0 == .paused || $0.isFinal }
        case .resume:
            userPaused.remove(download.id)
            savePaused()
            let wasFinal = download.state.isFinal
            await agent.resume(download)
            if wasFinal, !download.state.isFinal { observe(download, skipping: reportedEvents[download.id] ?? 0) }
            await settle(download) { $0 != .paused }
        case .cancel:
            // Nothing is left to delete once the file is in place (docs/agent.md: an error);
            // a failed download's kept resume data can still be cancelled away.
            if download.state == .completed {
                return .failure(.invalidArgument("download \(Self.shortID(download.id)) has already completed; there is nothing to cancel"), id: id)
            }
            userPaused.remove(download.id)
            savePaused()
            await agent.cancel(download)
            await settle(download) { $0.isFinal }
        default:
            break
        }
        refreshSummary()
        return .success(id: id, download: Self.snapshot(download))
    }

    /// Waits (bounded, 2 s) until the download reaches the state a command asked for, so the
    /// reply shows `paused` rather than the `running` it had while the transfer was stopping.
    func settle(_ download: Download, until predicate: @Sendable (DownloadState) -> Bool) async {
        let deadline = ContinuousClock.now + .seconds(2)
        while !predicate(download.state), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Whether `uid` sees download `id` in its status: its own (root sees every one).
    private func isVisible(_ id: UUID, to uid: UInt32) -> Bool { downloadOwners.isVisible(id, to: uid) }

    /// Downloads per state name, the ones finished under an earlier `DownloadAgent` included.
    private func stateCounts(_ downloads: [Download], visibleTo uid: UInt32) -> [String: Int] {
        var counts: [String: Int] = [:]
        for download in downloads { counts[Self.stateName(download.state), default: 0] += 1 }
        for entry in history where UUID(uuidString: entry.id).map({ isVisible($0, to: uid) }) ?? (uid == 0) {
            counts[entry.state.rawValue, default: 0] += 1
        }
        return counts
    }

    /// The agent's status as `uid` sees it: counts and summary of its own downloads; the total
    /// of every user's only for root.
    private func status(visibleTo uid: UInt32) -> AgentStatus {
        // Not through the download agent's actor: it may be busy with adds and completions.
        status(mirror.current, visibleTo: uid)
    }

    // MARK: events

    /// Reports the download's events in order. `events` replays what happened before the
    /// subscription (restoreDownloads() starts transfers before it returns, so a closure set
    /// afterwards could miss the first `resumed`); `skipping` drops a replay already reported.
    nonisolated func observe(_ download: Download, skipping: Int = 0, isBackground: Bool = false) {
        let interval = environment.progressInterval
        let emit = environment.emit
        let now = environment.now
        let metrics = downloadMetrics
        metrics.follow(download.id, offset: download.progress.bytesReceived)
        if isBackground {
            // Detached: a task inherits its creator's task-local values, and an add's task carries
            // `DurableWrites.collecting`, which these would keep alive as long as the download.
            Task.detached { [weak self] in
                let lines = ProgressLines(interval: interval, emit: emit, now: now, metrics: metrics)
                for await progress in download.progressUpdates {
                    lines.report(progress, of: download)
                    await self?.backgroundProgressed(download, progress)
                }
            }
        } else {
            // A `queue add` download's progress needs no await: its callback writes the lines, and
            // no task waits per queued download (at 10,000 jobs those tasks were a third of the
            // agent's memory, docs/benchmarks.md).
            let lines = ProgressLines(interval: interval, emit: emit, now: now, metrics: metrics)
            // Weak: the download holds its callback.
            download.onProgress = { [weak download] progress in
                if let download { lines.report(progress, of: download) }
            }
        }
        guard isBackground else {
            // One stream for every `queue add` download's events and one task reading it: a task
            // waiting per queued download was most of the agent's memory at 10,000 jobs.
            let feed = eventFeed
            if feed.claimReader() {
                Task.detached { [weak self] in
                    for await item in feed.events {
                        guard let self else { return }
                        await self.report(item.event, of: item.download, emit: emit, now: now, metrics: metrics)
                    }
                }
            }
            // Weak: the download holds its follower. Kept past a final state, so a resumed
            // download (`skipping`) is followed already.
            download.follow { [weak download] event in
                if let download { feed.yield(download, event) }
            }
            return
        }
        Task.detached { [weak self] in
            var index = 0
            for await event in download.events {
                index += 1
                guard index > skipping, let self else { continue }
                await self.report(event, of: download, emit: emit, now: now, metrics: metrics)
            }
        }
    }

    /// One event of a download: its metrics, its line, then what the service does about it.
    private nonisolated func report(_ event: DownloadEvent, of download: Download, emit: @Sendable (String) -> Void,
                                    now: @Sendable () -> Date, metrics: DownloadMetrics) async {
        metrics.record(event, for: download.id, at: now())
        let path = event == .waitingForConnectivity ? await currentPath : nil
        emit(EventSchema.downloadLine(event, EventSchema.DownloadFacts(download), at: now(), path: path))
        await downloadEventArrived(download, event)
    }

    private func downloadEventArrived(_ download: Download, _ event: DownloadEvent) async {
        reportedEvents[download.id, default: 0] += 1
        if backgroundDownloads[download.id] === download { await backgroundTransferEvent(download, event) }
        switch event {
        case .completed, .failed:
            if userPaused.remove(download.id) != nil { savePaused() }
            await runOnComplete(download, event)
        default: break
        }
        // The event is emitted before the state is updated; look again once it has settled.
        await Task.yield()
        refreshSummary()
    }

    func refreshSummary() {
        // One pass over every download per 100 ms of changes, not one per change: with 10,000
        // downloads queued, a pass per add was most of an add's cost.
        guard !isSummaryScheduled else { return }
        isSummaryScheduled = true
        Task {
            try? await Task.sleep(for: .milliseconds(100))
            await self.publishSummary()
        }
    }

    private func publishSummary() async {
        isSummaryScheduled = false
        // From the census: reading 10,000 downloads' states here (every 100 ms while adds
        // arrive) took a lock and a side-table retain per download (issue 29).
        let counts = agent.census.current
        let summary = Self.summary(running: counts.count(.running), waiting: counts.count(.waitingForConnectivity),
                                   queued: counts.count(.queued), paused: counts.count(.paused))
        guard summary != lastSummary else { return }
        lastSummary = summary
        environment.summaryChanged(summary)
    }

    // MARK: persistence of user pauses

    /// Read and written relative to the checked state directory (no links, a file of ours).
    private static func readPaused(_ directory: String) -> Set<UUID> {
        guard let checked = try? CheckedDirectory.open(directory, policy: .privateState),
              let bytes = try? checked.readOwnedFile("agent-state.json", limit: 1 << 20),
              let stored = try? JSONDecoder().decode(PausedList.self, from: Data(bytes)) else { return [] }
        return Set(stored.paused.compactMap(UUID.init(uuidString:)))
    }

    private func savePaused() {
        let bytes = ControlCodec.encode(PausedList(paused: userPaused.map(\.uuidString).sorted()))
        guard let checked = try? CheckedDirectory.open(environment.stateDirectory, policy: .privateState) else { return }
        try? checked.writeAtomically(bytes, to: "agent-state.json", mode: 0o600)
    }

    private struct PausedList: Codable { var paused: [String] }

    // MARK: pure helpers

    /// `3 downloading, 1 waiting for network`, or `idle`.
    package static func summary(_ states: [DownloadState]) -> String {
        var running = 0, waiting = 0, queued = 0, paused = 0
        for state in states {
            switch state {
            case .running: running += 1
            case .waitingForConnectivity: waiting += 1
            case .queued: queued += 1
            case .paused: paused += 1
            case .completed, .failed: break
            }
        }
        return summary(running: running, waiting: waiting, queued: queued, paused: paused)
    }

    /// `summary(_:)` of downloads already counted.
    static func summary(running: Int, waiting: Int, queued: Int, paused: Int) -> String {
        let parts = [(running, "downloading"), (waiting, "waiting for network"), (queued, "queued"), (paused, "paused")]
            .filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
        return parts.isEmpty ? "idle" : parts.joined(separator: ", ")
    }

    package static func shortID(_ id: UUID) -> String { String(id.uuidString.lowercased().prefix(8)) }

    package static func stateName(_ state: DownloadState) -> String { reportedState(state).rawValue }

    package static func reportedState(_ state: DownloadState) -> AgentDownload.State { reportedState(DownloadCensus.Kind(state)) }

    /// The state a download of `kind` is reported in.
    static func reportedState(_ kind: DownloadCensus.Kind) -> AgentDownload.State {
        switch kind {
        case .queued: .queued
        case .running: .running
        case .waitingForConnectivity: .waitingForConnectivity
        case .paused: .paused
        case .completed: .completed
        case .failed: .failed
        }
    }

    /// The reports of `downloads` but `excluded`, made off the actor (nonisolated and async: a
    /// list of 10,000 took the actor for hundreds of milliseconds, and every add and status
    /// waited), their fixed parts taken from `cache`.
    nonisolated static func reports(of downloads: [Download], excluding excluded: Set<UUID>,
                                    cache: ReportCache, path: NetworkPath? = nil) async -> [AgentDownload] {
        downloads.compactMap { excluded.contains($0.id) ? nil : cache.report($0, path: path) }
    }

    package static func snapshot(_ download: Download, path: NetworkPath? = nil) -> AgentDownload {
        let progress = download.progress
        var error: String?
        if case .failed(let failure) = download.state { error = failure.description }
        var report = AgentDownload(id: download.id.uuidString.lowercased(), url: URLRedaction.redacted(download.url),
                             destination: download.destination.path, state: reportedState(download.state),
                                bytesReceived: progress.bytesReceived, totalBytes: progress.totalBytes,
                                bytesPerSecond: Int64(progress.bytesPerSecond), error: error,
                             priority: DownloadPriority(value: download.options.priority).rawValue,
                             connections: download.options.maximumConnections,
                             allowsConstrained: download.options.allowsConstrained ? nil : false)
        addWaitReason(to: &report, of: download, path: path)
        return report
    }

    func emitDownload(_ name: EventSchema.DownloadEventName, _ download: Download,
                              _ fields: [JSONValue.Member] = []) {
        environment.emit(EventSchema.downloadLine(name, EventSchema.DownloadFacts(download), at: environment.now(), fields))
    }

    func emitAgent(_ event: String, _ fields: [JSONValue.Member]) {
        environment.emit(EventSchema.line(.agent, event, at: environment.now(), fields))
    }
}

/// The events of every download the service follows (not background sessions'), in the order
/// they happened, read by one task (`AgentService.observe`).
final class DownloadEventFeed: Sendable {
    struct Item: Sendable {
        var download: Download
        var event: DownloadEvent
    }

    let events: AsyncStream<Item>
    private let continuation: AsyncStream<Item>.Continuation
    private let hasReader = Mutex(false)

    init() { (events, continuation) = AsyncStream.makeStream(of: Item.self) }

    /// Ends the stream (the service is gone): the reader's loop ends.
    func finish() { continuation.finish() }

    func yield(_ download: Download, _ event: DownloadEvent) { continuation.yield(Item(download: download, event: event)) }

    /// True the first time only: that caller starts the one reader.
    func claimReader() -> Bool {
        hasReader.withLock { hasReader in
            defer { hasReader = true }
            return !hasReader
        }
    }
}

/// The `connections` and `progress` lines of one download and its metrics, from its progress
/// updates (on the engine's thread or the agent's: the lock keeps one download's lines in order).
final class ProgressLines: Sendable {
    private struct State {
        var last = ContinuousClock.now
        var connections = DownloadConnections()
    }

    private let interval: Duration
    private let emit: @Sendable (String) -> Void
    private let now: @Sendable () -> Date
    private let metrics: DownloadMetrics
    private let state = Mutex(State())

    init(interval: Duration, emit: @escaping @Sendable (String) -> Void, now: @escaping @Sendable () -> Date,
         metrics: DownloadMetrics) {
        (self.interval, self.emit, self.now, self.metrics) = (interval, emit, now, metrics)
    }

    func report(_ progress: DownloadProgress, of download: Download) {
        metrics.progressed(download.id, to: progress.bytesReceived)
        metrics.connections(download.id, progress.connections)
        state.withLock { state in
            if progress.connections != state.connections {
                // Each change of connections or paths is a line (a ramp is a few, a path change one).
                state.connections = progress.connections
                if state.connections.count > 0, download.state == .running {
                    var facts = EventSchema.DownloadFacts(download)
                    (facts.bytes, facts.total) = (progress.bytesReceived, progress.totalBytes)
                    emit(EventSchema.downloadLine(.connections, facts, at: now(), EventSchema.connectionFields(state.connections)))
                }
            }
            guard ContinuousClock.now - state.last >= interval, download.state == .running else { return }
            state.last = ContinuousClock.now
            var facts = EventSchema.DownloadFacts(download)
            (facts.bytes, facts.total) = (progress.bytesReceived, progress.totalBytes)
            emit(EventSchema.downloadLine(.progress, facts, at: now(), EventSchema.progressFields(progress)))
        }
    }
}

/// Where an `add` with a client key stands.
enum ClientKeyedAdd: Sendable, Equatable {
    /// Being carried out: a repeat waits for it.
    case pending
    /// Queued as this download.
    case added(UUID)
}

/// The parts of a download's report that never change (its id, redacted URL and destination
/// path), made once: for a list of 10,000 they were most of the work, made again per request.
final class ReportCache: Sendable {
    private struct Fixed: Sendable {
        var id: String
        var url: String
        var destination: String
    }

    private let fixed = Mutex<[UUID: Fixed]>([:])

    /// The download's URL changed (`queue set-url`): its parts are made again.
    func forget(_ id: UUID) { fixed.withLock { $0[id] = nil } }

    /// `AgentService.snapshot(download)`, its fixed parts from the cache.
    func report(_ download: Download, path: NetworkPath? = nil) -> AgentDownload {
        let parts = fixed.withLock { cache in
            if let parts = cache[download.id] { return parts }
            let parts = Fixed(id: download.id.uuidString.lowercased(), url: URLRedaction.redacted(download.url),
                              destination: download.destination.path)
            cache[download.id] = parts
            return parts
        }
        let progress = download.progress
        var error: String?
        if case .failed(let failure) = download.state { error = failure.description }
        var report = AgentDownload(id: parts.id, url: parts.url, destination: parts.destination,
                             state: AgentService.reportedState(download.state), bytesReceived: progress.bytesReceived,
                             totalBytes: progress.totalBytes, bytesPerSecond: Int64(progress.bytesPerSecond), error: error,
                             priority: DownloadPriority(value: download.options.priority).rawValue,
                             connections: download.options.maximumConnections,
                             allowsConstrained: download.options.allowsConstrained ? nil : false)
        AgentService.addWaitReason(to: &report, of: download, path: path)
        return report
    }
}
