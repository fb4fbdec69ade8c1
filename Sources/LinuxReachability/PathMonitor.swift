import Dispatch
import FoundationEssentials
import Synchronization

/// Watches rtnetlink and publishes the current `NetworkPath`, like Network.framework's `NWPathMonitor`.
///
/// `start()` returns once the first path is known, so `currentPath` is valid right after it.
/// Updates arrive through `paths` (an `AsyncStream` that yields the current path first) and
/// through `pathUpdateHandler`. An update is published only when the path really changed.
///
/// `paths` is the primary path: the default route's. `paths(to:)` follows the route to one host,
/// which a server on the local network, a link-local address or this host can have without any
/// default route.
public final class PathMonitor: Sendable {
    /// What to watch and how to classify it.
    public struct Configuration: Sendable {
        /// A named network namespace (`ip netns`) to watch instead of the current one.
        public var networkNamespace: String?
        /// User overrides, strongest classification evidence.
        public var classificationOverrides: [ClassificationOverride]
        /// Netlink receive buffer; large enough to absorb route storms.
        public var receiveBufferSize: Int
        /// How long the kernel must stay quiet after an overflow before re-dumping.
        public var quietPeriod: Duration
        /// Destinations for the per-family RTM_GETROUTE lookups (no packet is sent to them).
        public var probeIPv4: String
        /// IPv6 lookup destination.
        public var probeIPv6: String
        /// Where diagnostics go; silent by default.
        public var logger: Logger
        /// Changes closer together than this are resolved together (route storms); an isolated
        /// change is always resolved at once.
        public var minimumEvaluationInterval: Duration
        /// List every interface in `NetworkPath.interfaces` (and publish when any of them changes),
        /// not only the usable ones. Off by default: on a host that creates and deletes container
        /// interfaces all day, every path would otherwise carry, and change with, all of them.
        public var includesAllInterfaces: Bool
        /// An HTTP check of the Internet beyond the route (`NetworkPath.connectivity`); nil, the
        /// default, sends nothing and reports `unknown` (or NetworkManager's answer, see `systemBus`).
        public var connectivityCheck: ConnectivityCheck?
        /// Where to ask NetworkManager and ModemManager what they know (metered links, device
        /// types, their connectivity check, roaming).
        public var systemBus: SystemBus

        /// The D-Bus system bus the monitor reads NetworkManager's and ModemManager's facts from.
        /// Their facts are used only when the service runs in the monitored network namespace.
        public enum SystemBus: Sendable, Hashable {
            /// `$DBUS_SYSTEM_BUS_ADDRESS`, else `/run/dbus/system_bus_socket` when that socket
            /// exists; without one nothing is loaded or connected. The default.
            case automatic
            /// A D-Bus address, e.g. `unix:path=/tmp/test-bus/socket` (a private bus in tests).
            case address(String)
            /// Kernel facts only.
            case disabled
        }

        /// Creates a configuration.
        public init(networkNamespace: String? = nil, classificationOverrides: [ClassificationOverride] = [],
                    receiveBufferSize: Int = 8 << 20, quietPeriod: Duration = .milliseconds(50),
                    probeIPv4: String = "8.8.8.8", probeIPv6: String = "2001:4860:4860::8888",
                    logger: Logger = .silent, minimumEvaluationInterval: Duration = .milliseconds(1),
                    includesAllInterfaces: Bool = false, connectivityCheck: ConnectivityCheck? = nil,
                    systemBus: SystemBus = .automatic) {
            self.networkNamespace = networkNamespace
            self.classificationOverrides = classificationOverrides
            self.receiveBufferSize = receiveBufferSize
            self.quietPeriod = quietPeriod
            self.probeIPv4 = probeIPv4
            self.probeIPv6 = probeIPv6
            self.logger = logger
            self.minimumEvaluationInterval = minimumEvaluationInterval
            self.includesAllInterfaces = includesAllInterfaces
            self.connectivityCheck = connectivityCheck
            self.systemBus = systemBus
        }
    }

    let configuration: Configuration
    let state = Mutex(State())

    struct State {
        var current: NetworkPath?
        var handler: (@Sendable (NetworkPath) -> Void)?
        var continuations: [UUID: AsyncStream<NetworkPath>.Continuation] = [:]
        var engine: MonitorEngine?
        var isCancelled = false
        /// Streams of `paths(to:)` by host key, and the last path published for each host.
        var hostContinuations: [String: [UUID: AsyncStream<HostPath>.Continuation]] = [:]
        var hostPaths: [String: HostPath] = [:]
    }

    /// Creates a monitor; nothing happens until `start()`.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// The latest path; `.unsatisfied(.noInterfaceUp)` before `start()`.
    public var currentPath: NetworkPath {
        state.withLock { $0.current } ?? .unsatisfied(.noInterfaceUp)
    }

    /// Called on the monitor's thread with every new path; keep it short or hop to your own queue.
    public var pathUpdateHandler: (@Sendable (NetworkPath) -> Void)? {
        get { state.withLock { $0.handler } }
        set { state.withLock { $0.handler = newValue } }
    }

    /// A stream of paths that yields the current one first and ends on `cancel()`.
    public var paths: AsyncStream<NetworkPath> {
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self, bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        let finished = state.withLock { state -> Bool in
            if state.isCancelled { return true }
            if let current = state.current { continuation.yield(current) }
            state.continuations[id] = continuation
            return false
        }
        if finished { continuation.finish(); return stream }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Opens the netlink sockets, loads links and addresses, resolves the first path and starts
    /// listening. Throws `ReachabilityError` when netlink or the namespace cannot be opened.
    public func start() throws {
        let alreadyStarted = state.withLock { $0.engine != nil || $0.isCancelled }
        guard !alreadyStarted else { return }
        let engine = try MonitorEngine(configuration: configuration, publish: { [weak self] path in
            self?.publish(path)
        }, publishHost: { [weak self] key, host in
            self?.publish(host, for: key)
        })
        try engine.start()
        let cancelled = state.withLock { state -> Bool in
            if !state.isCancelled {
                state.engine = engine
                // Hosts asked for before the start: one subscription per stream, as unwatch counts.
                for (key, streams) in state.hostContinuations {
                    for _ in streams { engine.watch(host: key) }
                }
            }
            return state.isCancelled
        }
        if cancelled { engine.cancel() }
    }

    /// The path to `host` (a name, or an IP literal such as `10.77.0.1` or `fe80::1%eth0`), as
    /// `SCNetworkReachabilityCreateWithName` reported it: the kernel's route to the host's address
    /// (`RTM_GETROUTE`, what `ip route get` prints), over whatever interface that is, with or
    /// without a default route.
    ///
    /// Yields the latest answer first when the host is already followed, then every change: the
    /// route to one of its addresses, the addresses a name resolves to (again after each change
    /// of the primary path; a failed lookup is retried from 1 s to every 30 s), the interface's
    /// state, the connectivity check's answer where it speaks for the host. A name yields nothing
    /// until its first answer; text that is neither a name nor an IP literal yields one path with
    /// `resolutionFailure` set. A change elsewhere (the default route moving while the host is on
    /// the local network) is not an update. Ends on `cancel()`.
    ///
    /// Cost: one route lookup per address (at most 8 per host) after each routing, link or address
    /// change that can matter, nothing per packet; the monitor's kernel-side filter passes route
    /// changes that cover a followed address, and drops the rest as before.
    public func paths(to host: String) -> AsyncStream<HostPath> {
        let (stream, continuation) = AsyncStream.makeStream(of: HostPath.self, bufferingPolicy: .bufferingNewest(16))
        guard let key = HostWatches.key(for: host) else {
            continuation.yield(HostPath(host: host, addresses: [], resolutionFailure: "not a host name or an IP address", path: nil))
            continuation.finish()
            return stream
        }
        let id = UUID()
        let finished = state.withLock { state -> Bool in
            if state.isCancelled { return true }
            if let current = state.hostPaths[key] { continuation.yield(current) }
            state.hostContinuations[key, default: [:]][id] = continuation
            // Under the lock, so start() registers it exactly once either way.
            state.engine?.watch(host: key)
            return false
        }
        if finished { continuation.finish(); return stream }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in
                guard state.hostContinuations[key]?.removeValue(forKey: id) != nil else { return }
                if state.hostContinuations[key]?.isEmpty == true {
                    state.hostContinuations[key] = nil
                    state.hostPaths[key] = nil
                }
                state.engine?.unwatch(host: key)
            }
        }
        return stream
    }

    /// The latest path to `host` while a `paths(to:)` stream follows it; nil otherwise, or before
    /// its first answer.
    public func currentPath(to host: String) -> HostPath? {
        guard let key = HostWatches.key(for: host) else { return nil }
        return state.withLock { $0.hostPaths[key] }
    }

    /// Stops listening and finishes every stream.
    public func cancel() {
        let (engine, continuations, hostContinuations) = state.withLock { state in
            state.isCancelled = true
            defer { state.continuations = [:]; state.engine = nil; state.hostContinuations = [:] }
            return (state.engine, Array(state.continuations.values), state.hostContinuations.values.flatMap(\.values))
        }
        engine?.cancel()
        for continuation in continuations { continuation.finish() }
        for continuation in hostContinuations { continuation.finish() }
    }

    func publish(_ host: HostPath, for key: String) {
        let continuations = state.withLock { state -> [AsyncStream<HostPath>.Continuation] in
            guard !state.isCancelled, let streams = state.hostContinuations[key] else { return [] }
            guard state.hostPaths[key] != host else { return [] }
            state.hostPaths[key] = host
            return Array(streams.values)
        }
        for continuation in continuations { continuation.yield(host) }
    }

    func publish(_ path: NetworkPath) {
        let (handler, continuations) = state.withLock { state -> ((@Sendable (NetworkPath) -> Void)?, [AsyncStream<NetworkPath>.Continuation]) in
            guard !state.isCancelled else { return (nil, []) }
            let isNew = state.current != path
            state.current = path  // fresher connectivity evidence even when nothing else changed
            guard isNew else { return (nil, []) }
            return (state.handler, Array(state.continuations.values))
        }
        for continuation in continuations { continuation.yield(path) }
        handler?(path)
    }

    deinit { state.withLock { $0.engine }?.cancel() }
}

extension PathMonitor {
    /// Counters since `start()`: datagrams, messages, overflows, dumps, evaluations.
    public var statistics: MonitorStatistics {
        state.withLock { $0.engine }?.statistics ?? MonitorStatistics()
    }
}
