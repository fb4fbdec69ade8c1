import FoundationEssentials

/// NetworkManager's metered state of a device (`NMMetered`): whether traffic through it costs
/// money. `yes` and `no` are set on the connection by the user; the guesses are NetworkManager's
/// (a hotspot's DHCP option 43 `ANDROID_METERED`, an iPhone hotspot's beacon, a modem).
public enum Metered: String, Sendable, Hashable, Codable, CaseIterable {
    /// NetworkManager does not know.
    case unknown
    /// Metered, set on the connection.
    case yes
    /// Not metered, set on the connection.
    case no
    /// Metered, guessed by NetworkManager.
    case guessYes = "guess-yes"
    /// Not metered, guessed by NetworkManager.
    case guessNo = "guess-no"

    /// Whether traffic should be treated as costly: `yes` and `guess-yes`, as GLib's
    /// `GNetworkMonitor:network-metered` and NetworkManager's own documentation read it.
    public var isMetered: Bool { self == .yes || self == .guessYes }

    /// From NetworkManager's D-Bus value (0-4); nil for anything else.
    init?(networkManagerValue value: UInt32) {
        switch value {
        case 0: self = .unknown
        case 1: self = .yes
        case 2: self = .no
        case 3: self = .guessYes
        case 4: self = .guessNo
        default: return nil
        }
    }
}

/// What ModemManager says about the modem behind a cellular interface.
public struct CellularStatus: Sendable, Hashable, Codable {
    /// Registered on a visited network (3GPP `roaming`, `roaming-sms-only`,
    /// `roaming-csfb-not-preferred`; CDMA `roaming`).
    public var isRoaming: Bool
    /// The registration state, ModemManager's name for it: `home`, `roaming`, `searching`,
    /// `idle`, `denied`, `unknown`, ...
    public var registration: String
    /// The access technologies in use, ModemManager's names (`lte`, `5gnr`, `umts`, `hspa-plus`,
    /// ...); empty when unknown.
    public var accessTechnologies: [String]
    /// The operator's name, when the modem reports one.
    public var operatorName: String?

    /// Creates a status.
    public init(isRoaming: Bool, registration: String, accessTechnologies: [String], operatorName: String? = nil) {
        self.isRoaming = isRoaming
        self.registration = registration
        self.accessTechnologies = accessTechnologies
        self.operatorName = operatorName
    }
}

/// Whether a system service's facts went into a path, and why (for `status --explain`).
public struct FactSource: Sendable, Hashable, Codable {
    /// The services the monitor asks over the D-Bus system bus.
    public enum Service: String, Sendable, Hashable, Codable, CaseIterable {
        /// NetworkManager: metered state, device types, connectivity.
        case networkManager = "NetworkManager"
        /// ModemManager: roaming and access technology of modems.
        case modemManager = "ModemManager"
    }

    /// How the service stands.
    public enum State: String, Sendable, Hashable, Codable {
        /// Its facts are part of the path.
        case used
        /// Not on the bus (containers and servers usually); kernel facts alone.
        case notRunning = "not-running"
        /// No system bus to ask (no socket), or the monitor was configured without one.
        case noSystemBus = "no-system-bus"
        /// It manages another network namespace than the monitored one, so its devices are not these.
        case otherNamespace = "other-namespace"
        /// Asked, but it has not answered yet (the monitor goes on without it and updates the path
        /// when it does).
        case waiting
        /// The bus or the service failed; `detail` says how.
        case failed
    }

    /// Which service.
    public var service: Service
    /// Whether its facts were used.
    public var state: State
    /// The reason or the facts in one line, e.g. `pid 812, 3 devices, Metered=guess-yes, Connectivity=full`.
    public var detail: String

    /// Creates a status line.
    public init(service: Service, state: State, detail: String) {
        self.service = service
        self.state = state
        self.detail = detail
    }
}

/// Evidence about an interface's type from a service that manages it (NetworkManager's
/// `DeviceType`, a ModemManager modem's net port); a classification input, ranked below the
/// kernel's own device facts (see `InterfaceClassifier`).
public struct ManagerEvidence: Sendable, Hashable {
    /// The type the evidence points to.
    public var type: InterfaceType
    /// Why, e.g. `NetworkManager DeviceType=wifi`.
    public var reason: String

    /// Creates evidence.
    public init(type: InterfaceType, reason: String) {
        self.type = type
        self.reason = reason
    }
}

/// Where a service lives on the system bus and what of it is read: the one description the
/// client subscribes, asks and decodes by, whichever service it is.
struct SystemServiceBus: Sendable {
    /// The well-known name, e.g. `org.freedesktop.NetworkManager`.
    let name: String
    /// Where the service serves org.freedesktop.DBus.ObjectManager.
    let objectManagerPath: String
    /// The path namespace of its objects (and of their PropertiesChanged signals).
    let objectsPath: String
    /// The interfaces and properties decoded from its messages; everything else is skipped unread.
    let wanted: [String: Set<String>]
}

/// A service's objects as the monitor keeps them: built by `update` one interface at a time,
/// whether the properties come from GetManagedObjects, InterfacesAdded or PropertiesChanged.
protocol SystemServiceModel: Equatable {
    /// Where the service is on the bus and what of it the model reads.
    static var bus: SystemServiceBus { get }
    init()
    mutating func update(path: String, interface: String, properties: [String: DBusValue]) -> [SystemServiceProblem]
}

extension SystemServiceModel {
    /// Replaces everything with a `GetManagedObjects` answer (objects in path order, so a bound
    /// on their number cuts the same ones each time).
    mutating func load(_ objects: SystemBusEvent.Objects) -> [SystemServiceProblem] {
        self = Self()
        var problems: [SystemServiceProblem] = []
        for path in objects.keys.sorted() {
            for (interface, properties) in (objects[path] ?? [:]).sorted(by: { $0.key < $1.key }) {
                problems += update(path: path, interface: interface, properties: properties)
            }
        }
        return problems
    }
}

/// What NetworkManager and ModemManager know, joined per kernel interface name: the input the
/// monitor merges into interfaces and paths. Pure data, rebuilt whenever either service reports
/// a change.
struct SystemFacts: Sendable, Equatable {
    /// One interface's facts.
    struct Interface: Sendable, Equatable {
        /// NetworkManager's object path for the device.
        var devicePath: String?
        /// Type evidence (NetworkManager DeviceType, ModemManager net port).
        var evidence: ManagerEvidence?
        /// NetworkManager's per-device Metered and connectivity, nil when it has no device here.
        var networkManager: NetworkManagerModel.DeviceFacts?
        /// Why NetworkManager guessed metered, when it shows (DHCP `ANDROID_METERED`).
        var meteredHint: String?
        /// ModemManager's view of the modem behind it.
        var cellular: CellularStatus?
    }

    /// By kernel interface name.
    var interfaces: [String: Interface] = [:]
    /// NetworkManager's global Metered (its primary connection's device), what GLib reports.
    var globalMetered: Metered?
    /// NetworkManager's global connectivity.
    var connectivity: Connectivity?
    /// Whether NetworkManager's connectivity values are its check's verdicts (see
    /// `NetworkManagerModel.checksConnectivity`); false: they are not used.
    var networkManagerChecks = true
    /// One line per service, for `status --explain`.
    var sources: [FactSource] = []

    /// No services: what a machine without a system bus sees.
    static func none(_ state: FactSource.State, _ detail: String) -> SystemFacts {
        SystemFacts(sources: FactSource.Service.allCases.map { FactSource(service: $0, state: state, detail: detail) })
    }
}

extension SystemFacts {
    /// Joins what the services in use report, per kernel interface name. A model is nil when its
    /// service is not used (not running, another namespace, not answered).
    init(networkManager: NetworkManagerModel?, modemManager: ModemManagerModel?, sources: [FactSource]) {
        self.sources = sources
        if let networkManager {
            globalMetered = networkManager.metered
            connectivity = networkManager.connectivity
            networkManagerChecks = networkManager.checksConnectivity
            // Sorted by object path so two devices claiming one name resolve the same way each time.
            for path in networkManager.devices.keys.sorted() {
                guard let device = networkManager.devices[path], let name = device.kernelName else { continue }
                var facts = interfaces[name] ?? Interface()
                facts.devicePath = path
                facts.evidence = device.deviceType.flatMap(NetworkManagerModel.evidence(forDeviceType:))
                facts.networkManager = device.facts
                if let lease = device.dhcp4Config, networkManager.androidMeteredLeases.contains(lease) {
                    facts.meteredHint = "DHCP \(NetworkManagerModel.androidMeteredOption)"
                }
                interfaces[name] = facts
            }
        }
        if let modemManager {
            for path in modemManager.modems.keys.sorted() {
                guard let modem = modemManager.modems[path] else { continue }
                for port in modem.netPorts {
                    var facts = interfaces[port] ?? Interface()
                    facts.cellular = modem.status
                    if facts.evidence == nil {
                        let number = path.split(separator: "/").last.map(String.init) ?? path
                        facts.evidence = ManagerEvidence(type: .cellular, reason: "ModemManager: data port of modem \(number)")
                    }
                    interfaces[port] = facts
                }
            }
        }
    }
}

extension SystemFacts {
    /// NetworkManager's connectivity for `path` and how it was read, when no check of the
    /// monitor's own is configured: the primary interface's per-device answer for the primary
    /// route's family (NetworkManager >= 1.16), else the global one if that interface is one of
    /// NetworkManager's devices. `unknown` and `none` are no answer (no check has run yet, or
    /// NetworkManager does not route through this interface): the path then carries no evidence, as
    /// without a check. Nor is anything NetworkManager says while its own check is not configured
    /// or turned off (`ConnectivityCheckAvailable`/`ConnectivityCheckEnabled` false, Debian's
    /// default): its `full` and `limited` then only say whether the device has a default route.
    func connectivity(for path: NetworkPath) -> (connectivity: Connectivity, answer: String)? {
        guard networkManagerChecks, path.isSatisfied, let primary = path.primaryInterface, let device = interfaces[primary.name],
              device.devicePath != nil else { return nil }
        let family = path.primaryRoute?.family ?? .ipv4
        let perDevice = family == .ipv4 ? device.networkManager?.ipv4Connectivity : device.networkManager?.ipv6Connectivity
        let candidates: [(Connectivity?, String)] = [
            (perDevice, "NetworkManager: \(family == .ipv4 ? "Ip4" : "Ip6")Connectivity=\(perDevice?.rawValue ?? "") on \(primary.name)"),
            (connectivity, "NetworkManager: Connectivity=\(connectivity?.rawValue ?? "") (global)"),
        ]
        for (value, answer) in candidates {
            guard let value else { continue }
            guard value != .unknown, value != .offline else { return nil }
            return (value, answer)
        }
        return nil
    }

    /// `path` with NetworkManager's connectivity (see `connectivity(for:)`) and the sources.
    func apply(to path: NetworkPath, receivedAt time: Date) -> NetworkPath {
        var path = path
        path.factSources = sources
        if let (connectivity, answer) = self.connectivity(for: path) {
            path.connectivity = connectivity
            path.portalURL = nil
            path.connectivityEvidence = ConnectivityEvidence(url: "", time: time, answer: answer, source: .networkManager)
        }
        return path
    }
}
