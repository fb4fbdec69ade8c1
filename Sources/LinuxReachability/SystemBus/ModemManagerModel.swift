/// ModemManager's modems as far as the monitor needs them: which kernel interfaces are their
/// data ports, their registration (home or roaming) and access technology. Loaded from one
/// `GetManagedObjects` and kept current from signals; pure, with the same checks as
/// `NetworkManagerModel`.
struct ModemManagerModel: SystemServiceModel, Sendable {
    static let modemInterface = "org.freedesktop.ModemManager1.Modem"
    static let modem3gppInterface = "org.freedesktop.ModemManager1.Modem.Modem3gpp"
    static let modemCdmaInterface = "org.freedesktop.ModemManager1.Modem.ModemCdma"

    /// ModemManager serves its ObjectManager at its own root, its modems below it.
    static let bus = SystemServiceBus(
        name: "org.freedesktop.ModemManager1", objectManagerPath: "/org/freedesktop/ModemManager1",
        objectsPath: "/org/freedesktop/ModemManager1",
        wanted: [
            modemInterface: ["Ports", "AccessTechnologies"],
            modem3gppInterface: ["RegistrationState", "OperatorName"],
            modemCdmaInterface: ["Cdma1xRegistrationState", "EvdoRegistrationState"],
        ])

    /// Modems kept at most.
    static let maximumModems = 64
    /// `MM_MODEM_PORT_TYPE_NET`: the port that is a kernel network interface.
    static let netPortType: UInt32 = 2

    struct Modem: Sendable, Equatable {
        /// Kernel interfaces that carry the modem's data.
        var netPorts: [String] = []
        /// `MMModemAccessTechnology` bits.
        var accessTechnologies: UInt32?
        /// `MMModem3gppRegistrationState`.
        var registration3gpp: UInt32?
        var operatorName: String?
        /// `MMModemCdmaRegistrationState` of 1x and EV-DO.
        var registrationCdma1x: UInt32?
        var registrationEvdo: UInt32?

        var isRoaming: Bool {
            [5, 7, 10].contains(registration3gpp ?? 0) || registrationCdma1x == 3 || registrationEvdo == 3
        }

        /// ModemManager's name for the registration: the 3GPP one, else CDMA's.
        var registration: String {
            if let state = registration3gpp { return ModemManagerModel.registrationNames3gpp[Int(state)] }
            if let state = registrationEvdo ?? registrationCdma1x { return ModemManagerModel.registrationNamesCdma[Int(state)] }
            return "unknown"
        }

        var status: CellularStatus {
            CellularStatus(isRoaming: isRoaming, registration: registration,
                           accessTechnologies: ModemManagerModel.accessTechnologyNames(accessTechnologies ?? 0),
                           operatorName: operatorName.flatMap { $0.isEmpty ? nil : $0 })
        }
    }

    private(set) var modems: [String: Modem] = [:]

    /// `MMModem3gppRegistrationState` 0-11.
    static let registrationNames3gpp = [
        "idle", "home", "searching", "denied", "unknown", "roaming", "home-sms-only", "roaming-sms-only",
        "emergency-only", "home-csfb-not-preferred", "roaming-csfb-not-preferred", "attached-rlos",
    ]
    /// `MMModemCdmaRegistrationState` 0-3.
    static let registrationNamesCdma = ["unknown", "registered", "home", "roaming"]
    /// `MMModemAccessTechnology` bits 0-17.
    static let accessTechnologyBits = [
        "pots", "gsm", "gsm-compact", "gprs", "edge", "umts", "hsdpa", "hsupa", "hspa", "hspa-plus", "1xrtt",
        "evdo0", "evdoa", "evdob", "lte", "5gnr", "lte-cat-m", "lte-nb-iot",
    ]

    static func accessTechnologyNames(_ bits: UInt32) -> [String] {
        accessTechnologyBits.indices.filter { bits & (1 << UInt32($0)) != 0 }.map { accessTechnologyBits[$0] }
    }

    mutating func update(path: String, interface: String, properties: [String: DBusValue]) -> [SystemServiceProblem] {
        guard Self.bus.wanted[interface] != nil, path.hasPrefix(Self.bus.objectsPath + "/") else { return [] }
        var problems: [SystemServiceProblem] = []
        func refuse(_ property: String, _ value: DBusValue, _ expected: String) {
            problems.append(.refused(.modemManager, path, property, value, expected))
        }
        if let problem = SystemServiceProblem.admitting(path, to: modems, atMost: Self.maximumModems, .modemManager, "modems") {
            return [problem]
        }
        var modem = modems[path] ?? Modem()
        for (name, value) in properties {
            switch name {
            case "Ports":
                // a(su): port name and MMModemPortType.
                guard let ports = value.elements else { refuse(name, value, "a list of ports (a(su))"); continue }
                var names: [String] = []
                var isValid = true
                for port in ports {
                    guard case .structure(let fields) = port, fields.count == 2, let portName = fields[0].string,
                          let type = fields[1].uint32 else { isValid = false; break }
                    if type == Self.netPortType {
                        guard InterfaceName.isValid(portName) else { isValid = false; break }
                        names.append(portName)
                    }
                }
                if isValid { modem.netPorts = names } else { refuse(name, value, "a list of ports (a(su)) with interface names") }
            case "AccessTechnologies":
                if let bits = value.uint32 { modem.accessTechnologies = bits } else { refuse(name, value, "access technology bits (u)") }
            case "RegistrationState":
                if let state = value.uint32, state < Self.registrationNames3gpp.count { modem.registration3gpp = state } else { refuse(name, value, "a 3GPP registration state (u, 0-11)") }
            case "OperatorName":
                if let text = value.string, text.utf8.count <= 64 { modem.operatorName = text } else { refuse(name, value, "an operator name") }
            case "Cdma1xRegistrationState":
                if let state = value.uint32, state < 4 { modem.registrationCdma1x = state } else { refuse(name, value, "a CDMA registration state (u, 0-3)") }
            case "EvdoRegistrationState":
                if let state = value.uint32, state < 4 { modem.registrationEvdo = state } else { refuse(name, value, "a CDMA registration state (u, 0-3)") }
            default:
                break
            }
        }
        modems[path] = modem
        return problems
    }

    mutating func remove(path: String, interfaces: [String]) {
        if interfaces.contains(Self.modemInterface) { modems[path] = nil }
    }

    var summary: String {
        let roaming = modems.values.filter(\.isRoaming).count
        return "\(modems.count) modem\(modems.count == 1 ? "" : "s")" + (roaming > 0 ? ", \(roaming) roaming" : "")
    }
}
