import LinuxReachability

/// Paths built by hand: the agent's path logic never needs netlink.
public enum Paths {
    /// An interface that is up with carrier and one address.
    public static func interface(_ name: String, _ index: Int32, _ type: InterfaceType, _ address: String) -> NetworkInterface {
        NetworkInterface(name: name, index: index, type: type, classificationReason: "test", isUp: true,
                         hasCarrier: true, addresses: [address])
    }

    /// A wifi interface.
    public static let wifi = interface("wlan0", 3, .wifi, "192.168.1.20")
    /// A cellular interface.
    public static let cellular = interface("wwan0", 4, .cellular, "10.64.0.2")
    /// A wired interface.
    public static let ethernet = interface("eth0", 2, .wired, "10.0.0.2")

    /// A satisfied IPv4 path through `primary`.
    public static func satisfied(via primary: NetworkInterface, source: String? = nil,
                          also others: [NetworkInterface] = []) -> NetworkPath {
        NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: primary,
                    routes: [PathRoute(family: .ipv4, interfaceName: primary.name, interfaceIndex: primary.index,
                                       gateway: nil, sourceAddress: source ?? primary.addresses.first)],
                    interfaces: ([primary] + others).sorted { $0.index < $1.index })
    }

    /// No route.
    public static let offline = NetworkPath.unsatisfied(.noRoute)
}
