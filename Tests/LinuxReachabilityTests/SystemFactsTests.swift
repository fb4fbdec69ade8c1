import Testing
@testable import LinuxReachability

/// NetworkManager's and ModemManager's objects as the bus delivers them (decoded values), and
/// what the monitor makes of them. No bus: the models are pure.
@Suite("NetworkManager and ModemManager facts")
struct SystemFactsTests {
    static let device = "/org/freedesktop/NetworkManager/Devices/3"
    static let lease = "/org/freedesktop/NetworkManager/DHCP4Config/7"

    static func nmObjects(metered: UInt32 = 3, type: UInt32 = 2, interface: String = "wlp2s0", ipInterface: String = "")
        -> SystemBusEvent.Objects {
        [
            NetworkManagerModel.managerPath: [NetworkManagerModel.managerInterface: [
                "Metered": .variant(.uint32(metered)), "Connectivity": .variant(.uint32(4)), "Version": .variant(.string("1.42.4")),
            ]],
            device: [NetworkManagerModel.deviceInterface: [
                "Interface": .variant(.string(interface)), "IpInterface": .variant(.string(ipInterface)),
                "DeviceType": .variant(.uint32(type)), "Metered": .variant(.uint32(metered)),
                "Ip4Connectivity": .variant(.uint32(2)), "Dhcp4Config": .variant(.objectPath(lease)),
            ]],
            lease: [NetworkManagerModel.dhcp4Interface: [
                "Options": .variant(.array([
                    .entry(key: .string("vendor_encapsulated_options"), value: .variant(.string("ANDROID_METERED"))),
                    .entry(key: .string("routers"), value: .variant(.string("192.168.43.1"))),
                ])),
            ]],
        ]
    }

    static let used = [FactSource(service: .networkManager, state: .used, detail: "test")]

    @Test func aHotspotsLeaseIsTheEvidenceForGuessYes() {
        var model = NetworkManagerModel()
        #expect(model.load(Self.nmObjects()).isEmpty)
        let facts = SystemFacts(networkManager: model, modemManager: nil, sources: Self.used)
        let wifi = facts.interfaces["wlp2s0"]
        #expect(wifi?.networkManager?.metered == .guessYes)
        #expect(wifi?.meteredHint == "DHCP ANDROID_METERED")
        #expect(wifi?.evidence == ManagerEvidence(type: .wifi, reason: "NetworkManager DeviceType=wifi"))
        #expect(wifi?.networkManager?.ipv4Connectivity == .portal)
        #expect(facts.globalMetered == .guessYes && facts.connectivity == .full)
        #expect(model.summary == "version 1.42.4, 1 device, Metered=guess-yes, Connectivity=full")
        let cost = InterfaceCost.decide(Classification(type: .wifi, reason: "uevent DEVTYPE=wlan"), facts: wifi)
        #expect(cost.isExpensive && cost.reason == "NetworkManager: Metered=guess-yes (DHCP ANDROID_METERED)")
    }

    @Test func aModemDeviceIsKnownByItsIPInterface() {
        var model = NetworkManagerModel()
        _ = model.load(Self.nmObjects(metered: 3, type: 8, interface: "cdc-wdm0", ipInterface: "wwan0"))
        let facts = SystemFacts(networkManager: model, modemManager: nil, sources: Self.used)
        #expect(facts.interfaces["cdc-wdm0"] == nil)
        #expect(facts.interfaces["wwan0"]?.evidence?.type == .cellular)
    }

    @Test("wrong types, out-of-range values and impossible names are refused; the last good value stays",
          arguments: [
              ("Metered", DBusValue.variant(.string("yes")), "'yes' of type s is not a Metered value"),
              ("Metered", .variant(.uint32(5)), "5 of type u is not a Metered value"),
              ("Metered", .variant(.int32(1)), "1 of type i is not a Metered value"),
              ("Metered", .variant(.oversized(signature: "s", reason: "longer than 4096 bytes")), "a value of type s (longer than 4096 bytes)"),
              ("Interface", .variant(.string("wl/../x")), "is not an interface name"),
              ("Interface", .variant(.string("0123456789abcdef")), "is not an interface name"),
              ("Interface", .variant(.string("")), "is not an interface name"),
              ("Interface", .variant(.string("wl p")), "is not an interface name"),
              ("DeviceType", .variant(.array([.uint32(2)])), "is not a DeviceType"),
              ("Ip4Connectivity", .variant(.uint32(0xFFFF_FFFF)), "is not a Connectivity value"),
              ("Dhcp4Config", .variant(.string("/x")), "is not an object path"),
          ] as [(String, DBusValue, String)])
    func hostileDeviceValues(property: String, value: DBusValue, problem: String) {
        var model = NetworkManagerModel()
        _ = model.load(Self.nmObjects())
        let before = model
        let problems = model.update(path: Self.device, interface: NetworkManagerModel.deviceInterface, properties: [property: value])
        #expect(problems.count == 1)
        #expect(problems.first?.description.contains(problem) == true, "\(problems)")
        #expect(problems.first?.description.hasSuffix("the last good value is kept") == true)
        #expect(model == before)
    }

    @Test func devicesAreBoundedAndObjectsOutsideNetworkManagerIgnored() {
        var model = NetworkManagerModel()
        for index in 0..<NetworkManagerModel.maximumDevices {
            #expect(model.update(path: "/org/freedesktop/NetworkManager/Devices/\(index)", interface: NetworkManagerModel.deviceInterface,
                                 properties: ["Interface": .string("d\(index)")]).isEmpty)
        }
        let refused = model.update(path: "/org/freedesktop/NetworkManager/Devices/x", interface: NetworkManagerModel.deviceInterface,
                                   properties: ["Interface": .string("x")])
        #expect(refused.first?.detail.contains("more than 1024 devices") == true)
        #expect(model.devices.count == NetworkManagerModel.maximumDevices)
        // Updating a known device still works at the bound.
        #expect(model.update(path: "/org/freedesktop/NetworkManager/Devices/0", interface: NetworkManagerModel.deviceInterface,
                             properties: ["Metered": .uint32(1)]).isEmpty)
        var other = NetworkManagerModel()
        _ = other.update(path: "/elsewhere/Devices/1", interface: NetworkManagerModel.deviceInterface, properties: ["Interface": .string("x")])
        _ = other.update(path: "/org/freedesktop/Other", interface: NetworkManagerModel.managerInterface, properties: ["Metered": .uint32(1)])
        #expect(other == NetworkManagerModel())
    }

    @Test func removedDevicesAndLeasesAreForgotten() {
        var model = NetworkManagerModel()
        _ = model.load(Self.nmObjects())
        model.remove(path: Self.lease, interfaces: [NetworkManagerModel.dhcp4Interface])
        #expect(SystemFacts(networkManager: model, modemManager: nil, sources: []).interfaces["wlp2s0"]?.meteredHint == nil)
        model.remove(path: Self.device, interfaces: [NetworkManagerModel.deviceInterface])
        #expect(SystemFacts(networkManager: model, modemManager: nil, sources: []).interfaces.isEmpty)
    }

    static let modem = "/org/freedesktop/ModemManager1/Modem/0"

    static func modemObjects(registration: UInt32, access: UInt32 = 1 << 14) -> SystemBusEvent.Objects {
        [modem: [
            ModemManagerModel.modemInterface: [
                "Ports": .variant(.array([.structure([.string("wwan0"), .uint32(2)]), .structure([.string("cdc-wdm0"), .uint32(6)])])),
                "AccessTechnologies": .variant(.uint32(access)),
            ],
            ModemManagerModel.modem3gppInterface: ["RegistrationState": .variant(.uint32(registration)),
                                                   "OperatorName": .variant(.string("Operator"))],
        ]]
    }

    @Test("roaming registrations", arguments: [(1, false, "home"), (5, true, "roaming"), (7, true, "roaming-sms-only"),
                                               (10, true, "roaming-csfb-not-preferred"), (2, false, "searching"), (11, false, "attached-rlos")]
          as [(UInt32, Bool, String)])
    func roaming(registration: UInt32, isRoaming: Bool, name: String) {
        var model = ModemManagerModel()
        #expect(model.load(Self.modemObjects(registration: registration, access: 1 << 15 | 1 << 14 | 1 << 9)).isEmpty)
        let facts = SystemFacts(networkManager: nil, modemManager: model, sources: [])
        #expect(facts.interfaces["wwan0"]?.cellular == CellularStatus(isRoaming: isRoaming, registration: name,
                                                                       accessTechnologies: ["hspa-plus", "lte", "5gnr"],
                                                                       operatorName: "Operator"))
        #expect(facts.interfaces["wwan0"]?.evidence == ManagerEvidence(type: .cellular, reason: "ModemManager: data port of modem 0"))
        #expect(facts.interfaces["cdc-wdm0"] == nil, "only net ports are interfaces")
    }

    @Test func cdmaRoamingCounts() {
        var model = ModemManagerModel()
        _ = model.update(path: Self.modem, interface: ModemManagerModel.modemInterface,
                         properties: ["Ports": .array([.structure([.string("ppp0"), .uint32(2)])])])
        _ = model.update(path: Self.modem, interface: ModemManagerModel.modemCdmaInterface, properties: ["EvdoRegistrationState": .uint32(3)])
        #expect(model.modems[Self.modem]?.status.isRoaming == true)
        #expect(model.modems[Self.modem]?.status.registration == "roaming")
    }

    @Test func hostileModemValues() {
        var model = ModemManagerModel()
        _ = model.load(Self.modemObjects(registration: 1))
        let before = model
        for (property, value) in [("RegistrationState", DBusValue.uint32(12)), ("Ports", .array([.structure([.string("a/b"), .uint32(2)])])),
                                  ("Ports", .array([.string("wwan0")])), ("AccessTechnologies", .string("lte")),
                                  ("OperatorName", .oversized(signature: "s", reason: "longer than 4096 bytes"))] {
            let interface = property == "RegistrationState" || property == "OperatorName"
                ? ModemManagerModel.modem3gppInterface : ModemManagerModel.modemInterface
            #expect(model.update(path: Self.modem, interface: interface, properties: [property: value]).count == 1, "\(property)")
        }
        #expect(model == before)
    }

    @Test("the cost rules, strongest first", arguments: [
        (InterfaceType.wifi, false, Metered?.none, false, "not cellular-like"),
        (.wifi, false, .guessYes, true, "NetworkManager: Metered=guess-yes"),
        (.wifi, false, .yes, true, "NetworkManager: Metered=yes (set on the connection)"),
        (.cellular, false, .no, false, "NetworkManager: Metered=no (set on the connection)"),
        (.cellular, false, .guessNo, true, "cellular-like (test), NetworkManager: Metered=guess-no"),
        (.wired, false, .unknown, false, "not cellular-like, NetworkManager: Metered=unknown"),
        (.wifi, true, .guessYes, false, "not cellular by override 'x=wifi' from test (NetworkManager: Metered=guess-yes not used)"),
        (.cellular, true, .no, true, "cellular by override 'x=cellular' from test (NetworkManager: Metered=no not used)"),
    ] as [(InterfaceType, Bool, Metered?, Bool, String)])
    func cost(type: InterfaceType, isOverride: Bool, metered: Metered?, isExpensive: Bool, reason: String) {
        var classification = Classification(type: type, reason: isOverride ? "override 'x=\(type.rawValue)' from test" : "test")
        classification.isOverride = isOverride
        let facts = metered.map { SystemFacts.Interface(networkManager: .init(metered: $0)) }
        let decision = InterfaceCost.decide(classification, facts: facts)
        #expect(decision.isExpensive == isExpensive)
        #expect(decision.reason == reason)
    }

    /// Satisfied over wlp2s0 (IPv4), NetworkManager's device in `nmObjects`.
    static let wifiPath: NetworkPath = {
        let wifi = NetworkInterface(name: "wlp2s0", index: 3, type: .wifi, classificationReason: "t", isUp: true, hasCarrier: true,
                                    addresses: ["192.0.2.20"])
        return NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: wifi,
                           routes: [PathRoute(family: .ipv4, interfaceName: "wlp2s0", interfaceIndex: 3, gateway: nil, sourceAddress: nil)],
                           interfaces: [wifi])
    }()

    @Test func connectivityComesFromThePrimaryDeviceThenTheGlobalAnswer() {
        let path = Self.wifiPath
        var facts = SystemFacts(interfaces: ["wlp2s0": .init(devicePath: Self.device, networkManager: .init(ipv4Connectivity: .portal))], connectivity: .full)
        #expect(facts.connectivity(for: path)?.connectivity == .portal)
        #expect(facts.connectivity(for: path)?.answer == "NetworkManager: Ip4Connectivity=portal on wlp2s0")
        facts.interfaces["wlp2s0"]?.networkManager?.ipv4Connectivity = nil
        #expect(facts.connectivity(for: path)?.answer == "NetworkManager: Connectivity=full (global)")
        facts.interfaces["wlp2s0"]?.networkManager?.ipv4Connectivity = .offline
        #expect(facts.connectivity(for: path) == nil, "NetworkManager does not route through it: no answer")
        facts.interfaces = [:]
        #expect(facts.connectivity(for: path) == nil, "not NetworkManager's device: its global answer is about another one")
        #expect(facts.connectivity(for: .unsatisfied(.noRoute)) == nil)
        let applied = SystemFacts(interfaces: ["wlp2s0": .init(devicePath: Self.device, networkManager: .init(ipv4Connectivity: .limited))], sources: Self.used)
            .apply(to: path, receivedAt: .init(timeIntervalSince1970: 0))
        #expect(applied.connectivity == .limited && applied.connectivityEvidence?.source == .networkManager)
        #expect(applied.factSources == Self.used)
    }

    /// Without a check of its own (no URI configured, Debian's default, or turned off),
    /// NetworkManager still reports `full` for a device with a default route and `limited`
    /// without one: a guess, not a verdict, so it is not the path's connectivity.
    @Test func networkManagersGuessWhileItsCheckIsOffIsNotUsed() {
        var model = NetworkManagerModel()
        _ = model.load(Self.nmObjects())
        #expect(model.checksConnectivity, "absent properties (NetworkManager < 1.10, the mock): its values are verdicts")
        #expect(SystemFacts(networkManager: model, modemManager: nil, sources: Self.used).connectivity(for: Self.wifiPath)?.connectivity == .portal)
        let manager = NetworkManagerModel.managerPath, interface = NetworkManagerModel.managerInterface
        #expect(model.update(path: manager, interface: interface, properties: ["ConnectivityCheckEnabled": .variant(.boolean(false))]).isEmpty)
        var facts = SystemFacts(networkManager: model, modemManager: nil, sources: Self.used)
        #expect(facts.connectivity(for: Self.wifiPath) == nil)
        #expect(facts.apply(to: Self.wifiPath, receivedAt: .init(timeIntervalSince1970: 0)).connectivityEvidence == nil)
        #expect(model.summary == "version 1.42.4, 1 device, Metered=guess-yes, Connectivity=full (guessed: its check is off, not used)")
        _ = model.update(path: manager, interface: interface, properties: ["ConnectivityCheckEnabled": .variant(.boolean(true)),
                                                                           "ConnectivityCheckAvailable": .variant(.boolean(false))])
        facts = SystemFacts(networkManager: model, modemManager: nil, sources: Self.used)
        #expect(facts.connectivity(for: Self.wifiPath) == nil, "no URI configured: the same guess")
        let problems = model.update(path: manager, interface: interface, properties: ["ConnectivityCheckAvailable": .variant(.string("yes"))])
        #expect(problems.count == 1 && !model.checksConnectivity, "a wrong type is refused and the last good value kept")
        _ = model.update(path: manager, interface: interface, properties: ["ConnectivityCheckAvailable": .variant(.boolean(true))])
        #expect(SystemFacts(networkManager: model, modemManager: nil, sources: Self.used).connectivity(for: Self.wifiPath)?.connectivity == .portal)
    }

    @Test func valuesAreDescribedShortlyForLogs() {
        #expect(DBusValue.string(String(repeating: "x", count: 100)).logDescription.hasSuffix("...' (100 bytes)"))
        #expect(DBusValue.string("a\u{1B}[2Jb").logDescription == "'a\\u{1b}[2Jb'")
        #expect(DBusValue.array((0..<10).map { .uint32($0) }).logDescription == "[0, 1, 2, 3, ... 10 in all]")
        #expect(DBusValue.variant(.array([.structure([.string("a"), .uint32(2)])])).signature == "a(su)")
    }

    @Test(arguments: ["wlp2s0", "wwan0", "a", "enx0a1b2c3d4e5f"])
    func validInterfaceNames(name: String) { #expect(InterfaceName.isValid(name)) }

    @Test(arguments: ["", ".", "..", "a/b", "a:b", "a b", "a\u{7F}", "0123456789abcdef", "tab\t"])
    func invalidInterfaceNames(name: String) { #expect(!InterfaceName.isValid(name)) }
}
