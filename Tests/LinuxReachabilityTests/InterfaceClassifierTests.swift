import Testing
@testable import LinuxReachability

@Suite("Interface classification")
struct InterfaceClassifierTests {
    static let cases: [(InterfaceFacts, InterfaceType, String)] = [
        (InterfaceFacts(name: "wlp2s0", deviceType: "wlan", driver: "iwlwifi"), .wifi, "DEVTYPE=wlan"),
        (InterfaceFacts(name: "eth9", deviceType: "wlan"), .wifi, "DEVTYPE=wlan"),
        (InterfaceFacts(name: "mlan0", hasWirelessDirectory: true), .wifi, "wireless"),
        (InterfaceFacts(name: "wwan0", hardwareType: HardwareType.rawIP, deviceType: "wwan", driver: "qmi_wwan"), .cellular, "DEVTYPE=wwan"),
        (InterfaceFacts(name: "wwp0s20u4i6", hardwareType: HardwareType.rawIP), .cellular, "ARPHRD_RAWIP"),
        (InterfaceFacts(name: "ppp0", hardwareType: HardwareType.ppp), .cellular, "ARPHRD_PPP"),
        (InterfaceFacts(name: "usb0", driver: "qmi_wwan"), .cellular, "qmi_wwan"),
        (InterfaceFacts(name: "enx0a1b2c", driver: "cdc_mbim"), .cellular, "cdc_mbim"),
        (InterfaceFacts(name: "usb0", driver: "rndis_host"), .cellular, "tethered"),
        (InterfaceFacts(name: "eth1", driver: "ipheth"), .cellular, "tethered"),
        (InterfaceFacts(name: "enp0s20u1", driver: "cdc_ncm"), .cellular, "cdc_ncm"),
        (InterfaceFacts(name: "tun0", hardwareType: HardwareType.none, linkKind: "tun"), .other, "tun"),
        (InterfaceFacts(name: "wg0", hardwareType: HardwareType.none, linkKind: "wireguard"), .other, "wireguard"),
        (InterfaceFacts(name: "wlan0"), .wifi, "prefix 'wl'"),
        (InterfaceFacts(name: "wlp1s0", linkKind: "veth"), .wifi, "prefix 'wl'"),
        (InterfaceFacts(name: "wwan0", linkKind: "veth"), .cellular, "prefix 'ww'"),
        (InterfaceFacts(name: "enp3s0", driver: "e1000e"), .wired, "prefix 'en'"),
        (InterfaceFacts(name: "eth0"), .wired, "prefix 'eth'"),
        (InterfaceFacts(name: "br0", linkKind: "bridge", deviceType: "bridge"), .wired, "ARPHRD_ETHER"),
        (InterfaceFacts(name: "veth3f2a1b", linkKind: "veth"), .other, "virtual link kind veth"),
        (InterfaceFacts(name: "ifb0", linkKind: "ifb"), .other, "virtual link kind ifb"),
        (InterfaceFacts(name: "eth0", linkKind: "veth"), .wired, "prefix 'eth'"),
        (InterfaceFacts(name: "macvlan0", linkKind: "macvlan"), .wired, "ARPHRD_ETHER"),
        (InterfaceFacts(name: "lo", hardwareType: HardwareType.loopback, isLoopback: true), .loopback, "loopback"),
        (InterfaceFacts(name: "sit0", hardwareType: 776, linkKind: "sit"), .other, "sit"),
        (InterfaceFacts(name: "weird0", hardwareType: 999), .other, "hardware type 999"),
        // NetworkManager's DeviceType / a ModemManager data port: above names, below the kernel's device facts.
        (InterfaceFacts(name: "eth3", managerEvidence: .init(type: .wifi, reason: "NetworkManager DeviceType=wifi")), .wifi, "DeviceType=wifi"),
        (InterfaceFacts(name: "wlan9", linkKind: "veth", managerEvidence: .init(type: .wired, reason: "NetworkManager DeviceType=ethernet")), .wired, "DeviceType=ethernet"),
        (InterfaceFacts(name: "rchmodem0", linkKind: "veth", managerEvidence: .init(type: .cellular, reason: "ModemManager: data port of modem 0")), .cellular, "ModemManager"),
        (InterfaceFacts(name: "eth1", driver: "ipheth", managerEvidence: .init(type: .wired, reason: "NetworkManager DeviceType=ethernet")), .cellular, "tethered"),
        (InterfaceFacts(name: "wlp2s0", deviceType: "wlan", managerEvidence: .init(type: .wired, reason: "NetworkManager DeviceType=ethernet")), .wifi, "DEVTYPE=wlan"),
        (InterfaceFacts(name: "wg0", hardwareType: HardwareType.none, linkKind: "wireguard", managerEvidence: .init(type: .wifi, reason: "x")), .other, "wireguard"),
    ]

    @Test("kernel facts decide the type, strongest evidence first", arguments: cases)
    func classify(facts: InterfaceFacts, expected: InterfaceType, evidence: String) {
        let result = InterfaceClassifier().classify(facts)
        #expect(result.type == expected)
        #expect(result.reason.contains(evidence), "reason was '\(result.reason)'")
    }

    @Test func overridesWinOverEverything() throws {
        let classifier = InterfaceClassifier(overrides: [
            try ClassificationOverride(parsing: "wlan[0-9]=cellular", source: "--classify"),
            try ClassificationOverride(parsing: " eth* = wifi ", source: "/etc/reachability/classify.conf:3"),
        ])
        let modem = classifier.classify(InterfaceFacts(name: "wlan1", deviceType: "wlan"))
        #expect(modem.type == .cellular)
        #expect(modem.reason == "override 'wlan[0-9]=cellular' from --classify")
        #expect(classifier.classify(InterfaceFacts(name: "eth0")).type == .wifi)
        #expect(classifier.classify(InterfaceFacts(name: "enp1s0")).type == .wired)
        #expect(modem.isOverride)
        let managed = classifier.classify(InterfaceFacts(name: "eth7", managerEvidence: .init(type: .cellular, reason: "NetworkManager DeviceType=modem")))
        #expect(managed.type == .wifi && managed.isOverride, "an override beats NetworkManager's word too")
    }

    @Test("bad overrides are clear errors", arguments: ["eth0", "=wifi", "eth0=satellite", ""])
    func badOverride(text: String) {
        #expect(throws: ReachabilityError.invalidOverride) {
            try ClassificationOverride(parsing: text, source: "test")
        }
    }
}
