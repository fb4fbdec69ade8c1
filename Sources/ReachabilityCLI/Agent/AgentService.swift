import FoundationEssentials
import Glibc
import LinuxSystem
import LinuxReachability
import ResumableDownloads

/// What the agent does with downloads, separate from sockets, signals and files: handles
/// control commands, keeps user pauses across restarts, reports events and the status summary.
///
/// The `DownloadAgent` it drives is replaced when a reload changes the concurrency limit
/// (`DownloadAgent.Configuration` is fixed at creation): the old one is shut down, which
/// checkpoints every transfer, and the new one restores them from their records.
actor AgentService {
    /// The outside world the service reports to and builds agents with.
    struct Environment: Sendable {
        /// The state directory (for default destinations and the paused list).
        var stateDirectory: String
        /// Builds a download agent for the settings (paths come from the monitor).
        var makeAgent: @Sendable (AgentSettings) throws -> DownloadAgent
        /// Receives every event line (`EventSchema`), already encoded.
        var emit: @Sendable (_ line: String) -> Void
        /// Receives the status summary whenever it changes (sd_notify STATUS=).
        var summaryChanged: @Sendable (String) -> Void
        /// Wall clock.
        var now: @Sendable () -> Date = { Date() }
        /// At most one `progress` event per download per interval (bytes, total, rate) while it
        /// transfers, so the log shows movement without a line per callback.
        var progressInterval: Duration = .seconds(5)
    }

    private let environment: Environment
    private var settings: AgentSettings
    private var agent: DownloadAgent
    /// Downloads a user paused; restored downloads in this set are paused again at start.
    private var userPaused: Set<UUID> = []
    /// Downloads that ended under an earlier `DownloadAgent` of this process (after a reload).
    private var history: [DownloadSnapshot] = []
    private var path: NetworkPath?
    private var lastSummary: String?
    /// Events reported per download, so a new subscription after `resume` of a failed download
    /// (whose event stream had ended) skips the replay.
    private var reportedEvents: [UUID: Int] = [:]
    private let startedAt: Date
    /// Path status, changes and outage time for `metrics`.
    private var pathMetrics: PathMetrics
    /// Download counters for `metrics`; they outlive the `DownloadAgent`s a reload replaces.
    private let downloadMetrics: DownloadMetrics

    init(settings: AgentSettings, environment: Environment) throws {
        self.settings = settings
        self.environment = environment
        agent = try environment.makeAgent(settings)
        startedAt = environment.now()
        pathMetrics = PathMetrics(startedAt: startedAt)
        downloadMetrics = DownloadMetrics(startedAt: startedAt)
    }

    /// Resumes every unfinished download found in the records directory; the ones a user had
    /// paused stay paused. Returns how many were restored.
    @discardableResult
    func start() async -> Int {
        userPaused = Self.readPaused(environment.stateDirectory)
        return await restore()
    }

    private func restore() async -> Int {
        // Records are input: the destination rule of `queue add` holds for them too.
        let filesDirectory = AgentStateDirectory.filesDirectory(in: environment.stateDirectory)
        let allowed = settings.downloadDirectories
        let restored = await agent.restoreDownloads(allowingDestination: {
            AgentDestination.isAllowed($0.path, filesDirectory: filesDirectory, allowed: allowed)
        })
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
        refreshSummary()
        return restored.count
    }

    /// Applies new settings; a different concurrency limit replaces the download agent.
    func reload(_ newSettings: AgentSettings) async {
        let old = settings
        settings = newSettings
        if newSettings.maximumConcurrentDownloads != old.maximumConcurrentDownloads {
            let finished = await agent.downloads.filter { $0.state.isFinal }
            history += finished.map(Self.snapshot)
            await agent.shutdown()
            do {
                agent = try environment.makeAgent(newSettings)
            } catch {
                emitAgent("error", [.init(key: "message", value: .string("cannot restart the download agent: \(error)"))])
                return
            }
            _ = await restore()
        }
        emitAgent("reloaded", [.init(key: "maxConcurrent", value: .integer(newSettings.maximumConcurrentDownloads)),
                                   .init(key: "allowsExpensive", value: .bool(newSettings.allowsExpensive)),
                                   .init(key: "changed", value: .bool(newSettings != old))])
    }

    /// The latest path (a `waiting` event names the portal to log in to).
    var currentPath: NetworkPath? { path }

    /// Records and reports a new path.
    func pathChanged(_ newPath: NetworkPath) {
        path = newPath
        let time = environment.now()
        pathMetrics.record(newPath, at: time)
        environment.emit(EventSchema.pathLine(newPath, at: time))
        refreshSummary()
    }

    /// Every metric family: the path's, then the downloads'.
    func metricFamilies() async -> [MetricFamily] {
        pathMetrics.families(at: environment.now()) + downloadMetrics.families(counts: await stateCounts(), at: environment.now())
    }

    /// The metrics as text.
    func metricsText(_ format: MetricsFormat) async -> String {
        MetricsText.render(await metricFamilies(), format: format)
    }

    /// Checkpoints every transfer and stops the download agent.
    func shutdown() async {
        await agent.shutdown()
    }

    /// Answers the watchdog: the actor is not stuck.
    func ping() -> Bool { true }

    // MARK: control commands

    /// Runs one control command.
    func handle(_ command: ControlCommand, id: ControlRequestID?) async -> ControlResponse {
        switch command {
        case .add(let url, let output, let sha256, let replace):
            let destination: String
            switch AgentDestination.resolve(output: output, url: url,
                                            filesDirectory: AgentStateDirectory.filesDirectory(in: environment.stateDirectory),
                                            allowed: settings.downloadDirectories) {
            case .success(let path): destination = path
            case .failure(let error): return .failure(error, id: id)
            }
            var existing = stat()
            if !replace, lstat(destination, &existing) == 0 {
                return .failure(.invalidArgument("\(destination) already exists; give --replace to replace it"), id: id)
            }
            do {
                let download = try await agent.download(from: url, to: URL(fileURLWithPath: destination),
                                                        options: DownloadOptions(expectedSHA256: sha256,
                                                                                 allowsExpensive: settings.allowsExpensive,
                                                                                 replacesExistingFile: replace))
                observe(download)
                emitDownload(.queued, download)
                refreshSummary()
                return .success(id: id, download: Self.snapshot(download))
            } catch {
                return .failure(.failed("\(error)"), id: id)
            }
        case .list:
            let live = await agent.downloads.map(Self.snapshot)
            return .success(id: id, downloads: history + live)
        case .status:
            return .success(id: id, status: await status())
        case .metrics(let format):
            return .success(id: id, metrics: await metricsText(format))
        case .pause(let text), .resume(let text), .cancel(let text):
            let downloads = await agent.downloads
            switch DownloadIDResolver.resolve(text, among: downloads.map(\.id)) {
            case .failure(let error):
                if history.contains(where: { $0.id.lowercased().hasPrefix(text.lowercased()) }) {
                    return .failure(.invalidArgument("download '\(text)' has already finished"), id: id)
                }
                return .failure(error, id: id)
            case .success(let uuid):
                let download = downloads.first { $0.id == uuid }!
                return await control(command, download, id: id)
            }
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
    private func settle(_ download: Download, until predicate: @Sendable (DownloadState) -> Bool) async {
        let deadline = ContinuousClock.now + .seconds(2)
        while !predicate(download.state), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Downloads per state name, the ones finished under an earlier `DownloadAgent` included.
    private func stateCounts() async -> [String: Int] {
        var counts: [String: Int] = [:]
        for download in await agent.downloads { counts[Self.stateName(download.state), default: 0] += 1 }
        for entry in history { counts[entry.state, default: 0] += 1 }
        return counts
    }

    private func status() async -> AgentStatusSnapshot {
        let downloads = await agent.downloads
        let counts = await stateCounts()
        return AgentStatusSnapshot(
            pid: getpid(), stateDirectory: environment.stateDirectory,
            startedAt: PathText.timestamp(startedAt),
            maximumConcurrentDownloads: settings.maximumConcurrentDownloads, allowsExpensive: settings.allowsExpensive,
            pathStatus: path?.status.rawValue, connection: path?.connection.rawValue,
            interface: path?.isSatisfied == true ? path?.primaryInterface?.name : nil, isExpensive: path?.isExpensive,
            counts: counts, summary: Self.summary(downloads.map(\.state)))
    }

    // MARK: events

    /// Reports the download's events in order. `events` replays what happened before the
    /// subscription (restoreDownloads() starts transfers before it returns, so a closure set
    /// afterwards could miss the first `resumed`); `skipping` drops a replay already reported.
    private nonisolated func observe(_ download: Download, skipping: Int = 0) {
        let interval = environment.progressInterval
        let emit = environment.emit
        let now = environment.now
        let metrics = downloadMetrics
        metrics.follow(download.id, offset: download.progress.bytesReceived)
        Task {
            var last = ContinuousClock.now
            var connections = DownloadConnections()
            for await progress in download.progressUpdates {
                metrics.progressed(download.id, to: progress.bytesReceived)
                metrics.connections(download.id, progress.connections)
                if progress.connections != connections {
                    // Each change of connections or paths is a line (a ramp is a few, a path change one).
                    connections = progress.connections
                    if connections.count > 0, download.state == .running {
                        var facts = EventSchema.DownloadFacts(download)
                        (facts.bytes, facts.total) = (progress.bytesReceived, progress.totalBytes)
                        emit(EventSchema.downloadLine(.connections, facts, at: now(), EventSchema.connectionFields(connections)))
                    }
                }
                guard ContinuousClock.now - last >= interval, download.state == .running else { continue }
                last = ContinuousClock.now
                var facts = EventSchema.DownloadFacts(download)
                (facts.bytes, facts.total) = (progress.bytesReceived, progress.totalBytes)
                emit(EventSchema.downloadLine(.progress, facts, at: now(), EventSchema.progressFields(progress)))
            }
        }
        Task { [weak self] in
            var index = 0
            for await event in download.events {
                index += 1
                guard index > skipping, let self else { continue }
                metrics.record(event, for: download.id, at: now())
                let path = event == .waitingForConnectivity ? await self.currentPath : nil
                emit(EventSchema.downloadLine(event, EventSchema.DownloadFacts(download), at: now(), path: path))
                await self.downloadEventArrived(download, event)
            }
        }
    }

    private func downloadEventArrived(_ download: Download, _ event: DownloadEvent) async {
        reportedEvents[download.id, default: 0] += 1
        switch event {
        case .completed, .failed:
            if userPaused.remove(download.id) != nil { savePaused() }
        default: break
        }
        // The event is emitted before the state is updated; look again once it has settled.
        await Task.yield()
        refreshSummary()
    }

    private func refreshSummary() {
        Task { await self.publishSummary() }
    }

    private func publishSummary() async {
        let summary = Self.summary(await agent.downloads.map(\.state))
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
    static func summary(_ states: [DownloadState]) -> String {
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
        let parts = [(running, "downloading"), (waiting, "waiting for network"), (queued, "queued"), (paused, "paused")]
            .filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
        return parts.isEmpty ? "idle" : parts.joined(separator: ", ")
    }

    static func shortID(_ id: UUID) -> String { String(id.uuidString.lowercased().prefix(8)) }

    static func stateName(_ state: DownloadState) -> String {
        switch state {
        case .queued: "queued"
        case .running: "running"
        case .waitingForConnectivity: "waitingForConnectivity"
        case .paused: "paused"
        case .completed: "completed"
        case .failed: "failed"
        }
    }

    static func snapshot(_ download: Download) -> DownloadSnapshot {
        let progress = download.progress
        var error: String?
        if case .failed(let failure) = download.state { error = failure.description }
        return DownloadSnapshot(id: download.id.uuidString.lowercased(), url: URLRedaction.redacted(download.url),
                                destination: download.destination.path, state: stateName(download.state),
                                bytesReceived: progress.bytesReceived, totalBytes: progress.totalBytes,
                                bytesPerSecond: Int64(progress.bytesPerSecond), error: error)
    }

    private func emitDownload(_ name: EventSchema.DownloadEventName, _ download: Download,
                              _ fields: [JSONValue.Member] = []) {
        environment.emit(EventSchema.downloadLine(name, EventSchema.DownloadFacts(download), at: environment.now(), fields))
    }

    private func emitAgent(_ event: String, _ fields: [JSONValue.Member]) {
        environment.emit(EventSchema.line(.agent, event, at: environment.now(), fields))
    }
}
