import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem

/// Downloads files over HTTP(S) with resume data, driven by the network path.
///
/// Transfers run on libcurl's multi interface from one engine thread; bytes go from the socket
/// to `NAME.part` next to the destination through a bounded buffer, and a versioned JSON resume
/// record in `stateDirectory` says how much of it is durable. When the path changes (satisfied
/// to unsatisfied, another primary interface or source address) running transfers are aborted,
/// checkpointed and restarted on the new path at once; while there is no path they wait
/// without spending their retry budget.
///
/// Path updates come from any `AsyncSequence` of `NetworkPath` (a `PathMonitor`'s `paths`, or a
/// scripted stream in tests). Without one, the agent assumes it is connected.
public actor DownloadAgent {
    /// Limits, timeouts and places.
    public struct Configuration: Sendable {
        /// Where resume records live; created (0700) if missing. It must belong to the effective
        /// user (or root) and be writable by nobody else, as must its parents unless sticky;
        /// otherwise downloads fail with `DownloadError.untrustedFile`.
        public var stateDirectory: URL
        /// How many downloads transfer at once; the rest are `queued`.
        public var maximumConcurrentDownloads: Int
        /// How long a download waits for a usable path before failing with `connectivityTimeout`;
        /// nil waits forever.
        public var maximumOutageWait: Duration?
        /// A connected transfer slower than `stallBytesPerSecond` for this long is reconnected.
        public var stallTimeout: Duration
        /// See `stallTimeout`.
        public var stallBytesPerSecond: Int
        /// Limit for DNS + TCP + TLS setup.
        public var connectTimeout: Duration
        /// First backoff step after repeated failures.
        public var initialBackoff: Duration
        /// Largest backoff step.
        public var maximumBackoff: Duration
        /// Cap for a server's `Retry-After`.
        public var maximumRetryAfter: Duration
        /// Consecutive failed attempts without progress before a download fails.
        public var maximumConsecutiveFailures: Int
        /// Spacing between downloads restarting together when a path comes back.
        public var restartStagger: Duration
        /// Bytes between periodic checkpoints (fsync + record).
        public var checkpointInterval: Int64
        /// Unwritten bytes per download before its transfer is paused (memory bound).
        public var writeBufferLimit: Int
        /// Redirects followed (http and https only).
        public var maximumRedirects: Int
        /// TCP keepalive idle time.
        public var keepAliveIdle: Duration
        /// Sent as User-Agent.
        public var userAgent: String
        /// A PEM bundle of trusted certificate authorities that replaces the system bundle (for
        /// private servers and tests); nil uses the system's.
        public var certificateAuthorityFile: URL?
        /// Where diagnostics go; silent by default.
        public var logger: Logger
        /// Extra request headers (`Name: value`), sent with every request after the engine's own.
        /// Lines with control characters are never sent; headers the resume rules depend on
        /// (`Range`, `If-Range`, `Accept-Encoding`) are refused by `HeaderValidation`.
        public var additionalHeaders: [String] = []
        /// Receive limit per transfer in bytes per second (curl's `--limit-rate`); nil is unlimited.
        public var maximumBytesPerSecond: Int64?
        /// Whether the server's certificate and host name are checked (false is curl's `--insecure`).
        public var verifiesCertificates = true
        /// The proxy for every request (`http://host:port`, `socks5h://...`); nil follows libcurl's
        /// environment variables (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`), and an
        /// empty string uses no proxy at all.
        public var proxy: String?

        /// Creates a configuration with production defaults.
        public init(stateDirectory: URL, maximumConcurrentDownloads: Int = 4, maximumOutageWait: Duration? = nil,
                    stallTimeout: Duration = .seconds(30), stallBytesPerSecond: Int = 1,
                    connectTimeout: Duration = .seconds(30), initialBackoff: Duration = .seconds(1),
                    maximumBackoff: Duration = .seconds(60), maximumRetryAfter: Duration = .seconds(600),
                    maximumConsecutiveFailures: Int = 8, restartStagger: Duration = .milliseconds(2),
                    checkpointInterval: Int64 = 16 << 20, writeBufferLimit: Int = 4 << 20,
                    maximumRedirects: Int = 10, keepAliveIdle: Duration = .seconds(30),
                    userAgent: String = "reachability-downloads/1", certificateAuthorityFile: URL? = nil,
                    logger: Logger = .silent) {
            self.stateDirectory = stateDirectory
            self.maximumConcurrentDownloads = maximumConcurrentDownloads
            self.maximumOutageWait = maximumOutageWait
            self.stallTimeout = stallTimeout
            self.stallBytesPerSecond = stallBytesPerSecond
            self.connectTimeout = connectTimeout
            self.initialBackoff = initialBackoff
            self.maximumBackoff = maximumBackoff
            self.maximumRetryAfter = maximumRetryAfter
            self.maximumConsecutiveFailures = maximumConsecutiveFailures
            self.restartStagger = restartStagger
            self.checkpointInterval = checkpointInterval
            self.writeBufferLimit = writeBufferLimit
            self.maximumRedirects = maximumRedirects
            self.keepAliveIdle = keepAliveIdle
            self.userAgent = userAgent
            self.certificateAuthorityFile = certificateAuthorityFile
            self.logger = logger
        }
    }

    private enum Intent { case run, pause, cancel, shutdown }

    private struct ActiveTransfer {
        var id: UInt64
        var pathKey: PathKey
        var pinnedInterface: String?
    }

    private struct Entry {
        let download: Download
        var record: ResumeRecord
        var intent: Intent = .run
        var driver: Task<Void, Never>?
        var transfer: ActiveTransfer?
    }

    private enum PathWait { case ready(pinnedInterface: String?), interrupted, timedOut }

    /// The configuration in use.
    public let configuration: Configuration
    private let engine: TransferEngine
    private let hasPathSource: Bool
    private let pathRelay: AsyncStream<NetworkPath>?
    private let pathForwarder: Task<Void, Never>?
    private var pathConsumer: Task<Void, Never>?
    private var path: NetworkPath?
    private var pathWaiters: [UUID: CheckedContinuation<Int, Never>] = [:]
    /// Transfers restarted since the last path update, to stagger restarts after a switch.
    private var restartsSincePathUpdate = 0
    private var entries: [UUID: Entry] = [:]
    private var queue: [UUID] = []
    private var creationOrder: [UUID] = []
    private var isShutDown = false
    /// The state directory, opened and checked once.
    private var checkedStateDirectory: CheckedDirectory?

    /// An agent that assumes the network is always usable (no path source).
    public init(configuration: Configuration) throws {
        self.configuration = configuration
        engine = try TransferEngine()
        hasPathSource = false
        pathRelay = nil
        pathForwarder = nil
    }

    /// An agent driven by `paths` (for example `PathMonitor.paths`, or a scripted stream in tests).
    /// Until the first path arrives, downloads wait quietly.
    public init<Paths: AsyncSequence & Sendable>(configuration: Configuration, paths: Paths) throws
    where Paths.Element == NetworkPath {
        self.configuration = configuration
        engine = try TransferEngine()
        hasPathSource = true
        // The init cannot start an actor-isolated consumer, so a detached task relays the generic
        // sequence into a stream the actor consumes once it is first used.
        let (relay, continuation) = AsyncStream.makeStream(of: NetworkPath.self, bufferingPolicy: .bufferingNewest(16))
        pathRelay = relay
        pathForwarder = Task.detached {
            do {
                for try await path in paths { continuation.yield(path) }
            } catch {}
            continuation.finish()
        }
    }

    /// An agent driven by a started `PathMonitor`.
    public init(configuration: Configuration, monitor: PathMonitor) throws {
        try self.init(configuration: configuration, paths: monitor.paths)
    }

    deinit {
        engine.shutdown()
        pathForwarder?.cancel()
        pathConsumer?.cancel()
    }

    /// The latest path the agent acts on; nil before the first update or without a path source.
    public var currentPath: NetworkPath? {
        activate()
        return path
    }

    /// Every download this agent knows, in creation order.
    public var downloads: [Download] {
        creationOrder.compactMap { entries[$0]?.download }
    }

    /// Starts downloading `url` to `destination` (a file URL). The partial data goes to
    /// `destination.part`; the file appears at `destination` only when complete and verified.
    public func download(from url: URL, to destination: URL, options: DownloadOptions = DownloadOptions()) throws -> Download {
        try makeDownload(from: url, to: destination, options: options)
    }

    /// `download(from:to:options:)` for facades over the agent (package-level).
    ///
    /// `prepare` runs before the download is scheduled, so handlers it sets (`onEvent`,
    /// `onProgress`) see every event. With `state`, the download continues that resume state
    /// (validated first; `url` must be its URL): its id is reused, its record is rewritten from
    /// it, and the partial file `destination.part` is opened and cut to its offset when the
    /// transfer starts. A download of that id still held by the agent is replaced if it is not
    /// transferring, and refused if it is.
    package func makeDownload(from url: URL, to destination: URL, options: DownloadOptions = DownloadOptions(),
                              resuming state: ResumeState? = nil,
                              prepare: (Download) -> Void = { _ in }) throws -> Download {
        activate()
        guard !isShutDown else { throw DownloadError.invalidRequest.with(description: "the agent is shut down") }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw DownloadError.unsupportedURL.with(description: "only http and https URLs can be downloaded: \(url)")
        }
        guard destination.isFileURL else {
            throw DownloadError.invalidRequest.with(description: "destination must be a file URL: \(destination)")
        }
        if let state {
            try state.validate()
            guard state.url == url else {
                throw DownloadError.invalidRequest.with(description: "the resume state is for another URL")
            }
        }
        let id = state?.id ?? UUID()
        if let held = entries[id] {
            guard held.driver == nil, !queue.contains(id) else {
                throw DownloadError.invalidRequest.with(description: "download \(id.uuidString) is already running")
            }
            entries[id] = nil
            creationOrder.removeAll { $0 == id }
        }
        let destination = destination.standardizedFileURL
        if entries.values.contains(where: { $0.download.destination == destination && !$0.download.state.isFinal }) {
            throw DownloadError.invalidRequest.with(description: "already downloading to \(destination.path)")
        }
        let stateDirectory = try stateDirectory()
        var record = ResumeRecord(id: id, url: url, destination: destination,
                                  expectedSHA256: options.expectedSHA256?.lowercased(), totalLength: state?.totalLength,
                                  allowsExpensive: options.allowsExpensive)
        record.expectedLength = options.expectedLength
        record.replacesExistingFile = options.replacesExistingFile ? true : nil
        if let state {
            record.entityTag = state.entityTag
            record.lastModified = state.lastModified
            record.verifiedOffset = state.verifiedOffset
        }
        try record.validate(name: ResumeRecord.fileName(for: id))
        try record.write(to: stateDirectory)
        let download = Download(id: id, url: url, destination: destination, options: options, agent: self,
                                state: .queued, progress: DownloadProgress(bytesReceived: record.verifiedOffset,
                                                                           totalBytes: record.totalLength))
        prepare(download)
        entries[id] = Entry(download: download, record: record)
        creationOrder.append(id)
        queue.append(id)
        configuration.logger.info("download queued", metadata: ["id": id.uuidString, "url": url.absoluteString])
        schedule()
        return download
    }

    /// Restores every unfinished download whose resume record is in the state directory (resume on
    /// launch) and queues them. A record that cannot be read or fails validation is moved aside
    /// to `NAME.bad` with one warning, and never acted on.
    @discardableResult
    public func restoreDownloads() -> [Download] {
        activate()
        let restored = loadRecords().compactMap(restore)
        schedule()
        return restored
    }

    /// Restores only the download from `url` to `destination`, if the state directory holds its
    /// record; every other record is left alone. Options given now win over the stored ones
    /// where they are set: a SHA-256 given on a rerun is adopted, and the whole file is verified
    /// against it at the end (the stored prefix is hashed from the disk).
    public func restoreDownload(from url: URL, to destination: URL, options: DownloadOptions) -> Download? {
        activate()
        let destination = destination.standardizedFileURL
        guard var record = loadRecords().first(where: { $0.url == url && $0.destination == destination }) else { return nil }
        if let expected = options.expectedSHA256?.lowercased(), expected != record.expectedSHA256 {
            record.expectedSHA256 = expected
        }
        if let length = options.expectedLength { record.expectedLength = length }
        record.allowsExpensive = options.allowsExpensive
        if let state = try? stateDirectory() { try? record.write(to: state) }
        let download = restore(record)
        schedule()
        return download
    }

    /// The valid records in the state directory; invalid ones are moved aside.
    private func loadRecords() -> [ResumeRecord] {
        guard let state = try? stateDirectory() else { return [] }
        var records: [ResumeRecord] = []
        let names = (try? state.entries()) ?? []
        for name in names.sorted() where name.hasSuffix(".json") {
            do {
                records.append(try ResumeRecord.read(name, in: state))
            } catch {
                // Not followed, not retried forever: set aside for a person to look at.
                let moved = (try? state.rename(name, to: name + ".bad", replacing: true)) != nil
                configuration.logger.warning(moved ? "moved an invalid resume record aside" : "cannot move an invalid resume record aside",
                                             metadata: ["path": state.child(name), "error": "\(error)"])
            }
        }
        return records
    }

    private func restore(_ record: ResumeRecord) -> Download? {
        guard entries[record.id] == nil else { return nil }
        let options = DownloadOptions(expectedSHA256: record.expectedSHA256, expectedLength: record.expectedLength,
                                      allowsExpensive: record.allowsExpensive,
                                      replacesExistingFile: record.replacesExistingFile ?? false)
        let download = Download(id: record.id, url: record.url, destination: record.destination, options: options,
                                agent: self, state: .queued,
                                progress: DownloadProgress(bytesReceived: record.verifiedOffset, totalBytes: record.totalLength))
        entries[record.id] = Entry(download: download, record: record)
        creationOrder.append(record.id)
        queue.append(record.id)
        configuration.logger.info("download restored", metadata: ["id": record.id.uuidString,
                                                                  "offset": "\(record.verifiedOffset)"])
        return download
    }

    /// The record of a download that is not transferring (see `resumeState(of:)`).
    func resumeRecord(of download: Download) -> ResumeRecord? {
        guard let entry = entries[download.id], entry.download === download, entry.driver == nil else { return nil }
        return entry.record
    }

    /// Drops a download that is not transferring from the agent's bookkeeping (package-level, for
    /// facades that hand its resume state to their caller); its partial file and record stay on
    /// disk, and the `Download` handle no longer controls anything.
    package func forget(_ download: Download) {
        guard let entry = entries[download.id], entry.download === download, entry.driver == nil else { return }
        entries[download.id] = nil
        queue.removeAll { $0 == download.id }
        creationOrder.removeAll { $0 == download.id }
    }

    /// Stops a download's transfer and keeps its resume data; returns once it is paused (the
    /// data checkpointed), so `state` is `.paused` afterwards.
    public func pause(_ download: Download) async {
        guard var entry = entries[download.id] else { return }
        switch download.state {
        case .completed, .failed, .paused: return
        case .queued, .running, .waitingForConnectivity: break
        }
        entry.intent = .pause
        if let driver = entry.driver {
            driver.cancel()   // aborts the transfer, a backoff sleep or a path wait
            entries[download.id] = entry
            await driver.value
        } else {
            entries[download.id] = entry
            queue.removeAll { $0 == download.id }
            download.update(state: .paused, event: .paused)
        }
    }

    /// Continues a paused download, or one that failed with a resumable error.
    public func resume(_ download: Download) {
        guard !isShutDown, var entry = entries[download.id] else { return }
        switch download.state {
        case .paused: break
        case .failed(let error) where error.isResumable: break
        case .queued, .running, .waitingForConnectivity:
            if entry.intent == .pause { entry.intent = .run; entries[download.id] = entry }   // pause still in flight
            return
        case .completed, .failed: return
        }
        entry.intent = .run
        entries[download.id] = entry
        if entry.driver == nil {
            download.update(state: .queued)
            if !queue.contains(download.id) { queue.append(download.id) }
            schedule()
        }
    }

    /// Stops a download for good and deletes its partial file and resume record; returns once
    /// that is done, so `state` is `.failed(.cancelled)` afterwards.
    public func cancel(_ download: Download) async {
        guard var entry = entries[download.id] else { return }
        if case .completed = download.state { return }
        if case .failed(let error) = download.state, error == .cancelled { return }
        entry.intent = .cancel
        entries[download.id] = entry
        if let driver = entry.driver {
            driver.cancel()
            await driver.value
        } else {
            queue.removeAll { $0 == download.id }
            if let state = try? stateDirectory() { PartialFile.removeFiles(of: entry.record, stateDirectory: state) }
            download.update(state: .failed(.cancelled), event: .failed(.cancelled))
        }
    }

    /// Pauses every transfer (keeping resume data), stops the engine thread and the path
    /// consumer. The agent accepts no new downloads afterwards; a new agent can restore them.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        var drivers: [Task<Void, Never>] = []
        for (id, entry) in entries {
            guard let driver = entry.driver else { continue }
            entries[id]?.intent = .shutdown
            driver.cancel()
            drivers.append(driver)
        }
        for driver in drivers { await driver.value }
        engine.shutdown()
        pathForwarder?.cancel()
        pathConsumer?.cancel()
        for waiter in pathWaiters.values { waiter.resume(returning: 0) }
        pathWaiters = [:]
    }

    // MARK: path

    private func activate() {
        guard pathConsumer == nil, let relay = pathRelay, !isShutDown else { return }
        pathConsumer = Task { [weak self] in
            for await path in relay {
                guard let self else { return }
                await self.apply(path)
            }
        }
    }

    private func apply(_ newPath: NetworkPath) {
        let previous = path
        path = newPath
        if previous.map(PathKey.init) != PathKey(newPath) {
            configuration.logger.info("path changed", metadata: [
                "status": newPath.status.rawValue, "interface": newPath.primaryInterface?.name ?? "-",
                "source": newPath.primaryRoute?.sourceAddress ?? "-"])
        }
        for (id, entry) in entries {
            guard let transfer = entry.transfer else { continue }
            if PathPolicy.mustAbort(startedUnder: transfer.pathKey, pinnedInterface: transfer.pinnedInterface,
                                    allowsExpensive: entry.download.options.allowsExpensive, newPath: newPath) {
                configuration.logger.debug("aborting transfer on path change", metadata: ["id": id.uuidString])
                engine.abort(transfer.id, reason: .pathChanged)
                entries[id]?.transfer = nil
            }
        }
        restartsSincePathUpdate = 0
        let waiters = Array(pathWaiters.values)
        pathWaiters = [:]
        for (rank, waiter) in waiters.enumerated() { waiter.resume(returning: rank) }
    }

    private func usability(for download: Download) -> PathUsability {
        PathPolicy.usability(of: path, hasPathSource: hasPathSource, allowsExpensive: download.options.allowsExpensive)
    }

    private func waitForUsablePath(_ id: UUID, download: Download) async -> PathWait {
        var announced = false
        var deadline: ContinuousClock.Instant?
        while true {
            if Task.isCancelled || entries[id]?.intent != .run { return .interrupted }
            let usability = usability(for: download)
            switch usability {
            case .usable(let pinned):
                return .ready(pinnedInterface: pinned)
            case .unknown, .unusable:
                if deadline == nil { deadline = configuration.maximumOutageWait.map { ContinuousClock.now + $0 } }
                if usability == .unusable, !announced {
                    announced = true
                    configuration.logger.info("waiting for connectivity", metadata: ["id": id.uuidString])
                    download.update(state: .waitingForConnectivity, event: .waitingForConnectivity)
                }
            }
            if let deadline, ContinuousClock.now >= deadline { return .timedOut }
            let rank = await nextPathUpdate(until: deadline)
            if rank > 0, case .usable = self.usability(for: download) {
                // Many downloads waking on the same path update: spread the reconnects slightly.
                try? await Task.sleep(for: configuration.restartStagger * rank)
            }
        }
    }

    /// Waits for the next path update (returning this waiter's rank among those woken together),
    /// the deadline or cancellation (returning 0).
    private func nextPathUpdate(until deadline: ContinuousClock.Instant?) async -> Int {
        let key = UUID()
        let timer = deadline.map { deadline in
            Task { [weak self] in
                try? await Task.sleep(until: deadline, clock: .continuous)
                await self?.wakeWaiter(key)
            }
        }
        defer { timer?.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
                if Task.isCancelled || isShutDown {
                    continuation.resume(returning: 0)
                } else {
                    pathWaiters[key] = continuation
                }
            }
        } onCancel: {
            Task { await self.wakeWaiter(key) }
        }
    }

    private func wakeWaiter(_ key: UUID) {
        pathWaiters.removeValue(forKey: key)?.resume(returning: 0)
    }

    // MARK: scheduling

    private func schedule() {
        guard !isShutDown else { return }
        var active = entries.values.filter { $0.driver != nil }.count
        for id in queue where active < max(1, configuration.maximumConcurrentDownloads) {
            guard let entry = entries[id], entry.driver == nil, entry.intent == .run else { continue }
            entries[id]?.driver = Task { await self.drive(id) }
            active += 1
        }
        queue.removeAll { entries[$0]?.driver != nil }
    }

    private var settings: TransferSettings {
        TransferSettings(connectTimeout: configuration.connectTimeout, stallTimeout: configuration.stallTimeout,
                         stallBytesPerSecond: configuration.stallBytesPerSecond,
                         maximumRedirects: configuration.maximumRedirects, keepAliveIdle: configuration.keepAliveIdle,
                         receiveBufferSize: 256 << 10, userAgent: configuration.userAgent,
                         certificateAuthorityFile: configuration.certificateAuthorityFile?.path,
                         additionalHeaders: configuration.additionalHeaders,
                         maximumBytesPerSecond: configuration.maximumBytesPerSecond,
                         verifiesCertificates: configuration.verifiesCertificates, proxy: configuration.proxy)
    }

    private var recoveryPolicy: RecoveryStateMachine.Policy {
        RecoveryStateMachine.Policy(
            backoff: Backoff(initial: configuration.initialBackoff, maximum: configuration.maximumBackoff,
                             maximumRetryAfter: configuration.maximumRetryAfter),
            maximumConsecutiveFailures: configuration.maximumConsecutiveFailures, maximumRestarts: 3)
    }

    /// Opens (creating it 0700) and checks the state directory once; everything in it is then
    /// reached relative to that descriptor.
    private func stateDirectory() throws -> CheckedDirectory {
        if let checkedStateDirectory { return checkedStateDirectory }
        let path = configuration.stateDirectory.standardizedFileURL.path
        do {
            let directory = try CheckedDirectory.open(path, policy: .privateState, creating: true)
            checkedStateDirectory = directory
            return directory
        } catch {
            throw DownloadError.file(error)
        }
    }

    // MARK: one download

    /// Runs a download until it completes, fails, or is paused/cancelled/shut down.
    private func drive(_ id: UUID) async {
        guard let entry = entries[id] else { return }
        let download = entry.download
        let file: PartialFile
        do {
            let state = try stateDirectory()
            let limits = PartialFile.Limits(highWater: max(1 << 20, configuration.writeBufferLimit),
                                            lowWater: max(1 << 20, configuration.writeBufferLimit) / 4,
                                            checkpointInterval: max(1 << 20, configuration.checkpointInterval))
            file = try PartialFile(record: entry.record, stateDirectory: state, limits: limits)
        } catch {
            let failure = error as? DownloadError ?? .fileSystem.with(description: "\(error)")
            endDriver(id, failure: failure)
            return
        }
        download.report(bytesReceived: file.writtenEnd, totalBytes: file.record.totalLength, resetRate: true)
        file.onRestartFromZero { [download] reason in
            download.emit(.restartedFromZero(reason: reason))
            download.report(bytesReceived: 0, totalBytes: nil, resetRate: true)
        }
        var recovery = RecoveryStateMachine(policy: recoveryPolicy)
        var freshConnection = false

        attempts: while true {
            guard !Task.isCancelled, entries[id]?.intent == .run else { break }
            let pinnedInterface: String?
            switch await waitForUsablePath(id, download: download) {
            case .ready(let pinned): pinnedInterface = pinned
            case .interrupted: break attempts
            case .timedOut:
                await file.close()
                entries[id]?.record = file.record
                endDriver(id, failure: .connectivityTimeout)
                return
            }

            let offset = file.writtenEnd
            file.updateRecord { $0.attempts += 1; $0.updatedAt = Date() }
            let record = file.record
            // Every resume re-fetches the bytes just before the offset and compares them with the
            // disk before appending (issue 7): a server that ignores If-Range or gives no
            // validator cannot splice two versions.
            let request = TransferRequest(url: record.url, offset: offset, ifRange: offset > 0 ? record.validator : nil,
                                          entityTag: record.entityTag, knownTotalLength: record.totalLength,
                                          lastModified: record.lastModified, observedEntityTag: record.observedEntityTag,
                                          overlap: min(offset, ResponseStateMachine.resumeOverlap),
                                          interfaceName: pinnedInterface, freshConnection: freshConnection,
                                          settings: settings)
            download.update(state: .running, event: offset == 0 ? .started : .resumed(at: offset))
            configuration.logger.debug("attempt", metadata: ["id": id.uuidString, "offset": "\(offset)",
                                                             "interface": pinnedInterface ?? "-"])

            let outcome = await runAttempt(id, request, file: file, download: download)
            var result = outcome.result
            do {
                try await file.checkpoint()
            } catch {
                switch result {
                case .aborted(.paused), .aborted(.cancelled), .aborted(.shutdown), .aborted(.writeFailed): break
                default: result = .aborted(.writeFailed(error as? DownloadError ?? .fileSystem))
                }
            }
            download.report(bytesReceived: file.writtenEnd, totalBytes: file.record.totalLength)
            configuration.logger.debug("attempt ended", metadata: ["id": id.uuidString, "result": "\(result)",
                                                                   "bytes": "\(outcome.bytesReceived)"])
            let isPathSatisfied: Bool
            if case .usable = usability(for: download) { isPathSatisfied = true } else { isPathSatisfied = false }
            let action = recovery.event(.attemptEnded(result, receivedBytes: outcome.bytesReceived > 0,
                                                      isPathSatisfied: isPathSatisfied),
                                        jitter: Double.random(in: 0...1))
            freshConnection = false
            switch action {
            case .complete(let total):
                do {
                    let url = try await file.complete(totalLength: total, expectedLength: download.options.expectedLength)
                    download.report(bytesReceived: total, totalBytes: total)
                    configuration.logger.info("download completed", metadata: ["id": id.uuidString, "bytes": "\(total)"])
                    entries[id]?.driver = nil
                    download.update(state: .completed, event: .completed(url))
                    schedule()
                } catch {
                    await failDriver(id, file, error)
                }
                return
            case .continueNow:
                continue
            case .retry(let delay, let fresh, let error):
                freshConnection = fresh
                if let error { download.emit(.retrying(after: delay, error: error)) }
                if delay > .zero {
                    if let error, error.httpStatusCode == nil {
                        // A transport failure may have been the old path's fault: a path update
                        // (another interface, a route back) ends the backoff at once.
                        _ = await nextPathUpdate(until: .now + delay)
                        if Task.isCancelled { break attempts }
                        freshConnection = true
                    } else {
                        // The server asked for the wait (5xx, 408, 429, Retry-After): honour it.
                        do { try await Task.sleep(for: delay) } catch { break attempts }
                    }
                }
            case .waitForPath:
                freshConnection = true
                // Many transfers aborted by one path switch: spread their reconnects slightly.
                let rank = restartsSincePathUpdate
                restartsSincePathUpdate += 1
                if rank > 0, case .usable = usability(for: download) {
                    try? await Task.sleep(for: configuration.restartStagger * rank)
                }
            case .restartFromZero(let reason):
                do { try await file.restartFromZero() } catch { await failDriver(id, file, error); return }
                configuration.logger.info("restarting from zero", metadata: ["id": id.uuidString, "reason": reason])
                download.emit(.restartedFromZero(reason: reason))
                download.report(bytesReceived: 0, totalBytes: nil, resetRate: true)
            case .fail(let error):
                await failDriver(id, file, error)
                return
            case .stop:
                break attempts
            }
        }

        // Left because of pause, cancel or shutdown.
        let intent = entries[id]?.intent ?? .cancel
        switch intent {
        case .cancel:
            await file.discard()
            entries[id]?.driver = nil
            download.update(state: .failed(.cancelled), event: .failed(.cancelled))
        case .pause, .shutdown, .run:
            _ = try? await file.checkpoint()
            await file.close()
            entries[id]?.record = file.record
            entries[id]?.driver = nil
            if entries[id]?.intent == .run, !isShutDown {
                // resume() arrived while the pause was being carried out.
                download.update(state: .queued)
                queue.append(id)
            } else {
                download.update(state: .paused, event: .paused)
            }
        }
        schedule()
    }

    private func runAttempt(_ id: UUID, _ request: TransferRequest, file: PartialFile,
                            download: Download) async -> TransferOutcome {
        let engine = engine
        let transferID = engine.makeTransferID()
        let pathKey = PathKey(path)
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<TransferOutcome, Never>) in
                // Registering and queueing in one actor turn: a path update handled after this sees the
                // transfer, and its abort is queued behind the start.
                entries[id]?.transfer = ActiveTransfer(id: transferID, pathKey: pathKey, pinnedInterface: request.interfaceName)
                let started = engine.start(transferID, request, into: file, progress: { [weak download] offset in
                    download?.report(bytesReceived: offset, totalBytes: file.record.totalLength)
                }, completion: { continuation.resume(returning: $0) })
                if !started {
                    continuation.resume(returning: TransferOutcome(result: .aborted(.shutdown), bytesReceived: 0))
                } else if Task.isCancelled {
                    engine.abort(transferID, reason: .cancelled)
                }
            }
        } onCancel: {
            engine.abort(transferID, reason: .cancelled)
        }
        if entries[id]?.transfer?.id == transferID { entries[id]?.transfer = nil }
        return outcome
    }

    private func failDriver(_ id: UUID, _ file: PartialFile, _ error: any Error) async {
        let failure = error as? DownloadError ?? .fileSystem.with(description: "\(error)")
        if failure.isResumable {
            _ = try? await file.checkpoint()
            await file.close()
        } else {
            // Nothing useful to resume (4xx, checksum mismatch, broken server): leave no debris.
            await file.discard()
        }
        entries[id]?.record = file.record
        endDriver(id, failure: failure)
    }

    private func endDriver(_ id: UUID, failure: DownloadError) {
        guard let entry = entries[id] else { return }
        entries[id]?.driver = nil
        configuration.logger.warning("download failed", metadata: ["id": id.uuidString, "error": failure.description])
        entry.download.update(state: .failed(failure), event: .failed(failure))
        schedule()
    }
}

/// Runs `body` with an agent and shuts it down afterwards, whatever happens.
public func withDownloadAgent<Result: Sendable>(
    configuration: DownloadAgent.Configuration,
    _ body: (DownloadAgent) async throws -> Result
) async throws -> Result {
    try await runThenShutDown(try DownloadAgent(configuration: configuration), body)
}

/// Runs `body` with an agent driven by `paths` (e.g. `PathMonitor.paths`) and shuts it down
/// afterwards, whatever happens.
public func withDownloadAgent<Paths: AsyncSequence & Sendable, Result: Sendable>(
    configuration: DownloadAgent.Configuration,
    paths: Paths,
    _ body: (DownloadAgent) async throws -> Result
) async throws -> Result where Paths.Element == NetworkPath {
    try await runThenShutDown(try DownloadAgent(configuration: configuration, paths: paths), body)
}

private func runThenShutDown<Result: Sendable>(_ agent: DownloadAgent, _ body: (DownloadAgent) async throws -> Result) async throws -> Result {
    do {
        let result = try await body(agent)
        await agent.shutdown()
        return result
    } catch {
        await agent.shutdown()
        throw error
    }
}
