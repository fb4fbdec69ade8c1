import Glibc
import FoundationEssentials

/// A user rule `PATTERN=TYPE` that wins over every kernel fact.
public struct ClassificationOverride: Sendable, Hashable {
    /// Shell-style glob over interface names (`*`, `?`, `[...]`).
    public var pattern: String
    /// The type to report for matching interfaces.
    public var type: InterfaceType
    /// Where the rule came from, e.g. `--classify` or a config file path and line.
    public var source: String

    /// Creates an override.
    public init(pattern: String, type: InterfaceType, source: String) {
        self.pattern = pattern
        self.type = type
        self.source = source
    }

    /// Parses `PATTERN=TYPE` (TYPE one of wired, wifi, cellular, loopback, other; any case);
    /// spaces around either side are ignored. Errors read `SOURCE: what is wrong`.
    public init(parsing text: String, source: String) throws(ReachabilityError) {
        guard let equals = text.firstIndex(of: "=") else {
            throw ReachabilityError(.invalidOverride, "\(source): expected PATTERN=TYPE, got '\(text)'")
        }
        let pattern = text[..<equals].trimmingWhitespace()
        let typeName = text[text.index(after: equals)...].trimmingWhitespace().lowercased()
        guard !pattern.isEmpty else {
            throw ReachabilityError(.invalidOverride, "\(source): missing interface name pattern before '=' in '\(text)'")
        }
        guard let type = InterfaceType(rawValue: typeName) else {
            let names = InterfaceType.allCases.map(\.rawValue).joined(separator: ", ")
            throw ReachabilityError(.invalidOverride, "\(source): unknown type '\(typeName)' (expected one of \(names))")
        }
        self.init(pattern: pattern, type: type, source: source)
    }

    /// Whether `name` matches the glob, as fnmatch(3) would without flags.
    public func matches(_ name: String) -> Bool {
        fnmatch(pattern, name, 0) == 0
    }
}

/// What the kernel tells about one interface; everything the classifier looks at.
///
/// Collected from rtnetlink (name, ARPHRD type, link kind) and sysfs (uevent DEVTYPE,
/// `wireless`/`phy80211`, driver). Tests build these by hand.
public struct InterfaceFacts: Sendable, Hashable {
    /// Interface name.
    public var name: String
    /// ARPHRD_* hardware type from ifinfomsg.
    public var hardwareType: UInt16
    /// IFLA_INFO_KIND (`veth`, `tun`, `wireguard`, `bridge`, ...), nil for physical devices.
    public var linkKind: String?
    /// DEVTYPE from /sys/class/net/NAME/uevent (`wlan`, `wwan`, `bridge`, ...).
    public var deviceType: String?
    /// Whether /sys/class/net/NAME/wireless or phy80211 exists.
    public var hasWirelessDirectory: Bool
    /// Driver name from /sys/class/net/NAME/device/driver.
    public var driver: String?
    /// IFF_LOOPBACK.
    public var isLoopback: Bool
    /// What a service managing the interface says it is (NetworkManager's DeviceType, a
    /// ModemManager modem's data port); nil without one.
    public var managerEvidence: ManagerEvidence?

    /// Creates a fact set.
    public init(name: String, hardwareType: UInt16 = HardwareType.ether, linkKind: String? = nil,
                deviceType: String? = nil, hasWirelessDirectory: Bool = false, driver: String? = nil,
                isLoopback: Bool = false, managerEvidence: ManagerEvidence? = nil) {
        self.name = name
        self.hardwareType = hardwareType
        self.linkKind = linkKind
        self.deviceType = deviceType
        self.hasWirelessDirectory = hasWirelessDirectory
        self.driver = driver
        self.isLoopback = isLoopback
        self.managerEvidence = managerEvidence
    }
}

/// ARPHRD_* values from <linux/if_arp.h> that the classifier uses.
public enum HardwareType {
    /// ARPHRD_ETHER.
    public static let ether: UInt16 = 1
    /// ARPHRD_PPP.
    public static let ppp: UInt16 = 512
    /// ARPHRD_RAWIP (raw-IP modems).
    public static let rawIP: UInt16 = 519
    /// ARPHRD_LOOPBACK.
    public static let loopback: UInt16 = 772
    /// ARPHRD_NONE (tun, wireguard).
    public static let none: UInt16 = 0xFFFE
    /// ARPHRD_IEEE80211 and its radiotap variants.
    public static let ieee80211: ClosedRange<UInt16> = 801...804
}

/// A classification with the evidence that decided it.
public struct Classification: Sendable, Hashable {
    /// The type.
    public var type: InterfaceType
    /// Human-readable evidence, e.g. `driver qmi_wwan (raw-IP modem)`.
    public var reason: String
    /// Whether a user override decided it (it then decides the cost too, over NetworkManager).
    var isOverride = false
}

/// Decides an interface's type from facts, strongest evidence first.
///
/// Order: user override > uevent DEVTYPE (wlan, wwan) and `wireless`/`phy80211` > ARPHRD_PPP,
/// ARPHRD_RAWIP, raw-IP modem drivers > USB-tethered phone drivers > tunnel link kinds >
/// NetworkManager's DeviceType or a ModemManager data port > systemd predictable-name prefixes >
/// virtual link kinds (veth, ifb) > ARPHRD_ETHER.
///
/// NetworkManager's word ranks below the kernel's device facts on purpose: it calls a USB-tethered
/// phone (`rndis_host`, `ipheth`) `ethernet`, which is true of the framing and wrong about the cost.
public struct InterfaceClassifier: Sendable {
    /// User rules, first match wins.
    public var overrides: [ClassificationOverride]

    /// Drivers of raw-IP cellular modems.
    public static let modemDrivers: Set<String> = ["qmi_wwan", "cdc_mbim", "qmi_wwan_q", "mhi_net", "ipa", "rmnet"]
    /// Drivers of phones sharing their cellular connection over USB.
    public static let tetheringDrivers: Set<String> = ["rndis_host", "ipheth", "cdc_ncm", "cdc_ether"]
    /// Link kinds that are tunnels or VPNs.
    public static let tunnelKinds: Set<String> = [
        "tun", "wireguard", "ipip", "gre", "gretap", "ip6gre", "ip6gretap", "sit", "ip6tnl", "vti", "vti6",
        "xfrm", "geneve", "vxlan", "openvpn",
    ]

    /// Ethernet-framed link kinds that carry no traffic off the host by themselves (container
    /// veth ends, ifb, dummy); bridges, bonds and macvlans are left wired because they wrap NICs.
    public static let virtualKinds: Set<String> = ["veth", "ifb", "dummy", "nlmon", "vcan", "vxcan", "netdevsim"]

    /// Creates a classifier with user overrides.
    public init(overrides: [ClassificationOverride] = []) {
        self.overrides = overrides
    }

    /// Classifies one interface.
    public func classify(_ facts: InterfaceFacts) -> Classification {
        if let rule = overrides.first(where: { $0.matches(facts.name) }) {
            return Classification(type: rule.type, reason: "override '\(rule.pattern)=\(rule.type.rawValue)' from \(rule.source)",
                                  isOverride: true)
        }
        if facts.isLoopback || facts.hardwareType == HardwareType.loopback {
            return Classification(type: .loopback, reason: "loopback device")
        }
        switch facts.deviceType {
        case "wlan": return Classification(type: .wifi, reason: "uevent DEVTYPE=wlan")
        case "wwan": return Classification(type: .cellular, reason: "uevent DEVTYPE=wwan")
        default: break
        }
        if facts.hasWirelessDirectory {
            return Classification(type: .wifi, reason: "sysfs wireless/phy80211 present")
        }
        if HardwareType.ieee80211.contains(facts.hardwareType) {
            return Classification(type: .wifi, reason: "ARPHRD_IEEE80211 hardware type")
        }
        if facts.hardwareType == HardwareType.ppp {
            return Classification(type: .cellular, reason: "ARPHRD_PPP (point-to-point modem link)")
        }
        if facts.hardwareType == HardwareType.rawIP {
            return Classification(type: .cellular, reason: "ARPHRD_RAWIP (raw-IP modem)")
        }
        if let driver = facts.driver, Self.modemDrivers.contains(driver) {
            return Classification(type: .cellular, reason: "driver \(driver) (raw-IP modem)")
        }
        if let driver = facts.driver, Self.tetheringDrivers.contains(driver) {
            return Classification(type: .cellular, reason: "driver \(driver) (USB-tethered phone)")
        }
        if let kind = facts.linkKind, Self.tunnelKinds.contains(kind) {
            return Classification(type: .other, reason: "link kind \(kind) (tunnel/VPN)")
        }
        if let evidence = facts.managerEvidence {
            return Classification(type: evidence.type, reason: evidence.reason)
        }
        for (prefix, type) in [("wl", InterfaceType.wifi), ("ww", .cellular), ("en", .wired)]
        where facts.name.hasPrefix(prefix) {
            return Classification(type: type, reason: "name prefix '\(prefix)' (systemd predictable name)")
        }
        if facts.name.hasPrefix("eth") {
            // ethN is what the kernel names Ethernet devices itself, before (or without) udev renaming.
            return Classification(type: .wired, reason: "name prefix 'eth' (the kernel's legacy Ethernet name)")
        }
        if let kind = facts.linkKind, Self.virtualKinds.contains(kind) {
            return Classification(type: .other, reason: "virtual link kind \(kind) without a predictable name")
        }
        if facts.hardwareType == HardwareType.ether {
            let kind = facts.linkKind.map { ", link kind \($0)" } ?? ""
            return Classification(type: .wired, reason: "ARPHRD_ETHER hardware type\(kind)")
        }
        if facts.hardwareType == HardwareType.none {
            return Classification(type: .other, reason: "no link-layer header (ARPHRD_NONE)")
        }
        return Classification(type: .other, reason: "hardware type \(facts.hardwareType) without a better clue")
    }
}
