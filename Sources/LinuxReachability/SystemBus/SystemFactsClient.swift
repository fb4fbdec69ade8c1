import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// The monitor's D-Bus side: one system-bus connection that follows NetworkManager and
/// ModemManager (their arrival and departure, their objects, their property signals) and
/// turns what they say into `SystemFacts`. No polling: the connection's descriptor sits in the
/// monitor thread's poll(2) beside the netlink socket, and nothing is sent after the first
/// answers except when a service (re)appears.
///
/// Used by one thread at a time (see `SystemBusConnection`); the engine keeps it in a `Mutex`.
//
// Longer than 400 lines on purpose: one state machine over one connection (two services' trackers,
// requests in flight, reconnects) whose state stays private here; what the services say is
// modelled in NetworkManagerModel and ModemManagerModel.
final class SystemFactsClient {
    /// Where the bus is and which namespace the monitor watches.
    struct Settings: Sendable {
        var address: String
        /// The monitored namespace's identity, to compare with the services' (nil if unknown).
        var monitoredNamespace: FileStatus?
        /// Whether the monitor watches its own namespace (no `networkNamespace`): then a service
        /// whose namespace cannot be read (an unprivileged user looking at root's NetworkManager)
        /// is taken to manage this one, the usual desktop case.
        var isOwnNamespace: Bool
        var logger: Logger
    }

    /// What a request was for.
    private enum RequestKind { case nameOwner, processID, objects }

    /// What is known of a service being identified: its owner, its process (for the namespace
    /// check) and its objects, asked all at once so the first answer costs one round trip.
    private struct Probe: Equatable {
        /// The name asked: the well-known name at start, or a new owner's unique name.
        var target: String
        var owner: String?
        var ownerMissing = false
        var isOwnerAnswered: Bool
        var pid: UInt32?
        var isProcessAnswered = false
        var objects: SystemBusEvent.Objects?
        var objectsSender: String?
        var objectsError: String?
        var objectsErrorName: String?
        var isObjectsAnswered = false

        init(target: String) {
            self.target = target
            let isUnique = target.hasPrefix(":")
            owner = isUnique ? target : nil
            isOwnerAnswered = isUnique
        }

        var isComplete: Bool { isOwnerAnswered && isProcessAnswered && isObjectsAnswered }
    }

    /// One service's life on the bus.
    private struct Tracker {
        enum Phase: Equatable {
            case probing(Probe)
            case notRunning
            case used(owner: String, pid: UInt32?, note: String?)
            case otherNamespace(owner: String, detail: String)
            case failed(String)
        }

        let service: FactSource.Service
        var phase = Phase.failed("not asked yet")
        /// Bumped whenever a new probe starts, so answers about an earlier owner are dropped.
        var generation = 0
        var problems = 0
        var lastProblem: String?

        var bus: SystemServiceBus {
            service == .networkManager ? NetworkManagerModel.bus : ModemManagerModel.bus
        }
        var owner: String? {
            switch phase {
            case .probing(let probe): return probe.owner
            case .used(let owner, _, _), .otherNamespace(let owner, _): return owner
            case .notRunning, .failed: return nil
            }
        }
        var isUsed: Bool { if case .used = phase { return true } else { return false } }
        var isSettled: Bool { if case .probing = phase { return false } else { return true } }
    }

    let settings: Settings
    private var connection: SystemBusConnection?
    private var trackers = [Tracker(service: .networkManager), Tracker(service: .modemManager)]
    private var networkManager = NetworkManagerModel()
    private var modemManager = ModemManagerModel()
    private var requests: [Int: (service: Int, kind: RequestKind, generation: Int)] = [:]
    private var lastTag = 0
    private var hasMore = false
    private var reconnectAt: ContinuousClock.Instant?
    private var reconnectDelay = SystemFactsClient.firstReconnectDelay
    /// The facts as last built; `process()` returns them again only when they change.
    private(set) var facts: SystemFacts
    /// When the facts last changed.
    private(set) var factsTime = Date()

    static let firstReconnectDelay = Duration.seconds(1)
    static let longestReconnectDelay = Duration.seconds(60)
    /// How long `start()` waits for the services' first answers: a `status` shows their facts,
    /// and a wedged bus delays it by this much at most (the facts then follow as an update).
    static let firstAnswerWait = Duration.milliseconds(500)
    /// Refused values logged in full per service; later ones are counted, one line per 1000.
    static let loggedProblems = 20

    /// The default system bus socket (D-Bus specification).
    static let defaultSocket = "/run/dbus/system_bus_socket"

    /// The bus address for `setting`, or nil with the reason when there is nothing to talk to.
    /// With `automatic` and no `DBUS_SYSTEM_BUS_ADDRESS`, a missing socket means no bus: nothing
    /// is loaded or connected (containers, minimal servers).
    static func address(for setting: PathMonitor.Configuration.SystemBus) -> Result<String, FactsUnavailable> {
        switch setting {
        case .disabled:
            return .failure(FactsUnavailable(detail: "disabled in the monitor's configuration"))
        case .address(let address):
            return address.isEmpty ? .failure(FactsUnavailable(detail: "an empty address in the monitor's configuration")) : .success(address)
        case .automatic:
            if let variable = ProcessInfo.processInfo.environment["DBUS_SYSTEM_BUS_ADDRESS"], !variable.isEmpty {
                return .success(variable)
            }
            guard (try? FileSystem.status(ofPath: defaultSocket, followingLinks: true))??.kind == .socket else {
                return .failure(FactsUnavailable(detail: "\(defaultSocket) absent, DBUS_SYSTEM_BUS_ADDRESS unset"))
            }
            return .success("unix:path=" + defaultSocket)
        }
    }

    struct FactsUnavailable: Error { var detail: String }

    init(settings: Settings) {
        self.settings = settings
        facts = SystemFacts.none(.waiting, "asked; no answer yet")
    }

    /// Connects, subscribes and asks who owns each service's name. A failure is not thrown:
    /// the facts say so and a reconnect is scheduled.
    func start() {
        connect()
        rebuild()
    }

    /// Processes the bus on the calling thread until every service has answered or `timeout`
    /// passes (`PathMonitor.start()` uses it so the first path carries the facts).
    func waitForFirstAnswers(timeout: Duration = SystemFactsClient.firstAnswerWait) {
        let deadline = ContinuousClock.now + timeout
        while connection != nil, !trackers.allSatisfy(\.isSettled) {
            _ = process()
            if connection == nil || trackers.allSatisfy(\.isSettled) { break }
            if hasMore { continue }
            let until = [deadline, connection?.deadline].compactMap { $0 }.min() ?? deadline
            let remaining = until - ContinuousClock.now
            guard ContinuousClock.now < deadline, let request = connection?.pollRequest else { break }
            var entries = [request]
            let milliseconds = remaining <= .zero ? 0 : Int32((remaining / .milliseconds(1)).rounded(.up))
            try? Poll.wait(&entries, timeoutMilliseconds: milliseconds)
        }
        rebuild()
    }

    /// What to poll for, nil without a connection.
    var pollRequest: PollEntry? { connection?.pollRequest }

    /// When `process` must run even without traffic: more queued messages, a reply timeout, a
    /// reconnect.
    var deadline: ContinuousClock.Instant? {
        if hasMore { return .now }
        return [connection?.deadline, reconnectAt].compactMap { $0 }.min()
    }

    /// Reads what arrived (the descriptor was ready, or a deadline passed) and returns the new
    /// facts when they changed.
    func process() -> SystemFacts? {
        if connection == nil {
            guard let reconnectAt, reconnectAt <= .now else { return nil }
            self.reconnectAt = nil
            connect()
            return rebuild()
        }
        guard let connection else { return nil }
        let events: [SystemBusEvent]
        do {
            (events, hasMore) = try connection.process()
        } catch {
            lost(error)
            return rebuild()
        }
        for event in events { handle(event) }
        return rebuild()
    }

    func close() {
        connection?.close()
        connection = nil
    }

    // MARK: Connection

    private func connect() {
        do {
            let connection = try SystemBusConnection(address: settings.address,
                                                     wanted: NetworkManagerModel.bus.wanted.merging(ModemManagerModel.bus.wanted) { a, _ in a })
            self.connection = connection
            for index in trackers.indices {
                let bus = trackers[index].bus
                let (name, prefix) = (bus.name, bus.objectsPath)
                // Matches first, then the owner question: the bus handles both in order, so no
                // change can fall between the answer and the subscription.
                try connection.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(name)'")
                try connection.addMatch("type='signal',sender='\(name)',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='\(prefix)'")
                try connection.addMatch("type='signal',sender='\(name)',interface='org.freedesktop.DBus.ObjectManager',path='\(bus.objectManagerPath)'")
                try probe(index, target: name)
            }
            settings.logger.debug("system bus connected", metadata: ["address": settings.address])
        } catch {
            lost(error)
        }
    }

    /// The connection failed or closed: kernel facts alone until a reconnect succeeds.
    private func lost(_ error: any Error) {
        connection?.close()
        connection = nil
        hasMore = false
        requests = [:]
        networkManager = NetworkManagerModel()
        modemManager = ModemManagerModel()
        for index in trackers.indices {
            trackers[index].phase = .failed("\(error); retrying in \(reconnectDelay)")
            trackers[index].generation += 1
        }
        settings.logger.warning("system bus unavailable; NetworkManager and ModemManager facts are not used until it is back",
                                metadata: ["error": "\(error)", "retry": "\(reconnectDelay)"])
        reconnectAt = .now + reconnectDelay
        reconnectDelay = ExponentialBackoff(initial: Self.firstReconnectDelay, maximum: Self.longestReconnectDelay).delay(after: reconnectDelay)
    }

    private func send(_ kind: RequestKind, for index: Int, destination: String, path: String, interface: String,
                      member: String, argument: String? = nil, shape: SystemBusConnection.Shape) throws {
        guard let connection else { return }
        lastTag += 1
        requests[lastTag] = (index, kind, trackers[index].generation)
        try connection.call(tag: lastTag, destination: destination, path: path, interface: interface, member: member,
                            argument: argument, expecting: shape)
    }

    // MARK: Events

    private func handle(_ event: SystemBusEvent) {
        switch event {
        case .nameOwnerChanged(let sender, let name, let newOwner):
            // Only the bus driver speaks for names; a peer may send this signal straight to us.
            guard sender == "org.freedesktop.DBus", let index = trackers.firstIndex(where: { $0.bus.name == name }) else { return }
            guard newOwner != trackers[index].owner else { return }
            ownerChanged(index, to: newOwner)
        case .propertiesChanged(let sender, let path, let interface, let changed):
            guard let index = usedTracker(sender: sender) else { return ignored(sender, "PropertiesChanged") }
            record(index, trackers[index].service == .networkManager
                ? networkManager.update(path: path, interface: interface, properties: changed)
                : modemManager.update(path: path, interface: interface, properties: changed))
        case .interfacesAdded(let sender, let path, let interfaces):
            guard let index = usedTracker(sender: sender) else { return ignored(sender, "InterfacesAdded") }
            for (interface, properties) in interfaces.sorted(by: { $0.key < $1.key }) {
                record(index, trackers[index].service == .networkManager
                    ? networkManager.update(path: path, interface: interface, properties: properties)
                    : modemManager.update(path: path, interface: interface, properties: properties))
            }
        case .interfacesRemoved(let sender, let path, let interfaces):
            guard let index = usedTracker(sender: sender) else { return ignored(sender, "InterfacesRemoved") }
            if trackers[index].service == .networkManager {
                networkManager.remove(path: path, interfaces: interfaces)
            } else {
                modemManager.remove(path: path, interfaces: interfaces)
            }
        case .reply(let tag, let sender, let reply):
            guard let request = requests.removeValue(forKey: tag),
                  request.generation == trackers[request.service].generation else { return }
            replied(request.service, request.kind, sender: sender, reply)
        case .malformed(let sender, let member, let detail):
            if let index = trackers.firstIndex(where: { $0.owner == sender && $0.owner != nil }) {
                record(index, [SystemServiceProblem(service: trackers[index].service, object: member, property: "",
                                                    detail: "a malformed message (\(detail)); ignored")])
            } else {
                settings.logger.debug("ignoring a malformed message", metadata: ["sender": sender, "member": member, "detail": detail])
            }
        }
    }

    /// The tracker whose service is in use and owned by `sender`.
    private func usedTracker(sender: String) -> Int? {
        trackers.firstIndex { $0.isUsed && $0.owner == sender }
    }

    private func ignored(_ sender: String, _ member: String) {
        if trackers.contains(where: { $0.owner == sender }) {
            // Sent before its objects were listed (or while its namespace is checked): the
            // GetManagedObjects answer, which comes after it, covers it.
            settings.logger.debug("a signal before the objects were loaded; the snapshot covers it", metadata: ["sender": sender, "member": member])
        } else {
            // Another peer: the bus stamps the true sender, so it cannot speak as a service.
            settings.logger.debug("ignoring a signal from a peer that is not a service in use", metadata: ["sender": sender, "member": member])
        }
    }

    private func ownerChanged(_ index: Int, to newOwner: String) {
        if trackers[index].service == .networkManager { networkManager = NetworkManagerModel() } else { modemManager = ModemManagerModel() }
        guard !newOwner.isEmpty else {
            if trackers[index].owner != nil {
                settings.logger.info("\(trackers[index].service.rawValue) left the system bus; its facts are no longer used")
            }
            trackers[index].generation += 1
            trackers[index].phase = .notRunning
            return
        }
        settings.logger.info("\(trackers[index].service.rawValue) appeared on the system bus", metadata: ["owner": newOwner])
        do {
            try probe(index, target: newOwner)
        } catch {
            trackers[index].phase = .failed("\(error)")
        }
    }

    /// Asks, all at once, who owns `target` (unless it is a unique name), which process that is,
    /// and for its objects; `settle` decides once the three answers are in.
    private func probe(_ index: Int, target: String) throws {
        trackers[index].generation += 1
        let probe = Probe(target: target)
        trackers[index].phase = .probing(probe)
        let bus = (destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus")
        if !probe.isOwnerAnswered {
            try send(.nameOwner, for: index, destination: bus.destination, path: bus.path, interface: bus.interface,
                     member: "GetNameOwner", argument: target, shape: .string)
        }
        try send(.processID, for: index, destination: bus.destination, path: bus.path, interface: bus.interface,
                 member: "GetConnectionUnixProcessID", argument: target, shape: .uint32)
        try send(.objects, for: index, destination: target, path: trackers[index].bus.objectManagerPath,
                 interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects", shape: .objects)
    }

    private func replied(_ index: Int, _ kind: RequestKind, sender: String, _ reply: SystemBusReply) {
        guard case .probing(var probe) = trackers[index].phase else { return }
        switch (kind, reply) {
        case (.nameOwner, .string(let owner)):
            probe.owner = owner
        case (.nameOwner, _):
            probe.ownerMissing = true
        case (.processID, .uint32(let pid)):
            probe.pid = pid
        case (.processID, _):
            break
        case (.objects, .objects(let objects)):
            probe.objects = objects
            probe.objectsSender = sender
        case (.objects, .error(let name, let message)):
            probe.objectsErrorName = name
            probe.objectsError = message
        case (.objects, _):
            probe.objectsError = "an answer of another shape"
        }
        switch kind {
        case .nameOwner: probe.isOwnerAnswered = true
        case .processID: probe.isProcessAnswered = true
        case .objects: probe.isObjectsAnswered = true
        }
        trackers[index].phase = .probing(probe)
        if probe.isComplete { settle(index, probe) }
    }

    /// All three answers are in: the service is used, in another namespace, absent or failed.
    private func settle(_ index: Int, _ probe: Probe) {
        let name = trackers[index].service.rawValue
        guard !probe.ownerMissing, let owner = probe.owner else {
            trackers[index].phase = .notRunning
            return
        }
        if let errorName = probe.objectsErrorName {
            if ["org.freedesktop.DBus.Error.NameHasNoOwner", "org.freedesktop.DBus.Error.ServiceUnknown"].contains(errorName) {
                trackers[index].phase = .notRunning   // it left in between; NameOwnerChanged follows
                return
            }
            let old = ["org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.UnknownObject",
                       "org.freedesktop.DBus.Error.UnknownInterface"].contains(errorName)
            trackers[index].phase = .failed(old && trackers[index].service == .networkManager
                ? "NetworkManager older than 1.12 (no ObjectManager at /org/freedesktop); its facts are not used"
                : "\(name) did not list its objects: \(errorName): \(probe.objectsError ?? "")")
            settings.logger.warning("\(name) facts are not used", metadata: ["error": "\(errorName): \(probe.objectsError ?? "")"])
            return
        }
        guard let objects = probe.objects else {
            trackers[index].phase = .failed("\(name) answered GetManagedObjects with something unexpected: \(probe.objectsError ?? "")")
            return
        }
        guard probe.objectsSender == owner else {
            // The name changed hands between the questions: ask the owner the bus named, by its
            // unique name, so one owner's answers are never mixed with another's.
            do { try self.probe(index, target: owner) } catch { trackers[index].phase = .failed("\(error)") }
            return
        }
        switch namespaceVerdict(pid: probe.pid) {
        case .same(let note):
            record(index, trackers[index].service == .networkManager ? networkManager.load(objects) : modemManager.load(objects))
            trackers[index].phase = .used(owner: owner, pid: probe.pid, note: note)
            reconnectDelay = Self.firstReconnectDelay
            settings.logger.debug("\(name) facts loaded", metadata: ["summary": summary(index)])
        case .other(let detail):
            trackers[index].phase = .otherNamespace(owner: owner, detail: detail)
            settings.logger.info("\(name) manages another network namespace; its facts are not used", metadata: ["detail": detail])
        }
    }

    private enum Verdict {
        case same(note: String?)
        case other(String)
    }

    /// A network namespace's identity (its nsfs file's device and inode: equal for every path
    /// naming the same namespace, /proc/PID/ns/net or /run/netns/NAME). EACCES for another
    /// user's process without CAP_SYS_PTRACE.
    static func namespaceIdentity(at path: String) -> Result<FileStatus, Errno> {
        do {
            guard let status = try FileSystem.status(ofPath: path, followingLinks: true) else { return .failure(.noSuchFile) }
            return .success(status)
        } catch {
            return .failure(error)
        }
    }

    /// Whether the service (process `pid`) runs in the monitored network namespace: its devices
    /// are interfaces of that namespace only then. Unreadable: assumed so for the monitor's own
    /// namespace, refused for another one.
    private func namespaceVerdict(pid: UInt32?) -> Verdict {
        guard let pid, pid > 0 else {
            return settings.isOwnNamespace ? .same(note: "process unknown; namespace not compared")
                : .other("the bus does not say which process it is, so its namespace cannot be compared with --netns")
        }
        let theirs = Self.namespaceIdentity(at: "/proc/\(pid)/ns/net")
        switch (theirs, settings.monitoredNamespace) {
        case (.success(let identity), .some(let monitored)):
            return identity.isSameFile(as: monitored) ? .same(note: nil) : .other("pid \(pid) runs in another network namespace")
        case (.failure(let error), _):
            return settings.isOwnNamespace ? .same(note: "namespace not compared: /proc/\(pid)/ns/net: \(error)")
                : .other("cannot read /proc/\(pid)/ns/net (\(error)) to compare with the monitored namespace")
        case (.success, .none):
            return settings.isOwnNamespace ? .same(note: "namespace not compared") : .other("the monitored namespace is unknown")
        }
    }

    /// Logs refused values (the first few in full, then a count) and keeps the last for --explain.
    private func record(_ index: Int, _ problems: [SystemServiceProblem]) {
        for problem in problems {
            trackers[index].problems += 1
            trackers[index].lastProblem = problem.description
            let count = trackers[index].problems
            if count <= Self.loggedProblems {
                settings.logger.warning("\(problem)")
            } else if count % 1000 == 0 {
                settings.logger.warning("\(trackers[index].service.rawValue) keeps sending values that are refused",
                                        metadata: ["refused": "\(count)", "last": problem.description])
            }
        }
    }

    private func summary(_ index: Int) -> String {
        trackers[index].service == .networkManager ? networkManager.summary : modemManager.summary
    }

    /// The facts from the models of the services in use; returns them when they changed.
    @discardableResult
    private func rebuild() -> SystemFacts? {
        var sources: [FactSource] = []
        for (index, tracker) in trackers.enumerated() {
            let service = tracker.service
            switch tracker.phase {
            case .probing:
                sources.append(FactSource(service: service, state: .waiting, detail: "asked on \(settings.address); no answer yet"))
            case .notRunning:
                sources.append(FactSource(service: service, state: .notRunning, detail: "not on the system bus"))
            case .used(_, let pid, let note):
                var detail = (pid.map { "pid \($0), " } ?? "") + summary(index)
                if let note { detail += " (\(note))" }
                if let last = tracker.lastProblem { detail += "; \(tracker.problems) value\(tracker.problems == 1 ? "" : "s") refused, last: \(last)" }
                sources.append(FactSource(service: service, state: .used, detail: detail))
            case .otherNamespace(_, let detail):
                sources.append(FactSource(service: service, state: .otherNamespace, detail: detail))
            case .failed(let detail):
                sources.append(FactSource(service: service, state: .failed, detail: detail))
            }
        }
        let built = SystemFacts(networkManager: trackers[0].isUsed ? networkManager : nil,
                                modemManager: trackers[1].isUsed ? modemManager : nil, sources: sources)
        guard built != facts else { return nil }
        facts = built
        factsTime = Date()
        return built
    }
}
