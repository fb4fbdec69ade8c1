import FoundationEssentials
import Synchronization
import LinuxReachability
import LinuxSystem
import ReachabilityBase

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
/// scripted stream in tests). Without one, the agent assumes it is connected. With paths to hosts
/// (`PathMonitor.paths(to:)`, which `init(configuration:monitor:)` wires in), each download is
/// gated by the kernel's route to its own server (or proxy) rather than the default route: a
/// server on the local network, on a link-local address or on this host is downloaded from
/// without any default route, and a path change that does not move that route leaves the
/// transfer alone.
//
// Longer than 400 lines on purpose: the public API of the engine (HalfTunes' shape) over one
// actor's private registry of downloads; the per-download work is the driver's
// (DownloadAgent+Driver.swift) and the decisions the state machine's.
public actor DownloadAgent {
    /// Limits, timeouts and places.
    public struct Configuration: Sendable {
        /// Where resume records live; created (0700) if missing. It must belong to the effective
        /// user (or root) and be writable by nobody else, as must its parents unless sticky;
        /// otherwise downloads fail with `DownloadError.untrustedFile`.
        public var stateDirectory: URL
        /// How many downloads transfer at once; the rest are `queued`.
        public var maximumConcurrentDownloads: Int
        /// How long one outage may last before the download fails with `connectivityTimeout`
        /// (keeping its resume data): waiting for a usable path, for a server that does not
        /// answer, or for one that keeps answering 5xx, from the first failure until bytes flow
        /// again; the error says which wait ran out. nil waits forever.
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
        /// Bytes between periodic checkpoints (fsync + record) ...
        public var checkpointInterval: Int64
        /// ... and the least time between them (1 s; zero: by bytes only). A fast download is
        /// not held up by an fsync every `checkpointInterval`; the block journal keeps what a
        /// kill leaves meanwhile.
        public var checkpointSpacing: Duration = .seconds(1)
        /// Unwritten bytes per download before its transfer is paused (memory bound; at least
        /// 256 KiB). 512 KiB by default: with the engine's 128 KiB gathers and libcurl's 128 KiB
        /// receive buffer, about 0.75 MiB of buffers per download. Twice these sizes cost 0.6 MiB
        /// more peak RSS and were no faster, to disk or to tmpfs (bench/cost_bench.py).
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
        /// Settled spacing of probes while a server does not answer on a working path (one probe
        /// per host, the first after 100 ms, then one per interval on average over the whole wait;
        /// slower after minutes). These waits never spend the failure budget; `maximumOutageWait`
        /// bounds them.
        public var serverProbeInterval: Duration = .milliseconds(500)
        /// The shortest silence after which a receiving transfer is suspected of stalling and
        /// raced by a fresh connection (slower transfers get proportionally longer); a transfer
        /// silent for `stallTimeout` is aborted in any case.
        public var minimumStallSuspicion: Duration = .seconds(1)
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
        /// Most connections to one server (scheme, host and port) at once, over every download of
        /// this agent: a download adds connections beside its first only while that makes it
        /// faster (a server capping each connection), and only when the server answered a range
        /// with the entity's validator (or an expected SHA-256 guards the file). 6 by default, as a
        /// web browser; 1 fetches every file over one connection.
        public var maximumConnectionsPerHost = DownloadAgent.defaultConnectionsPerHost
        /// The free space downloads leave on their file systems: a download that would leave
        /// less, or meets `ENOSPC`, waits in line (`JobWaitReason.lowDiskSpace`) until space
        /// returns. Nil (the default): no rule, and `ENOSPC` fails the download (`diskFull`).
        public var spacePolicy: SpacePolicy?
        /// One receive limit over every connection of every download (the daemon's `limit-rate=`
        /// and `agent limit`), changed while transfers run; nil: none (package-level).
        package var agentRateLimit: AgentRateLimit?
        /// Test hook (package-level): runs right after a verified file is renamed into place,
        /// before its record is removed; crash tests kill the process there.
        package var afterRenameHook: (@Sendable () -> Void)?

        /// Creates a configuration with production defaults.
        public init(stateDirectory: URL, maximumConcurrentDownloads: Int = 4, maximumOutageWait: Duration? = nil,
                    stallTimeout: Duration = .seconds(30), stallBytesPerSecond: Int = 1,
                    connectTimeout: Duration = .seconds(30), initialBackoff: Duration = .seconds(1),
                    maximumBackoff: Duration = .seconds(60), maximumRetryAfter: Duration = .seconds(600),
                    maximumConsecutiveFailures: Int = 8, restartStagger: Duration = .milliseconds(2),
                    checkpointInterval: Int64 = 16 << 20, writeBufferLimit: Int = 512 << 10,
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

    /// The polite default of `Configuration.maximumConnectionsPerHost`: what a web browser opens.
    public static let defaultConnectionsPerHost = 6
    /// The largest `maximumConnectionsPerHost` (aria2's, for one server).
    public static let maximumConnectionsPerHostLimit = 16
    /// `--connections` (of `download`, `agent` and `queue add`) and `agent.conf`'s `connections=`.
    package static let connectionsPerHostValue = Count(1...maximumConnectionsPerHostLimit)

    /// What the user last asked of a download (a driver's machine decides how to get there).
    enum Intent { case run, pause, cancel, shutdown }

    /// The attempt a driver has in the engine.
    struct ActiveTransfer {
        var id: UInt64
        var attempt: Int
        var pathKey: PathKey
        var pinnedInterface: String?
        /// The paths its connections are bound to, when it uses several (it then follows path
        /// changes itself instead of being restarted).
        var multipath: [SegmentPlanner.Path]?
    }

    struct Entry {
        let download: Download
        var record: ResumeRecord
        var intent: Intent = .run
        /// The driver task while the download holds a slot.
        var driver: Task<Void, Never>?
        /// Where the driver takes its inputs from.
        var mailbox: AsyncStream<DriverInput>.Continuation?
        var transfer: ActiveTransfer?
        /// Where its traffic goes first: the server, or the proxy that reaches it.
        var host: String?
        /// Whether its driver follows `host`'s path (released once when the driver ends).
        var followsHost = false
        /// The partial file of its latest driver (closed once that ended).
        var file: PartialFile?
    }

    /// The configuration in use.
    public let configuration: Configuration
    let engine: TransferEngine
    private let pathRelay: AsyncStream<NetworkPath>?
    private let pathForwarder: Task<Void, Never>?
    private var pathConsumer: Task<Void, Never>?
    /// Paths to one host (`PathMonitor.paths(to:)`), nil when downloads follow the primary path only.
    private let hostPathSource: (@Sendable (String) -> AsyncStream<HostPath>)?
    /// Hosts followed for running downloads: how many drivers follow each, and the task that
    /// relays its paths to this actor.
    private var hostFollowers: [String: (count: Int, relay: Task<Void, Never>)] = [:]
    /// The path and what it means for each download.
    var pathWaiters: PathWaiters
    /// Who holds a transfer slot, who waits for one.
    var scheduler: DownloadScheduler
    /// One probe per unreachable host, shared with the process's other agents.
    let probes: ServerProbeCoordinator
    var entries: [UUID: Entry] = [:]
    private var creationOrder: [UUID] = []
    /// The downloads in creation order, readable without waiting for the actor: the agent's
    /// `status` and `list` must not queue behind the adds and completions it is carrying out.
    private let listed = Mutex<[Download]>([])
    /// How many of the listed downloads are in each state and class, readable without the
    /// actor and without visiting each download (`agent status` at 10,000 jobs).
    package nonisolated let census = DownloadCensus()
    /// The latest download made for each destination path: a new one is refused while that one
    /// has not ended, without comparing every entry's URL (10,000 queued downloads).
    private var destinationHolders: [String: UUID] = [:]
    var isShutDown = false
    /// The state directory, opened and checked once.
    private var checkedStateDirectory: CheckedDirectory?
    /// Running exchanges: the host whose route gates each (nil: the primary path) and the path
    /// it started on, nil before the first path is known (DownloadAgent+Exchanges.swift).
    var exchangePaths: [UInt64: (host: String?, key: PathKey?)] = [:]
    /// Exchanges waiting for a usable path, resumed with false when cancelled.
    var connectivityWaiters: [UInt64: CheckedContinuation<Bool, Never>] = [:]
    /// Downloads held back by the free-space rule, and its watch (DownloadAgent+Space.swift).
    var space = SpaceWatch()
    /// The machine's power and the downloads waiting for AC power (DownloadAgent+Power.swift).
    var power = PowerWatch()
    /// Queued downloads' deadlines (JobDeadline.swift).
    var deadlineWatch = QueuedDeadlineWatch()

    /// An agent that assumes the network is always usable (no path source).
    public init(configuration: Configuration) throws {
        self.configuration = configuration
        engine = try TransferEngine()
        self.pathWaiters = PathWaiters(hasPathSource: false)
        scheduler = DownloadScheduler(limit: configuration.maximumConcurrentDownloads)
        probes = .shared(ServerWaitSchedule(interval: configuration.serverProbeInterval))
        pathRelay = nil
        pathForwarder = nil
        hostPathSource = nil
    }

    /// An agent driven by `paths` (for example `PathMonitor.paths`, or a scripted stream in tests).
    /// Until the first path arrives, downloads wait quietly. With `hostPaths` (for example
    /// `PathMonitor.paths(to:)`), each download is gated by the path to its server or proxy once
    /// that has answered; a stream that ends hands the download back to `paths`.
    public init<Paths: AsyncSequence & Sendable>(configuration: Configuration, paths: Paths,
                                                 hostPaths: (@Sendable (String) -> AsyncStream<HostPath>)? = nil) throws
    where Paths.Element == NetworkPath {
        self.configuration = configuration
        engine = try TransferEngine()
        self.pathWaiters = PathWaiters(hasPathSource: true, followsHosts: hostPaths != nil)
        hostPathSource = hostPaths
        scheduler = DownloadScheduler(limit: configuration.maximumConcurrentDownloads)
        probes = .shared(ServerWaitSchedule(interval: configuration.serverProbeInterval))
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

    /// An agent driven by a started `PathMonitor`: its primary path, and the route to each
    /// download's server (`paths(to:)`).
    public init(configuration: Configuration, monitor: PathMonitor) throws {
        try self.init(configuration: configuration, paths: monitor.paths, hostPaths: { monitor.paths(to: $0) })
    }

    deinit {
        engine.shutdown()
        pathForwarder?.cancel()
        pathConsumer?.cancel()
        for follower in hostFollowers.values { follower.relay.cancel() }
    }

    /// The latest path the agent acts on; nil before the first update or without a path source.
    public var currentPath: NetworkPath? {
        activate()
        return pathWaiters.path
    }

    /// Every download this agent knows, in creation order.
    public var downloads: [Download] { listed.withLock { $0 } }

    /// `downloads`, read without waiting for the actor (package-level, for the agent's service).
    package nonisolated var downloadsNow: [Download] { listed.withLock { $0 } }

    /// Starts downloading `url` to `destination` (a file URL). The partial data goes to
    /// `destination.part`; the file appears at `destination` only when complete and verified.
    public func download(from url: URL, to destination: URL, options: DownloadOptions = DownloadOptions()) throws -> Download {
        try makeDownload(from: url, to: destination, options: options)
    }

    /// Most mirrors one download takes (a Metalink's bound).
    public static let maximumMirrors = 256

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
        let digest = try Self.checkedRequest(url: url, destination: destination, options: options, resuming: state)
        let id = state?.id ?? UUID()
        if let held = entries[id] {
            guard held.driver == nil, !scheduler.isQueued(id) else {
                throw DownloadError.invalidRequest.with(description: "download \(id.uuidString) is already running")
            }
            entries[id] = nil
            creationOrder.removeAll { $0 == id }
            held.download.leaveCensus()
            listed.withLock { $0.removeAll { $0.id == id } }
        }
        let destination = destination.standardizedFileURL
        if let holder = destinationHolders[destination.path].flatMap({ entries[$0] }),
           holder.download.destination == destination, !holder.download.state.isFinal {
            throw DownloadError.invalidRequest.with(description: "already downloading to \(destination.path)")
        }
        let stateDirectory = try stateDirectory()
        let record = Self.newRecord(id: id, url: url, destination: destination, digest: digest, options: options, resuming: state)
        try record.validate(name: ResumeRecord.fileName(for: id))
        // A pipelined add's record joins a group commit (DownloadAgent+GroupCommit.swift).
        let isStaged = try writeNewRecord(record, to: stateDirectory, isNew: state == nil)
        // The proxy is decided once, here: the job's own, else the agent's (nil: the environment's).
        let options = options.withProxy(options.proxy ?? configuration.proxy)
        let download = Download(id: id, url: url, destination: destination, options: options, agent: self,
                                state: .queued, progress: DownloadProgress(bytesReceived: record.verifiedOffset,
                                                                           totalBytes: record.totalLength),
                                census: census)
        prepare(download)
        entries[id] = Entry(download: download, record: record, host: gateHost(for: url, proxy: options.proxy))
        deadlineWatch.track(id, deadline: options.deadline)
        destinationHolders[destination.path] = id
        creationOrder.append(id)
        listed.withLock { $0.append(download) }
        if !isStaged { scheduler.enqueue(id, priority: options.priority) }
        configuration.logger.info("download queued", metadata: ["id": id.uuidString, "url": URLRedaction.redacted(url)])
        schedule()
        return download
    }

    /// Refuses what no download can take (another scheme, a destination that is no file URL, bad
    /// mirrors, headers or SHA-256, a resume state for another URL); the SHA-256 normalized.
    private static func checkedRequest(url: URL, destination: URL, options: DownloadOptions,
                                       resuming state: ResumeState?) throws -> String? {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw DownloadError.unsupportedURL.with(description: "only http and https URLs can be downloaded: \(url)")
        }
        guard destination.isFileURL else {
            throw DownloadError.invalidRequest.with(description: "destination must be a file URL: \(destination)")
        }
        if let problem = JobSources.problem(withMirrors: options.mirrors) {
            let code: DownloadError = options.mirrors.count > Self.maximumMirrors ? .invalidRequest : .unsupportedURL
            throw code.with(description: problem)
        }
        if let state {
            try state.validate()
            guard state.url == url else {
                throw DownloadError.invalidRequest.with(description: "the resume state is for another URL")
            }
        }
        for line in options.requestHeaders {
            if let problem = HeaderValidation.problem(with: line) {
                throw DownloadError.invalidRequest.with(description: "request header \(line.prefix(while: { $0 != ":" })): \(problem)")
            }
        }
        var digest: String?
        if let expected = options.expectedSHA256 {
            guard let normalized = SHA256.normalizedHexDigest(expected) else {
                throw DownloadError.invalidRequest.with(description: "the expected SHA-256 must be 64 hexadecimal digits")
            }
            digest = normalized
        }
        return digest
    }

    /// The record of a new download: its options, and the bytes a resume state says are kept.
    private static func newRecord(id: UUID, url: URL, destination: URL, digest: String?, options: DownloadOptions,
                                  resuming state: ResumeState?) -> ResumeRecord {
        var record = ResumeRecord(id: id, url: url, destination: destination,
                                  expectedSHA256: digest, totalLength: state?.totalLength,
                                  allowsExpensive: options.allowsExpensive)
        record.adoptPolicy(of: options)
        record.expectedLength = options.expectedLength
        record.replacesExistingFile = options.replacesExistingFile ? true : nil
        record.sources = JobSources(options)
        if var state {
            state.id = id
            state.url = url
            record.state = state
        }
        return record
    }

    /// Restores every unfinished download whose resume record is in the state directory (resume on
    /// launch) and queues them. A record that cannot be read or fails validation is moved aside
    /// to `NAME.bad` with one warning, and never acted on; so is one whose destination
    /// `isAllowed` refuses (records are input: an edited one must not make the agent write where
    /// new downloads may not), and its partial file is left alone.
    @discardableResult
    public func restoreDownloads(allowingDestination isAllowed: (URL) -> Bool = { _ in true }) -> [Download] {
        restoreDownloads(where: { _ in true }, allowingDestination: isAllowed)
    }

    /// `restoreDownloads(allowingDestination:)` for the records `isIncluded` accepts; the others
    /// are left alone (package-level: the agent keeps background sessions' downloads for their
    /// own restore, which brings their options back).
    @discardableResult
    package func restoreDownloads(where isIncluded: (UUID) -> Bool,
                                  allowingDestination isAllowed: (URL) -> Bool = { _ in true }) -> [Download] {
        activate()
        var restored: [Download] = []
        for record in loadRecords() where isIncluded(record.id) {
            guard isAllowed(record.destination) else {
                moveAside(ResumeRecord.fileName(for: record.id), reason: "its destination \(record.destination.path) is outside the allowed download directories")
                continue
            }
            if let download = restore(record) { restored.append(download) }
        }
        schedule()
        return restored
    }

    /// Restores download `id` from its record with `options` (its SHA-256, expected length and
    /// replace rule stay the record's), if the state directory holds one whose destination is
    /// `destination` and the agent does not hold it already; nil otherwise.
    package func restoreDownload(id: UUID, options: DownloadOptions, destination: URL) -> Download? {
        activate()
        guard entries[id] == nil, let state = try? stateDirectory(),
              let record = try? ResumeRecord.read(ResumeRecord.fileName(for: id), in: state) else { return nil }
        // Records are input: one edited to write elsewhere is set aside, not followed.
        guard record.destination == destination.standardizedFileURL else {
            moveAside(ResumeRecord.fileName(for: id), reason: "its destination \(record.destination.path) is not \(destination.path)")
            return nil
        }
        var merged = options
        merged.expectedSHA256 = record.expectedSHA256
        merged.expectedLength = record.expectedLength
        merged.replacesExistingFile = record.replacesExistingFile ?? false
        var updated = record
        updated.allowsExpensive = options.allowsExpensive
        if updated != record { try? updated.write(to: state) }
        let download = restore(updated, options: merged)
        schedule()
        return download
    }

    /// Restores only the download from `url` to `destination`, if the state directory holds its
    /// record; every other record is left alone. Options given now win over the stored ones
    /// where they are set: a SHA-256 given on a rerun is adopted, and the whole file is verified
    /// against it at the end (the stored prefix is hashed from the disk).
    public func restoreDownload(from url: URL, to destination: URL, options: DownloadOptions) -> Download? {
        activate()
        let destination = destination.standardizedFileURL
        guard var record = loadRecords().first(where: { $0.url == url && $0.destination == destination }) else { return nil }
        if let expected = options.expectedSHA256.flatMap(SHA256.normalizedHexDigest), expected != record.expectedSHA256 {
            record.expectedSHA256 = expected
        }
        if let length = options.expectedLength { record.expectedLength = length }
        record.allowsExpensive = options.allowsExpensive
        record.adoptPolicy(of: options)
        let previous = record
        record.sources = JobSources(options)
        if let state = try? stateDirectory() {
            // Piece hashes given anew (another Metalink): the old side file goes once the record
            // naming the new one is written.
            if (try? record.write(to: state)) != nil, previous.sources?.pieceFile != record.sources?.pieceFile {
                PartialFile.removePieceFile(of: previous, in: state)
            }
        }
        let download = restore(record, sourcesFrom: options)
        schedule()
        return download
    }

    /// Restores the download to `destination` whatever URL its record names, to be fetched from
    /// `url` from now on (an expired link replaced by a new one), and returns the URL it had.
    /// The stored bytes stay: the next request asks for the rest with the recorded validators in
    /// If-Range, so a different file (another length or validator) starts over from zero, with
    /// the reason the resume rules give. Nil when no record has that destination.
    package func restoreDownload(to destination: URL, replacingURLWith url: URL,
                                 options: DownloadOptions) -> (download: Download, previousURL: URL)? {
        activate()
        let destination = destination.standardizedFileURL
        guard var record = loadRecords().first(where: { $0.destination == destination }),
              let state = try? stateDirectory() else { return nil }
        let previous = record.url
        if previous != url {
            record.url = url
            do { try record.write(to: state) } catch { return nil }
        }
        guard let download = restoreDownload(from: url, to: destination, options: options) else { return nil }
        return (download, previous)
    }

    /// The length and validators of the file a completed download put in place (what a later
    /// rerun compares with the server's); nil when it is not completed.
    package func completedEntity(of download: Download) -> ResumeValidator.Entity? {
        guard download.state == .completed, let record = entries[download.id]?.record else { return nil }
        return ResumeValidator.Entity(length: record.finishedFile?.size ?? record.totalLength,
                                      entityTag: record.entityTag, lastModified: record.lastModified)
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
                moveAside(name, reason: "\(error)")
            }
        }
        return records
    }

    /// Sets a record that must not be acted on aside as `NAME.bad` (not followed, not retried
    /// forever: for a person to look at), with one warning.
    private func moveAside(_ name: String, reason: String) {
        guard let state = try? stateDirectory() else { return }
        let moved = (try? state.rename(name, to: name + ".bad", replacing: true)) != nil
        configuration.logger.warning(moved ? "moved an invalid resume record aside" : "cannot move an invalid resume record aside",
                                     metadata: ["path": state.child(name), "error": reason])
    }

    private func restore(_ record: ResumeRecord, options given: DownloadOptions? = nil,
                         sourcesFrom caller: DownloadOptions? = nil) -> Download? {
        guard entries[record.id] == nil else { return nil }
        var options = given ?? DownloadOptions(expectedSHA256: record.expectedSHA256, expectedLength: record.expectedLength,
                                               allowsExpensive: record.allowsExpensive,
                                               replacesExistingFile: record.replacesExistingFile ?? false,
                                               allowsRoaming: record.allowsRoaming ?? true,
                                               allowsConstrained: record.allowsConstrained ?? true,
                                               maximumConnections: record.maximumConnections,
                                               priority: record.priority ?? 0.5)
            .withTimeLimits(deadline: record.deadline, noProgressTimeout: record.noProgressTimeout)
        if given == nil {
            options.waitsForACPower = record.waitsForACPower ?? false
            options.opensAllConnections = record.opensAllConnections ?? false
            options.completionCommand = record.onComplete
        }
        // The caller restoring gives the job's sources again (a rerun of `download`); else the
        // record keeps those the job was added with (an agent restarted).
        if let caller {
            options.mirrors = caller.mirrors
            options.pieceHashes = caller.pieceHashes
        } else if let sources = record.sources {
            options.mirrors = sources.mirrors ?? []
            options.pieceHashes = sources.pieceHashes
        }
        // A job's own proxy, else the agent's.
        options.proxy = caller?.proxy ?? record.sources?.proxy ?? configuration.proxy
        // What the block journal vouches for past the last checkpoint (after a crash, nearly
        // everything written), as the transfer will find it: not the fsynced checkpoint alone.
        let recovered = (try? stateDirectory()).map { BlockJournal.recoverableBytes(record: record, stateDirectory: $0) }
            ?? record.verifiedOffset
        let download = Download(id: record.id, url: record.url, destination: record.destination, options: options,
                                agent: self, state: .queued,
                                progress: DownloadProgress(bytesReceived: recovered, totalBytes: record.totalLength),
                                census: census)
        entries[record.id] = Entry(download: download, record: record, host: gateHost(for: record.url, proxy: options.proxy))
        deadlineWatch.track(record.id, deadline: options.deadline)
        if let holder = destinationHolders[record.destination.path].flatMap({ entries[$0] }), !holder.download.state.isFinal {
            // Two records for one destination (only by hand): the check keeps finding the first.
        } else {
            destinationHolders[record.destination.path] = record.id
        }
        creationOrder.append(record.id)
        listed.withLock { $0.append(download) }
        scheduler.enqueue(record.id, priority: options.priority)
        configuration.logger.info("download restored", metadata: ["id": record.id.uuidString,
                                                                  "checkpoint": "\(record.verifiedOffset)",
                                                                  "offset": "\(recovered)"])
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
        scheduler.dequeue(download.id)
        creationOrder.removeAll { $0 == download.id }
        download.leaveCensus()
        listed.withLock { $0.removeAll { $0 === download } }
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
        entries[download.id] = entry
        if let driver = entry.driver {
            entry.mailbox?.yield(.machine(.pause))   // ends the transfer, a backoff or a wait
            await driver.value
        } else {
            scheduler.dequeue(download.id)
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
            if entry.intent == .pause {
                // A pause still in flight: the driver ends, and the download is queued again.
                entry.intent = .run
                entries[download.id] = entry
                entry.mailbox?.yield(.machine(.resume))
            }
            return
        case .completed, .failed: return
        }
        entry.intent = .run
        entries[download.id] = entry
        if entry.driver == nil {
            download.update(state: .queued)
            guard !isRecordStaged(download.id) else { return }   // scheduled once its record is written
            scheduler.enqueue(download.id, priority: download.options.priority)
            schedule()
        }
    }

    /// Stops a download for good and deletes its partial file and resume record; returns once
    /// that is done, so `state` is `.failed(.cancelled)` afterwards.
    public func cancel(_ download: Download) async {
        await recordWritten(download.id)
        guard var entry = entries[download.id] else { return }
        if case .completed = download.state { return }
        if case .failed(let error) = download.state, error == .cancelled { return }
        entry.intent = .cancel
        entries[download.id] = entry
        if let driver = entry.driver {
            entry.mailbox?.yield(.machine(.cancel))
            await driver.value
        } else {
            scheduler.dequeue(download.id)
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
            entry.mailbox?.yield(.machine(.shutdown))
            drivers.append(driver)
        }
        for driver in drivers { await driver.value }
        deadlineWatch.timer?.task.cancel()
        engine.shutdown()
        pathForwarder?.cancel()
        pathConsumer?.cancel()
        for follower in hostFollowers.values { follower.relay.cancel() }
        hostFollowers = [:]
    }

    // MARK: path

    func activate() {
        guard pathConsumer == nil, let relay = pathRelay, !isShutDown else { return }
        pathConsumer = Task { [weak self] in
            for await path in relay {
                guard let self else { return }
                await self.apply(path)
            }
        }
    }

    private func apply(_ newPath: NetworkPath) {
        let previous = pathWaiters.path
        if previous.map(PathKey.init) != PathKey(newPath) {
            configuration.logger.info("path changed", metadata: [
                "status": newPath.status.rawValue, "interface": newPath.primaryInterface?.name ?? "-",
                "source": newPath.primaryRoute?.sourceAddress ?? "-"])
        }
        post(pathWaiters.update(newPath, listeners: listeners()))
        exchangesFollowPaths()
    }

    /// The downloads whose drivers hear about paths, in creation order.
    private func listeners() -> [PathWaiters.Listener] {
        creationOrder.compactMap { id -> PathWaiters.Listener? in
            guard let entry = entries[id], entry.mailbox != nil else { return nil }
            return PathWaiters.Listener(id: id, access: PathAccess(entry.download.options),
                                        host: entry.followsHost ? entry.host : nil,
                                        transfer: entry.transfer.map { ($0.pathKey, $0.pinnedInterface) })
        }
    }

    private func post(_ notices: [PathWaiters.Notice]) {
        for notice in notices {
            var facts = notice.facts
            if let entry = entries[notice.id], var transfer = entry.transfer, let current = transfer.multipath {
                // A transfer over several paths follows the change itself: the connections on a
                // path that went away move to the others at once, a path that came is used. It is
                // restarted only when no path is left.
                let host = entry.followsHost ? entry.host : nil
                let options = entry.download.options
                let paths = MultipathPolicy.paths(for: pathWaiters.gatingPath(host: host), pinnedInterface: nil,
                                                  access: PathAccess(options), interfaces: options.interfaces,
                                                  isMultipath: true)
                if !paths.isEmpty, facts.isUsable {
                    if paths != current {
                        engine.updatePaths(transfer.id, paths)
                        configuration.logger.info("paths changed", metadata: [
                            "id": notice.id.uuidString, "paths": paths.map(\.description).joined(separator: " ")])
                    }
                    transfer.multipath = paths
                    transfer.pathKey = PathKey(pathWaiters.gatingPath(host: host))
                    entries[notice.id]?.transfer = transfer
                    facts.invalidatesTransfer = false
                }
            }
            entries[notice.id]?.mailbox?.yield(.machine(.pathChanged(facts, rank: notice.rank)))
        }
    }

    /// Where a download's traffic goes first: the proxy libcurl will use for it, else its server.
    func gateHost(for url: URL, proxy explicit: String?) -> String? {
        guard hostPathSource != nil else { return nil }
        if let proxy = ProxyEnvironment.proxy(for: url, explicit: explicit) {
            return URL(string: proxy.contains("://") ? proxy : "http://" + proxy)?.host
        }
        return url.host
    }

    /// A driver for a download to `host` starts: its path is followed while any driver needs it.
    func followHost(of id: UUID) {
        guard hostPathSource != nil, let host = entries[id]?.host, entries[id]?.followsHost == false else { return }
        entries[id]?.followsHost = true
        retainHostPaths(host)
    }

    /// Follows `host`'s path while anyone (a download's driver, an exchange) holds it; each
    /// `retainHostPaths` is balanced by one `releaseHostPaths`.
    func retainHostPaths(_ host: String) {
        guard let source = hostPathSource else { return }
        if let follower = hostFollowers[host] {
            hostFollowers[host] = (follower.count + 1, follower.relay)
            return
        }
        let stream = source(host)
        let relay = Task { [weak self] in
            for await hostPath in stream {
                guard let self else { return }
                await self.apply(hostPath, for: host)
            }
            guard !Task.isCancelled else { return }
            await self?.hostPathsEnded(host)
        }
        hostFollowers[host] = (1, relay)
    }

    /// A driver ended: the last one for a host stops following it.
    func stopFollowingHost(of id: UUID) {
        guard let host = entries[id]?.host, entries[id]?.followsHost == true else { return }
        entries[id]?.followsHost = false
        releaseHostPaths(host)
    }

    /// The last holder of `host` stops following it.
    func releaseHostPaths(_ host: String) {
        guard let follower = hostFollowers[host] else { return }
        if follower.count > 1 {
            hostFollowers[host] = (follower.count - 1, follower.relay)
        } else {
            follower.relay.cancel()
            hostFollowers[host] = nil
            pathWaiters.forget(host)
        }
    }

    private func apply(_ hostPath: HostPath, for host: String) {
        guard hostFollowers[host] != nil else { return }
        if pathWaiters.hostPaths[host]?.path.map(PathKey.init) != hostPath.path.map(PathKey.init) {
            configuration.logger.info("path to host changed", metadata: [
                "host": host, "status": hostPath.path?.status.rawValue ?? "unresolved",
                "interface": hostPath.path?.primaryInterface?.name ?? "-", "addresses": hostPath.addresses.joined(separator: " ")])
        }
        post(pathWaiters.update(hostPath, for: host, listeners: listeners()))
        exchangesFollowPaths()
    }

    private func hostPathsEnded(_ host: String) {
        guard hostFollowers[host] != nil else { return }
        post(pathWaiters.unfollow(host, listeners: listeners()))
        exchangesFollowPaths()
    }

    // MARK: scheduling

    func schedule() {
        guard !isShutDown else { return }
        var reserved = spaceReservations()
        let admitted = scheduler.admit { id in
            guard let entry = entries[id] else { return false }
            return entry.driver == nil && entry.intent == .run && admitsForPower(id) && admitsForSpace(id, reserved: &reserved)
        }
        for id in admitted { startDriver(id) }
        // A foreground download finding every slot taken: the victims checkpoint and end like a
        // pause, and since their intent stays `.run` they are queued again (`end`), their slot
        // going to the foreground one.
        for id in scheduler.preempt() {
            guard let mailbox = entries[id]?.mailbox else { continue }
            configuration.logger.info("download gives its slot to a foreground one", metadata: ["id": id.uuidString])
            mailbox.yield(.machine(.pause))
        }
        checkQueuedDeadlines()
    }

    var settings: TransferSettings {
        TransferSettings(connectTimeout: configuration.connectTimeout, stallTimeout: configuration.stallTimeout,
                         stallBytesPerSecond: configuration.stallBytesPerSecond,
                         maximumRedirects: configuration.maximumRedirects, keepAliveIdle: configuration.keepAliveIdle,
                         receiveBufferSize: 128 << 10, userAgent: configuration.userAgent,
                         certificateAuthorityFile: configuration.certificateAuthorityFile?.path,
                         additionalHeaders: configuration.additionalHeaders,
                         maximumBytesPerSecond: configuration.maximumBytesPerSecond,
                         verifiesCertificates: configuration.verifiesCertificates, proxy: configuration.proxy,
                         stallSuspicion: configuration.minimumStallSuspicion,
                         answerSuspicion: configuration.minimumStallSuspicion,
                         maximumConnectionsPerHost: max(1, min(configuration.maximumConnectionsPerHost,
                                                               Self.maximumConnectionsPerHostLimit)))
    }

    /// Opens (creating it 0700) and checks the state directory once; everything in it is then
    /// reached relative to that descriptor.
    func stateDirectory() throws -> CheckedDirectory {
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
}

/// Runs `body` with an agent and shuts it down afterwards, whatever happens.
public func withDownloadAgent<Result: Sendable>(
    configuration: DownloadAgent.Configuration,
    _ body: (DownloadAgent) async throws -> Result
) async throws -> Result {
    try await runThenShutDown(try DownloadAgent(configuration: configuration), body)
}

/// Runs `body` with an agent driven by a started `PathMonitor` (its primary path and the route to
/// each download's server) and shuts it down afterwards, whatever happens.
public func withDownloadAgent<Result: Sendable>(
    configuration: DownloadAgent.Configuration,
    monitor: PathMonitor,
    _ body: (DownloadAgent) async throws -> Result
) async throws -> Result {
    try await runThenShutDown(try DownloadAgent(configuration: configuration, monitor: monitor), body)
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
