import Foundation
import Synchronization
import LinuxReachability
import Testing
import TestSupport

@Suite("Path monitor in network namespaces", .serialized, .needsRoot)
struct PathMonitorIntegrationTests {
    @Test("link down, then up with the route restored")
    func linkDownUp() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        let first = monitor.currentPath
        #expect(first.isSatisfied)
        #expect(first.connection == .wired)
        #expect(first.primaryInterface?.name == "enp3s0")
        #expect(first.gateways == ["10.77.1.1"])
        #expect(first.primaryRoute?.sourceAddress == "10.77.1.2")

        try ip("-n \(net.client) link set enp3s0 down")
        let down = try await waitForPath(monitor, "unsatisfied after link down") { !$0.isSatisfied }
        #expect(down.unsatisfiedReason == .noInterfaceUp)
        #expect(down.connection == .unavailable)

        // The kernel flushed the IPv4 default route without RTM_DELROUTE; bringing the link
        // back alone must not report a route that no longer exists.
        try ip("-n \(net.client) link set enp3s0 up")
        let upNoRoute = try await waitForPath(monitor, "link up without route") { $0.unsatisfiedReason == .noRoute }
        #expect(!upNoRoute.isSatisfied)
        try ip("-n \(net.client) route add default via 10.77.1.1 dev enp3s0")
        _ = try await waitForPath(monitor, "satisfied again") { $0.isSatisfied && $0.primaryInterface?.name == "enp3s0" }
    }

    @Test("carrier loss through the peer keeps routes but is unsatisfied")
    func carrierLoss() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        let everything = try startMonitor(in: net.client, allInterfaces: true)
        defer { everything.cancel() }
        #expect(monitor.currentPath.isSatisfied)
        try ip("-n \(net.router) link set up1 down")
        let lost = try await waitForPath(monitor, "no carrier") { !$0.isSatisfied }
        #expect(lost.unsatisfiedReason == .noCarrier)
        #expect(lost.interfaces.isEmpty)  // only usable interfaces are listed by default
        let detailed = try await waitForPath(everything, "no carrier, all interfaces") { !$0.isSatisfied }
        #expect(detailed.interfaces.first { $0.name == "enp3s0" }?.hasCarrier == false)
        try ip("-n \(net.router) link set up1 up")
        _ = try await waitForPath(monitor, "carrier back") { $0.isSatisfied }
    }

    @Test("container churn: veth pairs created, brought up and deleted publish nothing")
    func vethChurnIsQuiet() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        let updates = Mutex<[NetworkPath]>([])
        monitor.pathUpdateHandler = { path in updates.withLock { $0.append(path) } }
        var batch = ""
        for i in 0..<100 { batch += "link add ctr\(i) type veth peer name ctp\(i)\nlink set ctr\(i) up\n" }
        for i in 0..<100 { batch += "link del ctr\(i)\n" }
        try sh(["ip", "-n", net.client, "-batch", "-"], input: batch)
        // A change that matters marks the end; it must be the only update.
        try ip("-n \(net.client) route del default")
        _ = try await waitForPath(monitor, "default route removed") { !$0.isSatisfied }
        let seen = updates.withLock { $0 }
        #expect(seen.count == 1, "updates during churn: \(seen.map { "\($0.status) \($0.interfaces.map(\.name))" })")
    }

    @Test("default route deleted, added, replaced with another gateway")
    func defaultRouteChanges() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        try ip("-n \(net.router) addr add 10.77.1.254/24 dev up1")
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        try ip("-n \(net.client) route del default")
        let gone = try await waitForPath(monitor, "no route") { !$0.isSatisfied }
        #expect(gone.unsatisfiedReason == .noRoute)
        try ip("-n \(net.client) route add default via 10.77.1.1 dev enp3s0")
        _ = try await waitForPath(monitor, "route back") { $0.gateways == ["10.77.1.1"] }
        try ip("-n \(net.client) route replace default via 10.77.1.254 dev enp3s0")
        let replaced = try await waitForPath(monitor, "new gateway") { $0.gateways == ["10.77.1.254"] }
        #expect(replaced.connection == .wired)
    }

    @Test("metric switch moves the primary between wifi and wired uplinks")
    func metricSwitch() async throws {
        let net = try Topology(uplink: "wlp1s0", subnet: 1, metric: 100)
        defer { net.close() }
        try net.uplink("enp3s0", subnet: 2, metric: 200)
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        #expect(monitor.currentPath.connection == .wifi)
        #expect(monitor.currentPath.primaryInterface?.name == "wlp1s0")
        try ip("-n \(net.client) route replace default via 10.77.2.1 dev enp3s0 metric 50")
        let wired = try await waitForPath(monitor, "wired primary") { $0.primaryInterface?.name == "enp3s0" }
        #expect(wired.connection == .wired)
        #expect(wired.primaryRoute?.sourceAddress == "10.77.2.2")
        #expect(wired.availableInterfaces.map(\.name).sorted() == ["enp3s0", "wlp1s0"])
        try ip("-n \(net.client) route del default via 10.77.2.1 dev enp3s0 metric 50")
        _ = try await waitForPath(monitor, "back to wifi") { $0.connection == .wifi }
    }

    @Test("last address removed")
    func lastAddressRemoved() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        try ip("-n \(net.client) addr del 10.77.1.2/24 dev enp3s0")
        let path = try await waitForPath(monitor, "no address") { !$0.isSatisfied }
        #expect(path.unsatisfiedReason == .noAddress)
    }

    @Test("IPv6-only uplink")
    func ipv6Only() async throws {
        let net = try Topology()
        defer { net.close() }
        try ip("link add wwan0 netns \(net.client) type veth peer name up6 netns \(net.router)")
        try ip("-n \(net.router) addr add 2001:db8:77::1/64 dev up6 nodad")
        try ip("-n \(net.router) link set up6 up")
        try ip("-n \(net.client) addr add 2001:db8:77::2/64 dev wwan0 nodad")
        try ip("-n \(net.client) link set wwan0 up")
        try ip("-n \(net.client) -6 route add default via 2001:db8:77::1 dev wwan0")
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        let path = try await waitForPath(monitor, "IPv6 path") { $0.isSatisfied }
        #expect(path.supportsIPv6)
        #expect(!path.supportsIPv4)
        #expect(path.connection == .cellular)
        #expect(path.isExpensive)
        #expect(path.gateways == ["2001:db8:77::1"])
    }

    @Test("VPN split default over a tun device")
    func vpnSplitDefault() async throws {
        let net = try Topology(uplink: "wlp1s0", subnet: 1)
        defer { net.close() }
        try net.lab.attachedTun("tun0", in: net.client)
        try ip("-n \(net.client) addr add 10.8.0.2/32 dev tun0")
        try ip("-n \(net.client) link set tun0 up")
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        #expect(monitor.currentPath.primaryInterface?.name == "wlp1s0")
        try ip("-n \(net.client) route add 0.0.0.0/1 dev tun0")
        try ip("-n \(net.client) route add 128.0.0.0/1 dev tun0")
        let vpn = try await waitForPath(monitor, "VPN primary") { $0.primaryInterface?.name == "tun0" }
        #expect(vpn.primaryInterface?.type == .other)
        #expect(vpn.primaryInterface?.classificationReason.contains("tun") == true)
        // A VPN carried over wifi is still wifi to the user.
        #expect(vpn.connection == .wifi)
        try ip("-n \(net.client) route del 0.0.0.0/1 dev tun0")
        try ip("-n \(net.client) route del 128.0.0.0/1 dev tun0")
        _ = try await waitForPath(monitor, "VPN gone") { $0.primaryInterface?.name == "wlp1s0" }
    }

    @Test("classification from names and overrides inside a namespace")
    func classification() async throws {
        let net = try Topology(uplink: "wlp1s0", subnet: 1)
        defer { net.close() }
        try net.uplink("wwan0", subnet: 2, defaultRoute: false)
        try net.uplink("enp3s0", subnet: 3, defaultRoute: false)
        try net.uplink("usb0", subnet: 4, defaultRoute: false)
        let monitor = try startMonitor(in: net.client, overrides: [
            ClassificationOverride(pattern: "usb*", type: .cellular, source: "test"),
        ])
        defer { monitor.cancel() }
        let types = Dictionary(uniqueKeysWithValues: monitor.currentPath.interfaces.map { ($0.name, $0.type) })
        #expect(types["wlp1s0"] == .wifi)
        #expect(types["wwan0"] == .cellular)
        #expect(types["enp3s0"] == .wired)
        #expect(types["usb0"] == .cellular)
        let reason = monitor.currentPath.interfaces.first { $0.name == "usb0" }?.classificationReason ?? ""
        #expect(reason.contains("override"))
    }

    @Test("100k routes: right path at start, storm ends on the kernel's path")
    func largeRouteTable() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        try net.uplink("wlp1s0", subnet: 2, defaultRoute: false)
        try net.uplink("enp9s0", subnet: 3, defaultRoute: false)
        var batch = ""
        for i in 0..<100_000 {
            batch += "route add 172.\(16 + i / 65536).\((i / 256) % 256).\(i % 256)/32 via 10.77.1.1 dev enp3s0\n"
        }
        try sh(["ip", "-n", net.client, "-batch", "-"], input: batch)
        // A deliberately small buffer: the kernel charges about 1 KiB per datagram.
        let monitor = try startMonitor(in: net.client, receiveBufferSize: 64 << 10)
        defer { monitor.cancel() }
        // Start-up time and memory with a large table are measured by bench/monitor_bench.py.
        #expect(monitor.currentPath.primaryInterface?.name == "enp3s0")

        // Delete everything, switch the default to wifi in the middle of the storm. The host
        // routes cover no lookup destination, so the kernel-side filter drops them; the link
        // flaps after the switch are delivered. The handler runs on the monitor's thread and
        // holds it when the wifi path appears until the storm is over, so the flaps must
        // overflow the buffer: the monitor then has to drain, wait for quiet and re-dump.
        let gate = DispatchSemaphore(value: 0)
        let held = Atomic<Bool>(false)
        monitor.pathUpdateHandler = { path in
            if path.primaryInterface?.name == "wlp1s0", !held.exchange(true, ordering: .relaxed) {
                gate.wait()
            }
        }
        var storm = ""
        for i in 0..<100_000 {
            storm += "route del 172.\(16 + i / 65536).\((i / 256) % 256).\(i % 256)/32\n"
            if i == 50_000 {
                storm += "route del default\nroute add default via 10.77.2.1 dev wlp1s0\n"
                for _ in 0..<500 { storm += "link set enp9s0 down\nlink set enp9s0 up\n" }
            }
        }
        try sh(["ip", "-n", net.client, "-batch", "-"], input: storm)
        gate.signal()
        let expected = try sh(["ip", "-n", net.client, "route", "get", "8.8.8.8"])
        #expect(expected.contains("dev wlp1s0"))
        _ = try await waitForPath(monitor, timeout: .seconds(10), "wifi after the storm") {
            $0.primaryInterface?.name == "wlp1s0"
        }
        // A change after the storm is seen only once the overflow has been handled.
        try ip("-n \(net.client) route replace default via 10.77.1.1 dev enp3s0")
        _ = try await waitForPath(monitor, timeout: .seconds(10), "wired after the re-dump") {
            $0.primaryInterface?.name == "enp3s0"
        }
        let wasHeld = held.load(ordering: .relaxed)
        #expect(wasHeld, "the wifi path was never published during the storm")
        #expect(monitor.statistics.overflows >= 1, "the held monitor should have overflowed: \(monitor.statistics)")
        #expect(monitor.statistics.dumps >= 2, "an overflow must end in a fresh dump: \(monitor.statistics)")
        #expect(monitor.statistics.datagrams < 50_000, "the 100k host routes should be filtered in the kernel: \(monitor.statistics)")
    }
}

@Suite("Reachability facade in a namespace", .serialized, .needsRoot)
struct ReachabilityFacadeIntegrationTests {
    @Test("whenReachable runs for the current state, whenUnreachable on link down, notification posted")
    func callbacks() async throws {
        let net = try Topology(uplink: "wlp1s0", subnet: 1)
        defer { net.close() }
        let center = NotificationCenter()
        let reachability = Reachability(configuration: .init(networkNamespace: net.client),
                                        callbackQueue: DispatchQueue(label: "test.callbacks"), notificationCenter: center)
        let (events, continuation) = AsyncStream.makeStream(of: String.self)
        reachability.whenReachable = { r in continuation.yield("reachable \(r.connection.rawValue)") }
        reachability.whenUnreachable = { _ in continuation.yield("unreachable") }
        let observer = center.addObserver(forName: .reachabilityChanged, object: nil, queue: nil) { _ in
            continuation.yield("notification")
        }
        defer { center.removeObserver(observer) }
        try reachability.startNotifier()
        defer { reachability.stopNotifier() }

        let queue = EventQueue(events)
        #expect(await next(queue) == "reachable wifi")
        #expect(await next(queue) == "notification")
        try ip("-n \(net.client) link set wlp1s0 down")
        #expect(await next(queue) == "unreachable")
        #expect(await next(queue) == "notification")
        #expect(reachability.connection == .unavailable)
    }

    /// The next event, or nil after a 5 s deadline.
    private func next(_ events: EventQueue) async -> String? {
        await events.next(within: .seconds(5))
    }
}
