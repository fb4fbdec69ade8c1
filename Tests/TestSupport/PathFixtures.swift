import Foundation
import LinuxReachability

/// Paths and interfaces the tests script, shaped like what the monitor would report.
public enum PathFixtures {
    /// 2026-11-30T06:00:00.125Z (an exact binary fraction, so the milliseconds print exactly).
    public static let time = Date(timeIntervalSince1970: 1_796_018_400.125)
    /// `time` as the event lines print it.
    public static let timeText = "2026-11-30T06:00:00.125Z"

    /// A wifi interface with an IPv4 and a link-local address.
    public static let wifi = NetworkInterface(
        name: "wlp2s0", index: 3, type: .wifi, classificationReason: "uevent DEVTYPE=wlan",
        isUp: true, hasCarrier: true, addresses: ["192.0.2.20", "fe80::20"])
    /// A wired interface without carrier.
    public static let ethernetDown = NetworkInterface(
        name: "eth0", index: 2, type: .wired, classificationReason: "ARPHRD_ETHER",
        isUp: true, hasCarrier: false, addresses: [])
    /// A wired interface with carrier and both families.
    public static let ethernet = NetworkInterface(
        name: "eth0", index: 2, type: .wired, classificationReason: "ARPHRD_ETHER",
        isUp: true, hasCarrier: true, addresses: ["198.51.100.7", "2001:db8::7"])
    /// A cellular modem.
    public static let modem = NetworkInterface(
        name: "wwan0", index: 5, type: .cellular, classificationReason: "uevent DEVTYPE=wwan",
        isUp: true, hasCarrier: true, addresses: ["10.64.0.2"])

    /// Satisfied over wifi, IPv4 only, with a gateway.
    public static let satisfiedWifi = NetworkPath(
        status: .satisfied, unsatisfiedReason: nil, primaryInterface: wifi,
        routes: [PathRoute(family: .ipv4, interfaceName: "wlp2s0", interfaceIndex: 3,
                           gateway: "192.0.2.1", sourceAddress: "192.0.2.20")],
        interfaces: [ethernetDown, wifi])

    /// Satisfied over wifi with both families.
    public static let dualStackWifi = NetworkPath(
        status: .satisfied, unsatisfiedReason: nil, primaryInterface: wifi,
        routes: [PathRoute(family: .ipv4, interfaceName: "wlp2s0", interfaceIndex: 3,
                           gateway: "192.0.2.1", sourceAddress: "192.0.2.20"),
                 PathRoute(family: .ipv6, interfaceName: "wlp2s0", interfaceIndex: 3,
                           gateway: "fe80::1", sourceAddress: "2001:db8::20")],
        interfaces: [ethernetDown, wifi])

    /// Addresses but no route out.
    public static let noRoute = NetworkPath.unsatisfied(.noRoute, interfaces: [ethernetDown, wifi])

    /// Satisfied over wired Ethernet through IPv6 only.
    public static let ipv6OnlyWired = NetworkPath(
        status: .satisfied, unsatisfiedReason: nil, primaryInterface: ethernet,
        routes: [PathRoute(family: .ipv6, interfaceName: "eth0", interfaceIndex: 2,
                           gateway: "fe80::1", sourceAddress: "2001:db8::7")],
        interfaces: [ethernet])

    /// Satisfied over wired Ethernet, IPv4, on-link (no gateway).
    public static let wiredOnLink = NetworkPath(
        status: .satisfied, unsatisfiedReason: nil, primaryInterface: ethernet,
        routes: [PathRoute(family: .ipv4, interfaceName: "eth0", interfaceIndex: 2,
                           gateway: nil, sourceAddress: "198.51.100.7")],
        interfaces: [ethernet])

    /// Satisfied over a cellular modem: expensive.
    public static let cellular = NetworkPath(
        status: .satisfied, unsatisfiedReason: nil, primaryInterface: modem,
        routes: [PathRoute(family: .ipv4, interfaceName: "wwan0", interfaceIndex: 5,
                           gateway: "10.64.0.1", sourceAddress: "10.64.0.2")],
        interfaces: [modem])

    /// The same modem registered on a visited network (ModemManager).
    public static let roamingCellular: NetworkPath = {
        var path = cellular
        let status = CellularStatus(isRoaming: true, registration: "roaming", accessTechnologies: ["lte"])
        path.primaryInterface?.cellular = status
        path.interfaces[0].cellular = status
        return path
    }()

    /// A phone's hotspot: wifi that NetworkManager reports metered (guess-yes).
    public static let meteredWifi: NetworkPath = {
        var path = satisfiedWifi
        for index in path.interfaces.indices where path.interfaces[index].type == .wifi {
            path.interfaces[index].isExpensive = true
            path.interfaces[index].metered = .guessYes
            path.interfaces[index].costReason = "NetworkManager: Metered=guess-yes"
        }
        path.primaryInterface = path.interfaces.first { $0.type == .wifi }
        return path
    }()
}
