import Foundation
import LinuxReachability
import Synchronization
import Testing
import TestSupport

/// Waits until `monitor` publishes a path to `host` satisfying `predicate`, or fails after `timeout`.
func waitForHostPath(_ monitor: PathMonitor, _ host: String, timeout: Duration = .seconds(5),
                     sourceLocation: SourceLocation = #_sourceLocation, _ description: String,
                     _ predicate: @escaping @Sendable (HostPath) -> Bool) async throws -> HostPath {
    try await firstElement(of: monitor.paths(to: host), timeout: timeout, sourceLocation: sourceLocation,
                           "\(description) (\(host))", describe: { host in
        "\(host.addresses) \(host.resolutionFailure ?? "") \(host.path.map(describe) ?? "no path")"
    }, predicate)
}

/// Collects every path to one host while it runs.
final class HostPathRecorder: Sendable {
    private let log = SeenLog<HostPath>()
    private let task: Task<Void, Never>

    init(_ monitor: PathMonitor, _ host: String) {
        let stream = monitor.paths(to: host)
        task = Task { [log] in for await path in stream { log.append(path) } }
    }

    var all: [HostPath] { log.all }
    func stop() { task.cancel() }
}

@Suite("Paths to one host: the kernel's route to its address", .serialized, .needsRoot)
struct HostPathIntegrationTests {
    @Test("a LAN with no default route: its hosts and loopback are reachable, the Internet is not")
    func lanWithoutDefaultRoute() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1, defaultRoute: false)
        defer { net.close() }
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        #expect(monitor.currentPath.unsatisfiedReason == .noRoute)

        let server = try await waitForHostPath(monitor, "10.77.1.1", "the LAN server") { $0.path != nil }
        #expect(server.isReachable)
        #expect(server.addresses == ["10.77.1.1"])
        #expect(server.path?.primaryInterface?.name == "enp3s0")
        #expect(server.path?.routes == [PathRoute(family: .ipv4, interfaceName: "enp3s0", interfaceIndex: server.path!.routes[0].interfaceIndex,
                                                  gateway: nil, sourceAddress: "10.77.1.2")])
        let internet = try await waitForHostPath(monitor, "192.0.2.80", "an Internet address") { $0.path != nil }
        #expect(!internet.isReachable && internet.path?.unsatisfiedReason == .noRoute)
        let loopback = try await waitForHostPath(monitor, "127.0.0.1", "loopback") { $0.path != nil }
        #expect(loopback.isReachable && loopback.path?.primaryInterface?.type == .loopback)
        let ownAddress = try await waitForHostPath(monitor, "10.77.1.2", "this host's own address") { $0.path != nil }
        #expect(ownAddress.isReachable && ownAddress.path?.primaryInterface?.name == "lo")
        let localhost = try await waitForHostPath(monitor, "localhost", "localhost by name") { $0.path != nil }
        #expect(localhost.isReachable, "\(localhost)")
        let invalid = try await waitForHostPath(monitor, "bad host", "an invalid name") { _ in true }
        #expect(invalid.resolutionFailure != nil && invalid.path == nil)
    }

    @Test("a route added for a host's network reaches it; the default route coming and going does not disturb a LAN host")
    func routeChanges() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1, defaultRoute: false)
        defer { net.close() }
        try ip("-n \(net.router) addr add 10.78.0.5/32 dev lo")
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        let far = try await waitForHostPath(monitor, "10.78.0.5", "a host behind the router") { $0.path != nil }
        #expect(!far.isReachable)
        let lan = HostPathRecorder(monitor, "10.77.1.1")
        defer { lan.stop() }
        // Only the new route's prefix covers the host: the kernel-side filter must let it through.
        try ip("-n \(net.client) route add 10.78.0.0/16 via 10.77.1.1")
        let routed = try await waitForHostPath(monitor, "10.78.0.5", "the host once its network is routed") { $0.isReachable }
        #expect(routed.path?.gateways == ["10.77.1.1"])
        _ = try await waitForHostPath(monitor, "10.77.1.1", "the LAN server") { $0.isReachable }
        // The default route comes and goes: the primary path changes twice, the LAN host's not at all.
        try ip("-n \(net.client) route add default via 10.77.1.1")
        _ = try await waitForPath(monitor, "the default route") { $0.isSatisfied }
        try ip("-n \(net.client) route del default")
        _ = try await waitForPath(monitor, "no default route") { !$0.isSatisfied }
        try ip("-n \(net.client) route del 10.78.0.0/16")
        _ = try await waitForHostPath(monitor, "10.78.0.5", "the host once its route is gone") { !$0.isReachable }
        #expect(lan.all.count == 1, "\(lan.all.map { $0.path.map(describe) ?? "-" })")
        // The link going down is a change for the LAN host.
        try ip("-n \(net.client) link set enp3s0 down")
        let down = try await waitForHostPath(monitor, "10.77.1.1", "the LAN server with its link down") { !$0.isReachable }
        #expect(down.path?.unsatisfiedReason != nil)
    }

    @Test("Reachability(hostname:) answers for its host, as SCNetworkReachability did for a name")
    func facadeForAHost() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1, defaultRoute: false)
        defer { net.close() }
        let lan = Reachability(hostname: "10.77.1.1", configuration: .init(networkNamespace: net.client),
                               callbackQueue: DispatchQueue(label: "test.lan"), notificationCenter: NotificationCenter())
        let (events, continuation) = AsyncStream.makeStream(of: String.self)
        lan.whenReachable = { r in continuation.yield("reachable \(r.connection.rawValue)") }
        lan.whenUnreachable = { _ in continuation.yield("unreachable") }
        try lan.startNotifier()
        defer { lan.stopNotifier() }
        // startNotifier() returns with the host's answer: no default route, and the host is reachable.
        #expect(lan.connection == .wired)
        #expect(lan.currentPath.primaryInterface?.name == "enp3s0")
        let queue = EventQueue(events)
        #expect(await queue.next(within: .seconds(5)) == "reachable wired")
        try ip("-n \(net.client) link set enp3s0 down")
        #expect(await queue.next(within: .seconds(5)) == "unreachable")
        let internet = Reachability(hostname: "192.0.2.80", configuration: .init(networkNamespace: net.client),
                                    callbackQueue: DispatchQueue(label: "test.internet"), notificationCenter: NotificationCenter())
        try internet.startNotifier()
        defer { internet.stopNotifier() }
        #expect(internet.connection == .unavailable)
    }

    @Test("reachability wait --host and status on a LAN with no default route")
    func commandLine() throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1, defaultRoute: false)
        defer { net.close() }
        let (waited, _, errors) = try runBuilt(["wait", "--netns", net.client, "--host", "10.77.1.1", "--timeout", "5"])
        #expect(waited == 0, "\(errors)")
        let (local, _, _) = try runBuilt(["wait", "--netns", net.client, "--host", "localhost", "--timeout", "5"])
        #expect(local == 0)
        let (internet, _, message) = try runBuilt(["wait", "--netns", net.client, "--host", "192.0.2.80", "--timeout", "0.2"])
        #expect(internet == 1)
        #expect(message.hasSuffix("timed out after 0.2s: 192.0.2.80: no route\n"), "\(message)")
        // status keeps the primary path's word, and says what still works.
        let (status, text, _) = try runBuilt(["status", "--netns", net.client])
        #expect(status == 1)
        #expect(text == "unreachable: no route beyond the local network (enp3s0, 10.77.1.2)\n")
    }

    @Test("link-local servers (IPv4 169.254/16, IPv6 fe80:: with its zone) need no route beyond the link")
    func linkLocal() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1, defaultRoute: false)
        defer { net.close() }
        try ip("-n \(net.client) addr add 169.254.7.2/16 dev enp3s0")
        try ip("-n \(net.router) addr add 169.254.7.1/16 dev up1")
        try ip("-6 -n \(net.client) addr add fe80::77:2/64 dev enp3s0 nodad")
        try ip("-6 -n \(net.router) addr add fe80::77:1/64 dev up1 nodad")
        let monitor = try startMonitor(in: net.client)
        defer { monitor.cancel() }
        let v4 = try await waitForHostPath(monitor, "169.254.7.1", "an IPv4 link-local server") { $0.path != nil }
        #expect(v4.isReachable && v4.path?.primaryInterface?.name == "enp3s0", "\(v4)")
        let v6 = try await waitForHostPath(monitor, "fe80::77:1%enp3s0", "an IPv6 link-local server") { $0.path != nil }
        #expect(v6.isReachable && v6.path?.routes.first?.interfaceName == "enp3s0", "\(v6)")
        // A zone that names no interface is no route, not a guess.
        let nowhere = try await waitForHostPath(monitor, "fe80::77:1%nosuch0", "a zone naming no interface") { $0.path != nil }
        #expect(!nowhere.isReachable)
        let (waited, _, errors) = try runBuilt(["wait", "--netns", net.client, "--host", "fe80::77:1%enp3s0", "--timeout", "5"])
        #expect(waited == 0, "\(errors)")
    }
}
