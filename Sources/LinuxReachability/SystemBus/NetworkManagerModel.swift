/// NetworkManager's objects as far as the monitor needs them, loaded from one
/// `GetManagedObjects` and kept current from `PropertiesChanged`, `InterfacesAdded` and
/// `InterfacesRemoved`. Pure: every value is checked here once; a value of the wrong type or out
/// of range is reported as a `SystemServiceProblem` and the last good one is kept.
struct NetworkManagerModel: SystemServiceModel, Sendable {
    static let managerPath = "/org/freedesktop/NetworkManager"
    static let managerInterface = "org.freedesktop.NetworkManager"
    static let deviceInterface = "org.freedesktop.NetworkManager.Device"
    static let dhcp4Interface = "org.freedesktop.NetworkManager.DHCP4Config"

    /// NetworkManager (>= 1.12) serves org.freedesktop.DBus.ObjectManager at /org/freedesktop;
    /// its objects live under its manager's path.
    static let bus = SystemServiceBus(
        name: "org.freedesktop.NetworkManager", objectManagerPath: "/org/freedesktop", objectsPath: managerPath,
        wanted: [
            managerInterface: ["Metered", "Connectivity", "ConnectivityCheckAvailable", "ConnectivityCheckEnabled", "Version"],
            deviceInterface: ["Interface", "IpInterface", "DeviceType", "Metered", "Ip4Connectivity", "Ip6Connectivity",
                              "Dhcp4Config"],
            dhcp4Interface: ["Options"],
        ])

    /// A hotspot's way of saying "metered" in DHCP option 43 (vendor-encapsulated options), which
    /// NetworkManager turns into Metered=guess-yes; shown as the evidence when the lease has it.
    static let androidMeteredOption = "ANDROID_METERED"

    /// Devices kept at most: a host with thousands of NetworkManager devices (containers' veths)
    /// still costs bounded memory; the rest are reported once and ignored.
    static let maximumDevices = 1024

    /// One NetworkManager device.
    struct Device: Sendable, Equatable {
        /// The control interface (for a modem its tty or cdc-wdm port).
        var interface: String?
        /// The IP interface, when it differs (a modem's `wwan0`, a Bluetooth `bnep0`); empty otherwise.
        var ipInterface: String?
        var deviceType: UInt32?
        /// What it says of the device's cost and connectivity, carried as they are into
        /// `SystemFacts.Interface`.
        var facts = DeviceFacts()
        /// The device's DHCPv4 lease object, nil for none (`/`).
        var dhcp4Config: String?

        /// The kernel interface name traffic leaves through.
        var kernelName: String? {
            if let ipInterface, !ipInterface.isEmpty { return ipInterface }
            return interface.flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    /// A device's Metered and per-family connectivity (NetworkManager >= 1.16 for those).
    struct DeviceFacts: Sendable, Equatable {
        var metered: Metered?
        var ipv4Connectivity: Connectivity?
        var ipv6Connectivity: Connectivity?
    }

    private(set) var devices: [String: Device] = [:]
    /// DHCPv4 lease objects whose options carry `ANDROID_METERED`.
    private(set) var androidMeteredLeases: Set<String> = []
    private(set) var metered: Metered?
    private(set) var connectivity: Connectivity?
    /// Whether NetworkManager's connectivity check is configured (a URI; NetworkManager >= 1.10)
    /// and turned on. Without it NetworkManager still reports a connectivity, a guess from the
    /// default route (`full` with one, `limited` without: nm-device.c's "fake" result), which is
    /// no verdict. Absent (older versions): assumed on.
    private(set) var isCheckAvailable: Bool?
    private(set) var isCheckEnabled: Bool?
    private(set) var version: String?

    /// Whether NetworkManager's connectivity values are its check's verdicts.
    var checksConnectivity: Bool { (isCheckAvailable ?? true) && (isCheckEnabled ?? true) }

    // Over 60 lines on purpose: one case per NetworkManager interface and property, beside the value each may take.
    /// Applies changed (or added) properties of one object's interface.
    mutating func update(path: String, interface: String, properties: [String: DBusValue]) -> [SystemServiceProblem] {
        var problems: [SystemServiceProblem] = []
        func refuse(_ property: String, _ value: DBusValue, _ expected: String) {
            problems.append(.refused(.networkManager, path, property, value, expected))
        }
        switch interface {
        case Self.managerInterface:
            guard path == Self.managerPath else { return [] }
            for (name, value) in properties {
                switch name {
                case "Metered":
                    if let metered = value.uint32.flatMap(Metered.init(networkManagerValue:)) { self.metered = metered } else { refuse(name, value, "a Metered value (u, 0-4)") }
                case "Connectivity":
                    if let connectivity = value.uint32.flatMap(Self.connectivity) { self.connectivity = connectivity } else { refuse(name, value, "a Connectivity value (u, 0-4)") }
                case "ConnectivityCheckAvailable":
                    if let flag = value.boolean { isCheckAvailable = flag } else { refuse(name, value, "a boolean (b)") }
                case "ConnectivityCheckEnabled":
                    if let flag = value.boolean { isCheckEnabled = flag } else { refuse(name, value, "a boolean (b)") }
                case "Version":
                    if let version = value.string, version.utf8.count <= 64 { self.version = version } else { refuse(name, value, "a version string") }
                default:
                    break
                }
            }
        case Self.deviceInterface:
            guard path.hasPrefix(Self.managerPath + "/") else { return [] }
            if let problem = SystemServiceProblem.admitting(path, to: devices, atMost: Self.maximumDevices, .networkManager, "devices") {
                return [problem]
            }
            var device = devices[path] ?? Device()
            for (name, value) in properties {
                switch name {
                case "Interface":
                    if let text = value.string, InterfaceName.isValid(text) { device.interface = text } else { refuse(name, value, "an interface name") }
                case "IpInterface":
                    if let text = value.string, text.isEmpty || InterfaceName.isValid(text) { device.ipInterface = text } else { refuse(name, value, "an interface name") }
                case "DeviceType":
                    if let type = value.uint32 { device.deviceType = type } else { refuse(name, value, "a DeviceType (u)") }
                case "Metered":
                    if let metered = value.uint32.flatMap(Metered.init(networkManagerValue:)) { device.facts.metered = metered } else { refuse(name, value, "a Metered value (u, 0-4)") }
                case "Ip4Connectivity":
                    if let connectivity = value.uint32.flatMap(Self.connectivity) { device.facts.ipv4Connectivity = connectivity } else { refuse(name, value, "a Connectivity value (u, 0-4)") }
                case "Ip6Connectivity":
                    if let connectivity = value.uint32.flatMap(Self.connectivity) { device.facts.ipv6Connectivity = connectivity } else { refuse(name, value, "a Connectivity value (u, 0-4)") }
                case "Dhcp4Config":
                    if let object = value.objectPath { device.dhcp4Config = object == "/" ? nil : object } else { refuse(name, value, "an object path") }
                default:
                    break
                }
            }
            devices[path] = device
        case Self.dhcp4Interface:
            guard path.hasPrefix(Self.managerPath + "/"), let options = properties["Options"] else { return [] }
            guard let entries = options.elements else {
                refuse("Options", options, "a dictionary (a{sv})")
                return problems
            }
            var hasAndroidMetered = false
            for case .entry(let key, let value) in entries where key.string == "vendor_encapsulated_options" {
                hasAndroidMetered = value.string?.contains(Self.androidMeteredOption) ?? false
            }
            if hasAndroidMetered { androidMeteredLeases.insert(path) } else { androidMeteredLeases.remove(path) }
        default:
            break
        }
        return problems
    }

    /// An object (or some of its interfaces) went away.
    mutating func remove(path: String, interfaces: [String]) {
        if interfaces.contains(Self.deviceInterface) { devices[path] = nil }
        if interfaces.contains(Self.dhcp4Interface) { androidMeteredLeases.remove(path) }
    }

    /// NetworkManager's `NMConnectivityState` as this library's `Connectivity` (`none` is `offline`).
    static func connectivity(_ value: UInt32) -> Connectivity? {
        switch value {
        case 0: return .unknown
        case 1: return .offline
        case 2: return .portal
        case 3: return .limited
        case 4: return .full
        default: return nil
        }
    }

    /// `NMDeviceType` names for the types that say something about cost, for evidence lines.
    static func evidence(forDeviceType type: UInt32) -> ManagerEvidence? {
        switch type {
        case 1: return ManagerEvidence(type: .wired, reason: "NetworkManager DeviceType=ethernet")
        case 2: return ManagerEvidence(type: .wifi, reason: "NetworkManager DeviceType=wifi")
        case 5: return ManagerEvidence(type: .cellular, reason: "NetworkManager DeviceType=bt (tethering to a phone over Bluetooth)")
        case 8: return ManagerEvidence(type: .cellular, reason: "NetworkManager DeviceType=modem")
        default: return nil
        }
    }

    /// A one-line summary for `status --explain`.
    var summary: String {
        var parts = ["\(devices.count) device\(devices.count == 1 ? "" : "s")"]
        if let version { parts.insert("version \(version)", at: 0) }
        if let metered { parts.append("Metered=\(metered.rawValue)") }
        if let connectivity {
            parts.append("Connectivity=\(connectivity.rawValue)\(checksConnectivity ? "" : " (guessed: its check is off, not used)")")
        }
        return parts.joined(separator: ", ")
    }
}

/// A value a service sent that was refused (the last good one is kept), for the log and
/// `status --explain`.
struct SystemServiceProblem: Sendable, Equatable, CustomStringConvertible {
    var service: FactSource.Service
    var object: String
    var property: String
    var detail: String

    /// `value` for `property` of `object` is not what it must be (`expected`).
    static func refused(_ service: FactSource.Service, _ object: String, _ property: String, _ value: DBusValue,
                        _ expected: String) -> SystemServiceProblem {
        SystemServiceProblem(service: service, object: object, property: property,
                             detail: "\(value.typedDescription) is not \(expected)")
    }

    /// Nil when `table` holds `object` or has room for it; else the problem saying it is ignored
    /// (each model keeps at most `bound` objects, so a host with thousands of them, containers'
    /// veths say, costs bounded memory).
    static func admitting<Value>(_ object: String, to table: [String: Value], atMost bound: Int,
                                 _ service: FactSource.Service, _ noun: String) -> SystemServiceProblem? {
        guard table[object] == nil, table.count >= bound else { return nil }
        return SystemServiceProblem(service: service, object: object, property: "",
                                    detail: "more than \(bound) \(noun); this one is ignored")
    }

    var description: String {
        let what = property.isEmpty ? object : "\(property) of \(object)"
        return "\(service.rawValue) sent \(what): \(detail); the last good value is kept"
    }
}

/// Kernel interface names as a service may report them.
enum InterfaceName {
    /// 1-15 bytes (IFNAMSIZ - 1), no `/`, no whitespace or control characters, not `.` or `..`,
    /// as the kernel's dev_valid_name allows (and a little stricter).
    static func isValid(_ name: String) -> Bool {
        let bytes = name.utf8
        guard (1...15).contains(bytes.count), name != ".", name != ".." else { return false }
        return bytes.allSatisfy { $0 > 0x20 && $0 != 0x2F && $0 != 0x3A && $0 != 0x7F }
    }
}
