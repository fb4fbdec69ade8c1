import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// Watches rtnetlink and publishes the current `NetworkPath`, like Network.framework's `NWPathMonitor`.
///
/// `start()` returns once the first path is known, so `currentPath` is valid right after it.
/// Updates arrive through `paths` (an `AsyncStream` that yields the current path first) and
/// through `pathUpdateHandler`. An update is published only when the path really changed.
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
        let engine = try MonitorEngine(configuration: configuration) { [weak self] path in
            self?.publish(path)
        }
        try engine.start()
        let cancelled = state.withLock { state -> Bool in
            if !state.isCancelled { state.engine = engine }
            return state.isCancelled
        }
        if cancelled { engine.cancel() }
    }

    /// Stops listening and finishes every stream.
    public func cancel() {
        let (engine, continuations) = state.withLock { state in
            state.isCancelled = true
            defer { state.continuations = [:]; state.engine = nil }
            return (state.engine, Array(state.continuations.values))
        }
        engine?.cancel()
        for continuation in continuations { continuation.finish() }
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
