import Foundation
import LinuxReachability
import Synchronization

/// A client namespace with a wifi-named uplink (and optionally more) and a private system bus
/// whose mocked NetworkManager runs in that namespace, describing the same interfaces.
public final class SystemFactsLab: Sendable {
    /// The client and router namespaces.
    public let net: Topology
    /// The private system bus.
    public let bus: SystemBusLab
    /// What the monitors' logger wrote.
    public let log = LogLines()
    /// The monitors `monitor()` started, cancelled by `close()`.
    private let monitors = Mutex<[PathMonitor]>([])

    /// Builds the namespaces with `uplinks` and starts the bus.
    public init(uplinks: [(name: String, subnet: Int, metric: Int)] = [("wlrch0", 1, 10)]) throws {
        net = try Topology()
        bus = try SystemBusLab()
        for uplink in uplinks { try net.uplink(uplink.name, subnet: uplink.subnet, metric: uplink.metric) }
    }

    /// python-dbusmock's NetworkManager in the client namespace with a wifi device for `wlrch0`;
    /// returns the device's object path.
    public func networkManagerWithWifi(metered: UInt32, ipv4Connectivity: UInt32? = nil) throws -> String {
        try bus.startNetworkManager(in: net.client)
        return try bus.addDevice("wlan0", kind: "wifi", interface: "wlrch0", metered: metered, ipv4Connectivity: ipv4Connectivity)
    }

    /// `networkManagerWithWifi` and a monitor on it: the device's object path and the monitor.
    public func wifiMonitor(metered: UInt32, ipv4Connectivity: UInt32? = nil) throws -> (device: String, monitor: PathMonitor) {
        let device = try networkManagerWithWifi(metered: metered, ipv4Connectivity: ipv4Connectivity)
        return (device, try monitor())
    }

    /// A logger whose lines the test can read.
    public var logger: Logger {
        let log = log
        return Logger(label: "test", minimumLevel: .debug, sink: { line in log.append(line) })
    }

    /// A started monitor of the client namespace on this lab's bus (cancelled by `close()`).
    public func monitor(overrides: [ClassificationOverride] = [], systemBus: PathMonitor.Configuration.SystemBus? = nil,
                 allInterfaces: Bool = false) throws -> PathMonitor {
        let monitor = PathMonitor(configuration: .init(
            networkNamespace: net.client, classificationOverrides: overrides, logger: logger,
            includesAllInterfaces: allInterfaces, systemBus: systemBus ?? .address(bus.address)))
        try monitor.start()
        monitors.withLock { $0.append(monitor) }
        return monitor
    }

    /// Cancels the monitors, stops the bus and removes the namespaces.
    public func close() {
        for monitor in monitors.withLock({ $0 }) { monitor.cancel() }
        bus.close()
        net.close()
    }
}

extension NetworkPath {
    /// The state of one service, from `factSources`.
    public func source(_ service: FactSource.Service) -> FactSource.State? {
        factSources.first { $0.service == service }?.state
    }
}

/// Lines a test's logger wrote.
public typealias LogLines = SeenLog<String>
