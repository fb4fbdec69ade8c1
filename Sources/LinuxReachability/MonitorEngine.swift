import Dispatch
import Foundation
import Glibc
import Synchronization

/// What to do with rtnetlink traffic around receive-buffer overflows.
///
/// After ENOBUFS the kernel has dropped messages, so what is still queued describes a state we
/// can no longer reconstruct. Queued events are discarded until the kernel has been quiet for a
/// while, then links and addresses are dumped afresh; stale events are never applied on top.
struct ResyncStateMachine: Sendable, Equatable {
    enum State: Sendable, Equatable {
        case live
        case overflowed(sawTraffic: Bool)
    }

    enum Action: Sendable, Equatable {
        case apply
        case discard
        case armQuietTimer
        case redump
        case nothing
    }

    private(set) var state = State.live

    var isLive: Bool { state == .live }

    /// The socket reported ENOBUFS (or any receive failure).
    mutating func overflowed() -> Action {
        state = .overflowed(sawTraffic: false)
        return .armQuietTimer
    }

    /// Messages were read from the event socket.
    mutating func messagesArrived() -> Action {
        guard case .overflowed = state else { return .apply }
        state = .overflowed(sawTraffic: true)
        return .discard
    }

    /// The quiet timer fired; `drainedMore` is whether a last drain found anything.
    mutating func quietTimerFired(drainedMore: Bool) -> Action {
        guard case .overflowed(let sawTraffic) = state else { return .nothing }
        if sawTraffic || drainedMore {
            state = .overflowed(sawTraffic: false)
            return .armQuietTimer
        }
        state = .live
        return .redump
    }
}

/// The netlink side of `PathMonitor`: two sockets, a serial queue, no polling.
///
/// The event socket is subscribed to link, address, route and rule groups and is read only when
/// the kernel speaks (a dispatch read source). The query socket serves dumps and the per-family
/// RTM_GETROUTE lookups that resolve the path after each drained batch.
final class MonitorEngine: Sendable {
    private let configuration: PathMonitor.Configuration
    private let publish: @Sendable (NetworkPath) -> Void
    private let queue = DispatchQueue(label: "reachability.path-monitor")
    private let events: NetlinkSocket
    private let query: NetlinkSocket
    private let sysfs: SysfsReader?
    private let classifier: InterfaceClassifier
    private let probes: [(AddressFamily, [UInt8])]
    private let state = Mutex(EngineState())

    private struct EngineState: ~Copyable {
        var table = LinkTable()
        var classifications: [Int32: (name: String, classification: Classification)] = [:]
        /// Interfaces derived from `table` at `interfacesGeneration`; route storms reuse them.
        var interfaces: [NetworkInterface] = []
        var interfacesGeneration = -1
        var resync = ResyncStateMachine()
        var readSource: (any DispatchSourceRead)?
        var quietTimer: (any DispatchSourceTimer)?
        /// A deferred evaluation while a storm is coalesced.
        var evaluationTimer: (any DispatchSourceTimer)?
        var lastEvaluation: ContinuousClock.Instant?
        var isCancelled = false
        var statistics = MonitorStatistics()
    }

    /// Datagrams read per handler call before resolving the path, so storms still yield updates.
    private static let datagramsPerBatch = 512

    init(configuration: PathMonitor.Configuration, publish: @escaping @Sendable (NetworkPath) -> Void) throws {
        self.configuration = configuration
        self.publish = publish
        classifier = InterfaceClassifier(overrides: configuration.classificationOverrides)
        guard let v4 = IPAddress.parse(configuration.probeIPv4), v4.count == 4,
              let v6 = IPAddress.parse(configuration.probeIPv6), v6.count == 16 else {
            throw ReachabilityError(.invalidConfiguration, "probe destinations must be an IPv4 and an IPv6 address")
        }
        probes = [(.ipv4, v4), (.ipv6, v6)]
        let bufferSize = configuration.receiveBufferSize
        let logger = configuration.logger
        if let namespace = configuration.networkNamespace {
            let opened = try NetworkNamespace.run(in: namespace) { () throws -> (NetlinkSocket, NetlinkSocket, SysfsReader?) in
                let events = try NetlinkSocket(receiveBufferSize: bufferSize, groups: NetlinkSocket.monitorGroups)
                let query = try NetlinkSocket(receiveBufferSize: 1 << 20, groups: [])
                try query.useBlockingReads(timeoutMilliseconds: 2000)
                do {
                    return (events, query, SysfsReader(rootDescriptor: try NetworkNamespace.openPrivateSysfs()))
                } catch {
                    logger.warning("classifying from netlink facts only", metadata: ["namespace": namespace, "error": "\(error)"])
                    return (events, query, nil)
                }
            }
            (events, query, sysfs) = opened
        } else {
            events = try NetlinkSocket(receiveBufferSize: bufferSize, groups: NetlinkSocket.monitorGroups)
            query = try NetlinkSocket(receiveBufferSize: 1 << 20, groups: [])
            try query.useBlockingReads(timeoutMilliseconds: 2000)
            sysfs = SysfsReader.host()
        }
        logger.debug("netlink sockets open", metadata: ["rcvbuf": "\(events.receiveBufferSize)"])
    }

    var statistics: MonitorStatistics { state.withLock { $0.statistics } }

    /// Loads links and addresses, publishes the first path, then starts listening.
    func start() throws {
        try queue.sync {
            try resynchronise()
            // Sources are built inside the lock so they never leave its isolation region.
            state.withLock { [events, query, queue] state in
                let source = DispatchSource.makeReadSource(fileDescriptor: events.fileDescriptor, queue: queue)
                source.setEventHandler { [weak self] in self?.drain() }
                // Sockets close only after dispatch has let go of the descriptor.
                source.setCancelHandler {
                    events.close()
                    query.close()
                }
                source.resume()
                state.readSource = source
            }
        }
    }

    func cancel() {
        // Cancelling only schedules the cancel handlers on `queue`, so doing it under the lock is safe.
        state.withLock { state in
            state.isCancelled = true
            state.quietTimer?.cancel()
            state.evaluationTimer?.cancel()
            state.readSource?.cancel()
            state.quietTimer = nil
            state.evaluationTimer = nil
            state.readSource = nil
        }
    }

    // MARK: Event handling (on `queue`)

    private func drain() {
        var dirty = false
        var overflow = false
        for _ in 0..<Self.datagramsPerBatch {
            let result: NetlinkSocket.Receive
            let messages: [ParsedMessage]?
            do {
                (result, messages) = try events.receive { RTNetlink.parse($0) }
            } catch {
                configuration.logger.error("event socket failed; resynchronising", metadata: ["error": "\(error)"])
                overflow = true
                break
            }
            if result == .empty { break }
            if result == .overflow {
                overflow = true
                continue
            }
            dirty = state.withLock { state -> Bool in
                state.statistics.datagrams += 1
                guard state.resync.messagesArrived() == .apply else { return false }
                var changed = false
                for parsed in messages ?? [] {
                    state.statistics.messages += 1
                    changed = state.table.apply(parsed.message) || changed
                }
                return changed
            } || dirty
        }
        if overflow {
            configuration.logger.warning("netlink receive buffer overflowed; waiting for quiet to re-dump")
            state.withLock {
                $0.statistics.overflows += 1
                _ = $0.resync.overflowed()
            }
            armQuietTimer()
        } else if dirty, state.withLock({ $0.resync.isLive }) {
            evaluateSoon()
        }
    }

    /// Evaluates at once when the last evaluation is at least `minimumEvaluationInterval` old;
    /// otherwise once when that interval has passed. An isolated change is resolved immediately,
    /// while a storm of route messages (one datagram each) costs at most one pair of lookups per
    /// interval instead of one per datagram.
    private func evaluateSoon() {
        let interval = configuration.minimumEvaluationInterval
        let delay = state.withLock { state -> Duration? in
            if state.evaluationTimer != nil { return nil }
            guard let last = state.lastEvaluation else { return .zero }
            return max(.zero, interval - (ContinuousClock.now - last))
        }
        guard let delay else { return }
        if delay == .zero {
            evaluateAndPublish()
            return
        }
        state.withLock { [queue] state in
            guard !state.isCancelled else { return }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + .nanoseconds(Int(delay / .nanoseconds(1))))
            timer.setEventHandler { [weak self] in
                guard let self else { return }
                let live = self.state.withLock { state -> Bool in
                    state.evaluationTimer?.cancel()
                    state.evaluationTimer = nil
                    return state.resync.isLive
                }
                if live { self.evaluateAndPublish() }
            }
            timer.resume()
            state.evaluationTimer = timer
        }
    }

    private func armQuietTimer() {
        let delay = configuration.quietPeriod.components
        let nanoseconds = Int(delay.seconds) * 1_000_000_000 + Int(delay.attoseconds / 1_000_000_000)
        state.withLock { [queue] state in
            state.quietTimer?.cancel()
            state.quietTimer = nil
            guard !state.isCancelled else { return }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + .nanoseconds(max(nanoseconds, 1_000_000)))
            timer.setEventHandler { [weak self] in self?.quietTimerFired() }
            timer.resume()
            state.quietTimer = timer
        }
    }

    private func quietTimerFired() {
        // Drain here too: data may be queued that the read source has not reported yet.
        var drainedMore = false
        while let (result, _) = try? events.receive({ _ in () }), result != .empty {
            drainedMore = true
        }
        let action = state.withLock { $0.resync.quietTimerFired(drainedMore: drainedMore) }
        switch action {
        case .armQuietTimer:
            armQuietTimer()
        case .redump:
            do {
                try resynchronise()
            } catch {
                configuration.logger.error("re-dump failed; retrying", metadata: ["error": "\(error)"])
                state.withLock { _ = $0.resync.overflowed() }
                armQuietTimer()
            }
        default:
            break
        }
    }

    /// Replaces links and addresses with a fresh dump (retried while the kernel marks it
    /// interrupted), then publishes the path.
    private func resynchronise() throws {
        var table = LinkTable()
        for attempt in 1...8 {
            table = LinkTable()
            var consistent = true
            for type in [RTNetlink.getLink, RTNetlink.getAddr] {
                let sequence = query.nextSequence()
                let replies = try query.exchange(RTNetlink.dumpRequest(type: type, sequence: sequence),
                                                 sequence: sequence, isDump: true)
                for reply in replies {
                    if reply.isDumpInterrupted { consistent = false }
                    if case .error(let code) = reply.message, code != 0 {
                        if code == -ENOBUFS || code == -EBUSY || code == -EINTR { consistent = false; continue }
                        throw ReachabilityError(.netlink, "rtnetlink dump failed: \(String(cString: strerror(-code)))")
                    }
                    _ = table.apply(reply.message)
                }
            }
            if consistent { break }
            configuration.logger.debug("dump interrupted by concurrent changes; retrying", metadata: ["attempt": "\(attempt)"])
        }
        state.withLock {
            $0.table = table
            $0.statistics.dumps += 1
        }
        evaluateAndPublish()
    }

    private func evaluateAndPublish() {
        let (table, interfaces) = currentInterfaces()
        var lookups: [(AddressFamily, LookupResult)] = []
        for (family, destination) in probes {
            lookups.append((family, lookup(destination)))
        }
        let path = PathEvaluator.evaluate(table: table, interfaces: interfaces, lookups: lookups)
        let cancelled = state.withLock { state -> Bool in
            state.statistics.evaluations += 1
            state.lastEvaluation = .now
            return state.isCancelled
        }
        if !cancelled { publish(path) }
    }

    /// The table and its interfaces, reclassifying only when links or addresses changed: during
    /// a route storm every evaluation reuses the same interfaces.
    private func currentInterfaces() -> (LinkTable, [NetworkInterface]) {
        let (table, known, cached) = state.withLock { state in
            (state.table, state.classifications, state.interfacesGeneration == state.table.generation ? state.interfaces : nil)
        }
        if let cached { return (table, cached) }
        // Classify links seen for the first time or renamed; forget deleted ones.
        var updated = known.filter { table.links[$0.key] != nil }
        for (index, link) in table.links where updated[index]?.name != link.name {
            let facts = sysfs?.facts(for: link)
                ?? InterfaceFacts(name: link.name, hardwareType: link.hardwareType, linkKind: link.kind, isLoopback: link.isLoopback)
            updated[index] = (link.name, classifier.classify(facts))
        }
        let interfaces = PathEvaluator.interfaces(table: table, classifications: updated.mapValues(\.classification))
        state.withLock { state in
            state.classifications = updated
            state.interfaces = interfaces
            state.interfacesGeneration = table.generation
        }
        return (table, interfaces)
    }

    private func lookup(_ destination: [UInt8]) -> LookupResult {
        let sequence = query.nextSequence()
        do {
            let replies = try query.exchange(RTNetlink.routeLookup(destination: destination, sequence: sequence),
                                             sequence: sequence, isDump: false, routeReplies: true)
            for reply in replies {
                switch reply.message {
                case .route(let route): return .route(route)
                case .error(let code) where code != 0: return .failed(code)
                default: continue
                }
            }
            return .failed(-ENETUNREACH)
        } catch {
            configuration.logger.error("route lookup failed", metadata: ["error": "\(error)"])
            return .failed(-EIO)
        }
    }
}

/// Counters for diagnostics and benchmarks.
public struct MonitorStatistics: Sendable, Hashable {
    /// Datagrams read from the event socket.
    public var datagrams = 0
    /// Netlink messages parsed from them.
    public var messages = 0
    /// Receive-buffer overflows (ENOBUFS).
    public var overflows = 0
    /// Full dumps of links and addresses.
    public var dumps = 0
    /// Path evaluations (each two RTM_GETROUTE lookups).
    public var evaluations = 0
}
