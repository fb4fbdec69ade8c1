import FoundationEssentials
import Glibc
import Synchronization
import ReachabilityBase
import LinuxSystem

// Longer than 400 lines on purpose: the monitor thread's loop and every path it takes share one
// `Mutex<EngineState>` that stays private to this file; splitting it would hand that state to
// other files. The pure parts live apart (ResyncStateMachine, PathEvaluator, HostWatches,
// ConnectivityScheduler), tested without sockets.

/// The netlink side of `PathMonitor`: two sockets and one thread that sleeps in poll(2) until the
/// kernel speaks (no polling loop, no timer ticks).
///
/// The event socket is subscribed to link, address, route and rule groups. The query socket
/// serves dumps and the per-family RTM_GETROUTE lookups that resolve the path. A dedicated thread
/// instead of a dispatch read source: a route storm delivers one datagram per route, and
/// dispatch's epoll re-arm plus thread hand-off per datagram spent about 60% of the monitor's CPU
/// in context switches (measured with perf during a 400k-change storm).
///
/// Work is proportional to what matters: a route change is resolved only when its prefix covers a
/// lookup destination, a link or address change only when it changes a link's readiness or what a
/// usable link shows, and classification runs once per new or renamed link that is listed.
final class MonitorEngine: Sendable {
    private let configuration: PathMonitor.Configuration
    private let publish: @Sendable (NetworkPath) -> Void
    private let publishHost: @Sendable (String, HostPath) -> Void
    /// An eventfd that `cancel()` (and a finished lookup, a check to start) writes to, waking
    /// the thread out of poll(2).
    private let wake: WakeSignal
    private let events: NetlinkSocket
    private let query: NetlinkSocket
    private let sysfs: SysfsReader?
    private let classifier: InterfaceClassifier
    private let probes: [(AddressFamily, [UInt8])]
    /// The lookup destinations as prefixes, to test route changes against.
    private let probePrefixes: [RoutePrefix]
    private let state: Mutex<EngineState>
    /// The monitored namespace, joined by the monitor thread when it must open probe sockets there.
    private let namespaceDescriptor: FileDescriptor?
    /// NetworkManager's and ModemManager's facts over D-Bus; nil without a system bus. Used by
    /// `start()` on the caller's thread, then by the monitor thread only (the lock is never
    /// contended; it lets the engine stay `Sendable`).
    private let systemBus: Mutex<SystemFactsClient?>

    private struct EngineState: ~Copyable {
        var table = LinkTable()
        /// Classifications of listed links, with the facts they were made from.
        var classifications: [Int32: (link: LinkInfo, evidence: ManagerEvidence?, classification: Classification)] = [:]
        /// Interfaces derived from `table` at `interfacesGeneration`; route storms reuse them.
        var interfaces: [NetworkInterface] = []
        var interfacesGeneration = -1
        /// A change since the last evaluation that the path may depend on.
        var isDirty = false
        /// Evaluations that may run at once before storm coalescing starts: a few in a row are free
        /// (a fixed "one per interval" held back the decisive message of a burst, such as a link
        /// going down right after another change); a storm costs one per interval in the long run.
        var budget: TokenBucket
        var resync = ResyncStateMachine()
        /// When to re-dump if the kernel stays quiet after an overflow.
        var quietDeadline: ContinuousClock.Instant?
        /// A deferred evaluation while a storm is coalesced.
        var evaluationDeadline: ContinuousClock.Instant?
        var isRunning = false
        var isCancelled = false
        var statistics = MonitorStatistics()
        /// When and what to check beyond the route; nil without a configured check.
        var scheduler: ConnectivityScheduler?
        /// The last evaluated path, before connectivity is merged in.
        var lastPath: NetworkPath?
        /// Probe starts and cancels for the monitor thread to carry out.
        var probeActions: [ConnectivityScheduler.Action] = []
        /// Hosts whose routes are followed (`PathMonitor.paths(to:)`).
        var hosts = HostWatches()
        /// Their addresses as prefixes, to test route changes against; the event filter's extra
        /// destinations, replaced by the monitor thread when `isFilterStale`.
        var hostPrefixes: [RoutePrefix] = []
        var isFilterStale = false
        /// A change only the hosts' routes may depend on (a route covering one of their addresses,
        /// a new host, a resolver's answer).
        var isHostsDirty = false
        /// Resolver threads' answers, by host key.
        var resolutions: [String: ConnectivityProbe.Resolution] = [:]
        /// Each host's route path before connectivity is merged in, and what was last published.
        var hostPaths: [String: NetworkPath] = [:]
        var publishedHosts: [String: HostPath] = [:]
        /// Classifications of links a host path leaves by that are not listed (loopback, a link
        /// without a usable address), with the facts they were made from.
        var unlistedClassifications: [Int32: (link: LinkInfo, evidence: ManagerEvidence?, classification: Classification)] = [:]
        /// What NetworkManager and ModemManager said, and when it last changed.
        var systemFacts: SystemFacts
        var systemFactsTime = Date()
    }

    /// Datagrams read per drain before resolving the path and checking deadlines.
    private static let datagramsPerBatch = 512

    // Over 60 lines on purpose: an initialiser sets every stored constant itself, sockets inside the namespace.
    init(configuration: PathMonitor.Configuration, publish: @escaping @Sendable (NetworkPath) -> Void,
         publishHost: @escaping @Sendable (String, HostPath) -> Void = { _, _ in }) throws {
        self.configuration = configuration
        self.publish = publish
        self.publishHost = publishHost
        let client: SystemFactsClient?
        let facts: SystemFacts
        switch SystemFactsClient.address(for: configuration.systemBus) {
        case .success(let address):
            // The namespace whose interfaces NetworkManager's devices must be: the named one, or
            // this thread's (the netlink sockets below are opened on it).
            let namespacePath = configuration.networkNamespace.map { "/run/netns/\($0)" } ?? "/proc/thread-self/ns/net"
            client = SystemFactsClient(settings: .init(
                address: address, monitoredNamespace: try? SystemFactsClient.namespaceIdentity(at: namespacePath).get(),
                isOwnNamespace: configuration.networkNamespace == nil, logger: configuration.logger))
            facts = client?.facts ?? SystemFacts()
        case .failure(let unavailable):
            client = nil
            facts = .none(.noSystemBus, unavailable.detail)
        }
        systemBus = Mutex(client)
        state = Mutex(EngineState(budget: TokenBucket(burst: 4, interval: configuration.minimumEvaluationInterval),
                                  scheduler: configuration.connectivityCheck.map(ConnectivityScheduler.init),
                                  systemFacts: facts))
        classifier = InterfaceClassifier(overrides: configuration.classificationOverrides)
        guard let v4 = IPAddress.parse(configuration.probeIPv4), v4.count == 4,
              let v6 = IPAddress.parse(configuration.probeIPv6), v6.count == 16 else {
            throw ReachabilityError(.invalidConfiguration, "probe destinations must be an IPv4 and an IPv6 address")
        }
        probes = [(.ipv4, v4), (.ipv6, v6)]
        probePrefixes = probes.compactMap { RoutePrefix(address: $0.1) }
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
        do {
            try events.attachFilter(EventFilter.program(destinations: probePrefixes))
        } catch {
            // Only a saving is lost: the same test runs in user space on every message.
            logger.warning("receiving every notification", metadata: ["error": "\(error)"])
        }
        if let namespace = configuration.networkNamespace {
            // The monitor thread joins it: probe sockets and host name lookups belong there.
            namespaceDescriptor = try NetworkNamespace.openDescriptor(namespace)
        } else {
            namespaceDescriptor = nil
        }
        do {
            wake = try WakeSignal()
        } catch {
            namespaceDescriptor?.close()
            throw ReachabilityError(.netlink, "cannot create an eventfd: \(error)")
        }
        logger.debug("netlink sockets open", metadata: ["rcvbuf": "\(events.receiveBufferSize)"])
    }

    deinit {
        // The thread owns the sockets while it runs; it closes them when it ends.
        if !state.withLock({ $0.isRunning }) {
            wake.close()
            namespaceDescriptor?.close()
            systemBus.withLock { $0?.close() }
        }
    }

    var statistics: MonitorStatistics { state.withLock { $0.statistics } }

    /// Asks NetworkManager and ModemManager (when a system bus exists; at most
    /// `SystemFactsClient.firstAnswerWait`), loads links and addresses, publishes the first
    /// path, then starts listening.
    func start() throws {
        let facts = systemBus.withLock { client -> SystemFacts? in
            guard let client else { return nil }
            client.start()
            client.waitForFirstAnswers()
            return client.facts
        }
        if let facts { state.withLock { $0.systemFacts = facts; $0.systemFactsTime = Date() } }
        try resynchronise()
        state.withLock { $0.isRunning = true }
        SystemThread.detach(name: "path-monitor") { [self] in run() }
    }

    func cancel() {
        let wasRunning = state.withLock { state -> Bool in
            defer { state.isCancelled = true }
            return state.isRunning && !state.isCancelled
        }
        if wasRunning { wake.signal() }
    }

    // Over 60 lines on purpose: the monitor thread's loop and its teardown, which share the thread's namespace and sockets.
    /// The monitor thread: poll for the event socket, the wake fd, the probe's socket, or the
    /// next deadline.
    private func run() {
        defer {
            events.close()
            query.close()
            wake.close()
            systemBus.withLock { client in
                client?.close()
                client = nil
            }
        }
        if let namespaceDescriptor {
            // Probe sockets and the resolvers' must live in the monitored namespace; setns()
            // moves only this thread, which is the one that opens them (and starts the resolver
            // threads, which inherit it).
            defer { namespaceDescriptor.close() }
            do {
                try NetworkNamespace.join(namespaceDescriptor)
            } catch {
                configuration.logger.error("cannot enter the namespace for host lookups and connectivity checks; the monitor stops",
                                           metadata: ["error": "\(error)"])
                return
            }
        }
        let probe = configuration.connectivityCheck.map {
            ConnectivityProbe(check: $0, wake: wake, logger: configuration.logger)
        }
        let netlinkEntry = PollEntry(events.fileDescriptor, .readable)
        let wakeEntry = PollEntry(wake.pollDescriptor, .readable)
        while true {
            if let probe { carryOutProbeActions(probe) }
            carryOutHostWork()
            let (cancelled, due) = state.withLock { state in
                (state.isCancelled, [state.quietDeadline, state.evaluationDeadline, state.scheduler?.deadline,
                                     state.hosts.deadline].compactMap { $0 }.min())
            }
            if cancelled { return }
            let (busRequest, busDeadline) = systemBus.withLock { ($0?.pollRequest, $0?.deadline) }
            let deadline = [due, probe?.deadline, busDeadline].compactMap { $0 }.min()
            var timeout: Int32 = -1
            if let deadline {
                let remaining = deadline - ContinuousClock.now
                timeout = remaining <= .zero ? 0 : Int32(min((remaining / .milliseconds(1)).rounded(.up), 60_000))
            }
            let probeEntry = probe?.pollRequest
            var entries = [netlinkEntry, wakeEntry] + (probeEntry.map { [$0] } ?? [])
            let busIndex = entries.count
            if let busRequest { entries.append(busRequest) }
            do {
                try Poll.wait(&entries, timeoutMilliseconds: timeout)
            } catch {
                configuration.logger.error("poll failed; the monitor stops", metadata: ["error": "\(error)"])
                return
            }
            if state.withLock({ $0.isCancelled }) { return }
            if entries[1].isReady { wake.reset() }
            if entries[0].isReady { drain() }
            if busRequest != nil || busDeadline != nil,
               (busRequest != nil && entries[busIndex].isReady) || busDeadline.map({ $0 <= ContinuousClock.now }) == true {
                processSystemBus()
            }
            if let probe, let (id, outcome) = probe.advance(isReady: probeEntry != nil && entries[2].isReady, at: .now) {
                record(id, outcome)
            }
            fireDueDeadlines()
        }
    }

    /// Starts or cancels checks as the scheduler asked (on the monitor thread, which owns the probe).
    private func carryOutProbeActions(_ probe: ConnectivityProbe) {
        while true {
            let actions = state.withLock { state -> [ConnectivityScheduler.Action] in
                defer { state.probeActions = [] }
                return state.probeActions
            }
            if actions.isEmpty { return }
            for action in actions {
                switch action {
                case .cancel:
                    probe.cancel()
                case .start(let id, let target):
                    if let (finished, outcome) = probe.start(id: id, target: target, at: .now) { record(finished, outcome) }
                }
            }
        }
    }

    /// A check finished: the path is published again with its answer (a second update when the
    /// connectivity changed; otherwise only `currentPath`'s evidence is refreshed).
    private func record(_ id: Int, _ outcome: ConnectivityScheduler.Outcome) {
        let path = state.withLock { state -> NetworkPath? in
            guard state.scheduler?.finished(id: id, outcome, at: .now, date: Date()) != nil,
                  let last = state.lastPath, !state.isCancelled else { return nil }
            return decorated(last, state)
        }
        configuration.logger.debug("connectivity checked", metadata: ["result": outcome.connectivity.rawValue, "answer": outcome.answer])
        if let path { publish(path) }
        let hosts = state.withLock { state in state.isCancelled ? [] : changedHosts(&state) }
        for (key, host) in hosts { publishHost(key, host) }
    }

    /// Reads the system bus; new facts re-derive the interfaces and re-evaluate the path at once
    /// (within the evaluation budget, as netlink changes are).
    private func processSystemBus() {
        guard let facts = systemBus.withLock({ $0?.process() }) else { return }
        state.withLock { state in
            state.systemFacts = facts
            state.systemFactsTime = Date()
            state.interfacesGeneration = -1
            state.unlistedClassifications = [:]
            state.isDirty = true
        }
        configuration.logger.debug("system facts changed", metadata: ["sources": facts.sources.map { "\($0.service.rawValue)=\($0.state.rawValue)" }.joined(separator: " ")])
        evaluateSoon()
    }

    /// `path` with its connectivity (the configured check's, else NetworkManager's) and the
    /// services' sources.
    private func decorated(_ path: NetworkPath, _ state: borrowing EngineState) -> NetworkPath {
        guard let scheduler = state.scheduler else {
            return state.systemFacts.apply(to: path, receivedAt: state.systemFactsTime)
        }
        var path = scheduler.apply(to: path)
        path.factSources = state.systemFacts.sources
        return path
    }

    private func fireDueDeadlines() {
        let now = ContinuousClock.now
        let (quiet, evaluate) = state.withLock { state -> (Bool, Bool) in
            let quiet = state.quietDeadline.map { $0 <= now } ?? false
            let evaluate = state.evaluationDeadline.map { $0 <= now } ?? false
            if quiet { state.quietDeadline = nil }
            if evaluate { state.evaluationDeadline = nil }
            if let actions = state.scheduler?.timerFired(at: now) { state.probeActions += actions }
            return (quiet, evaluate && state.resync.isLive)
        }
        if quiet { quietTimerFired() }
        if evaluate { evaluateAndPublish(primary: false) }
    }

    // MARK: Event handling (on the monitor thread)

    private func drain() {
        var overflow = false
        let includesAll = configuration.includesAllInterfaces
        let probes = probePrefixes
        for _ in 0..<Self.datagramsPerBatch {
            let result: NetlinkSocket.Receive
            do {
                // The table is only touched by this thread; the lock is for statistics readers.
                (result, _) = try events.receive { bytes in
                    state.withLock { state in
                        state.statistics.datagrams += 1
                        guard state.resync.messagesArrived() == .apply else { return }
                        RTNetlink.forEachMessage(in: bytes) { parsed in
                            state.statistics.messages += 1
                            switch parsed.message {
                            case .routingChanged(let change):
                                if probes.contains(where: change.affects) {
                                    state.isDirty = true
                                } else if state.hostPrefixes.contains(where: change.affects) {
                                    state.isHostsDirty = true
                                }
                            default:
                                let change = state.table.apply(parsed.message)
                                if change == .path || (includesAll && change == .detail) { state.isDirty = true }
                            }
                        }
                    }
                }
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
        }
        if overflow {
            configuration.logger.warning("netlink receive buffer overflowed; waiting for quiet to re-dump")
            state.withLock {
                $0.statistics.overflows += 1
                _ = $0.resync.overflowed()
            }
            armQuietTimer()
        } else {
            evaluateSoon()
        }
    }

    /// Evaluates at once while the budget allows (isolated changes and short bursts), otherwise
    /// once the next token is due: a storm costs at most one pair of lookups per interval instead
    /// of one per datagram.
    private func evaluateSoon() {
        let now = ContinuousClock.now
        let evaluateNow = state.withLock { state -> Bool in
            guard state.isDirty || state.isHostsDirty, state.resync.isLive, state.evaluationDeadline == nil else { return false }
            guard let due = state.budget.take(at: now) else { return true }
            state.evaluationDeadline = due
            return false
        }
        if evaluateNow { evaluateAndPublish(primary: false) }
    }

    private func armQuietTimer() {
        state.withLock { $0.quietDeadline = ContinuousClock.now + configuration.quietPeriod }
    }

    private func quietTimerFired() {
        // Drain here too: data may have arrived since the last poll.
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
            $0.interfacesGeneration = -1
            $0.statistics.dumps += 1
        }
        evaluateAndPublish()
    }

    /// Resolves the primary path (after a change it may depend on, or a re-dump) and the path to
    /// every watched host, and publishes what changed. A change that only hosts' routes depend on
    /// costs their lookups alone.
    private func evaluateAndPublish(primary: Bool = true) {
        let (evaluatesPrimary, targets) = state.withLock { state -> (Bool, [String: [HostTarget]]) in
            (primary || state.isDirty || state.lastPath == nil, state.hosts.watches.mapValues(\.targets))
        }
        // Lookups first, outside the lock; the table read afterwards is at least as new.
        var lookups: [(AddressFamily, LookupResult)] = []
        if evaluatesPrimary {
            for (family, destination) in probes {
                lookups.append((family, lookup(destination)))
            }
        }
        var hostLookups: [String: [PathEvaluator.HostLookup]] = [:]
        var answers: [HostTarget: LookupResult] = [:]
        for (key, targets) in targets {
            hostLookups[key] = targets.map { target in
                if let known = answers[target] { return PathEvaluator.HostLookup(target: target, result: known) }
                let result = lookup(target)
                answers[target] = result
                return PathEvaluator.HostLookup(target: target, result: result)
            }
        }
        let (path, hostUpdates, cancelled) = state.withLock { state -> (NetworkPath?, [(String, HostPath)], Bool) in
            // Evaluated in place: a copy of the table taken here would make the next change
            // copy every link (copy-on-write), an O(links) cost per evaluation.
            let interfaces = currentInterfaces(&state)
            var published: NetworkPath?
            if evaluatesPrimary {
                var path = PathEvaluator.evaluate(table: state.table, interfaces: interfaces, lookups: lookups)
                if let last = state.lastPath, last.status != path.status || last.routes != path.routes {
                    // Another network may resolve names to other addresses.
                    state.hosts.primaryPathChanged()
                }
                state.lastPath = path
                if let actions = state.scheduler?.pathChanged(path, at: Date()) {
                    // The path is published first; the check's answer is a second update.
                    state.probeActions += actions
                    if !actions.isEmpty, state.isRunning { wake.signal() }
                }
                path = decorated(path, state)
                state.statistics.evaluations += 1
                state.isDirty = false
                published = path
            }
            for (key, lookups) in hostLookups where state.hosts.watches[key] != nil {
                state.hostPaths[key] = lookups.isEmpty ? nil : PathEvaluator.hostPath(
                    lookups: lookups, table: state.table, interfaces: interfaces,
                    interface: { link in hostInterface(link, &state) })
            }
            state.isHostsDirty = false
            return (published, changedHosts(&state), state.isCancelled)
        }
        if cancelled { return }
        if let path { publish(path) }
        for (key, host) in hostUpdates { publishHost(key, host) }
    }

    /// The watched hosts whose published path differs from what it should now be, recorded as published.
    private func changedHosts(_ state: inout EngineState) -> [(String, HostPath)] {
        let primary = state.lastPath.map { decorated($0, state) }
        var updates: [(String, HostPath)] = []
        for key in state.hosts.watches.keys.sorted() {
            guard let watch = state.hosts.watches[key] else { continue }
            var failure: String?
            if case .failed(let message) = watch.resolution { failure = message }
            // Nothing until the name has an answer: the first one is the first update.
            if watch.resolution == .pending { continue }
            let path = state.hostPaths[key].map { host in primary.map { PathEvaluator.withConnectivity(host, from: $0) } ?? host }
            let host = HostPath(host: key, addresses: watch.targets.map(\.presentation), resolutionFailure: failure, path: path)
            guard state.publishedHosts[key] != host else { continue }
            state.publishedHosts[key] = host
            updates.append((key, host))
        }
        return updates
    }

    /// The interface a host's route leaves by: listed, or classified now (loopback, a link whose
    /// only addresses are link-local) and kept while its facts stay the same.
    private func hostInterface(_ link: LinkInfo, _ state: inout EngineState) -> NetworkInterface {
        if let listed = state.interfaces.first(where: { $0.index == link.index }) { return listed }
        let classification: Classification
        let evidence = state.systemFacts.interfaces[link.name]?.evidence
        if let known = state.unlistedClassifications[link.index], known.link.name == link.name,
           known.link.kind == link.kind, known.link.hardwareType == link.hardwareType, known.evidence == evidence {
            classification = known.classification
        } else {
            var facts = sysfs?.facts(for: link)
                ?? InterfaceFacts(name: link.name, hardwareType: link.hardwareType, linkKind: link.kind, isLoopback: link.isLoopback)
            facts.managerEvidence = evidence
            classification = classifier.classify(facts)
            state.unlistedClassifications[link.index] = (link, evidence, classification)
        }
        return PathEvaluator.interface(link, table: state.table, classification: classification,
                                       facts: state.systemFacts.interfaces[link.name])
    }

    // MARK: Hosts

    /// Follows the route to `key` (a `HostWatches.key(for:)`); the first answer is published.
    func watch(host key: String) {
        let running = state.withLock { state -> Bool in
            guard !state.isCancelled else { return false }
            if state.hosts.add(key) {
                state.isFilterStale = true
                state.isHostsDirty = true
            }
            return state.isRunning
        }
        if running { wake.signal() }
    }

    /// One subscription to `key` ended.
    func unwatch(host key: String) {
        state.withLock { state in
            guard state.hosts.remove(key) else { return }
            state.hostPaths[key] = nil
            state.publishedHosts[key] = nil
            state.isFilterStale = true
        }
    }

    /// On the monitor thread: takes resolvers' answers, starts due resolutions, replaces the event
    /// filter when the watched addresses changed, and evaluates what that changed.
    private func carryOutHostWork() {
        let now = ContinuousClock.now
        let (starts, filter) = state.withLock { state -> ([(String, ConnectivityProbe.Resolution)], [RoutePrefix]?) in
            for (key, resolution) in state.resolutions {
                guard let answer = resolution.result.withLock({ $0 }) else { continue }
                state.resolutions[key] = nil
                let addresses = answer.map { $0.compactMap(\.ipAddress) }
                if state.hosts.resolved(key, addresses, at: now) {
                    state.isFilterStale = true
                    state.isHostsDirty = true
                }
            }
            if state.hosts.expireFirstAnswers(at: now) { state.isHostsDirty = true }
            guard !state.isCancelled else { return ([], nil) }
            let starts = state.hosts.resolutionsToStart(at: now).map { key in
                let resolution = ConnectivityProbe.Resolution()
                state.resolutions[key] = resolution
                return (key, resolution)
            }
            var filter: [RoutePrefix]?
            if state.isFilterStale {
                state.isFilterStale = false
                let prefixes = state.hosts.prefixes
                if prefixes != state.hostPrefixes {
                    state.hostPrefixes = prefixes
                    filter = prefixes
                }
            }
            return (starts, filter)
        }
        if let filter {
            // Before any lookup: a route change after the lookup is then never filtered away.
            do {
                try events.attachFilter(EventFilter.program(destinations: probePrefixes + filter))
            } catch {
                configuration.logger.warning("receiving every notification", metadata: ["error": "\(error)"])
            }
        }
        let wake = self.wake
        for (key, resolution) in starts {
            // A thread inherits the network namespace of the thread that creates it (this one).
            SystemThread.detach(name: "resolver") {
                let answer = SocketAddress.resolve(host: key, port: 80)
                resolution.result.withLock { $0 = answer }
                wake.signal()
            }
        }
        let hasWork = state.withLock { $0.isHostsDirty }
        if hasWork { evaluateSoon() }
    }

    /// The listed interfaces, rebuilt only when what they show changed, classifying only links
    /// that are listed and new, renamed or re-kinded since they were last classified.
    private func currentInterfaces(_ state: inout EngineState) -> [NetworkInterface] {
        let includesAll = configuration.includesAllInterfaces
        let generation = includesAll ? state.table.generation : state.table.pathGeneration
        if state.interfacesGeneration == generation { return state.interfaces }
        let listed = PathEvaluator.listedLinks(table: state.table, all: includesAll)
        var updated: [Int32: (link: LinkInfo, evidence: ManagerEvidence?, classification: Classification)] = [:]
        updated.reserveCapacity(listed.count)
        for link in listed {
            let evidence = state.systemFacts.interfaces[link.name]?.evidence
            if let previous = state.classifications[link.index], previous.link.name == link.name,
               previous.link.kind == link.kind, previous.link.hardwareType == link.hardwareType, previous.evidence == evidence {
                updated[link.index] = previous
                continue
            }
            var facts = sysfs?.facts(for: link)
                ?? InterfaceFacts(name: link.name, hardwareType: link.hardwareType, linkKind: link.kind, isLoopback: link.isLoopback)
            facts.managerEvidence = evidence
            updated[link.index] = (link, evidence, classifier.classify(facts))
        }
        state.interfaces = listed.map { link in
            PathEvaluator.interface(link, table: state.table, classification: updated[link.index]?.classification,
                                    facts: state.systemFacts.interfaces[link.name])
        }
        state.classifications = updated
        state.interfacesGeneration = generation
        return state.interfaces
    }

    /// The kernel's route to one of a host's addresses; a zone names the link it is scoped to.
    private func lookup(_ target: HostTarget) -> LookupResult {
        var interface: Int32?
        if let zone = target.zone {
            guard let index = state.withLock({ $0.table.links.values.first { $0.name == zone }?.index }) else {
                return .failed(-ENODEV)
            }
            interface = index
        }
        return lookup(target.address, outputInterface: interface)
    }

    private func lookup(_ destination: [UInt8], outputInterface: Int32? = nil) -> LookupResult {
        let sequence = query.nextSequence()
        do {
            let replies = try query.exchange(RTNetlink.routeLookup(destination: destination, outputInterface: outputInterface,
                                                                   sequence: sequence),
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
