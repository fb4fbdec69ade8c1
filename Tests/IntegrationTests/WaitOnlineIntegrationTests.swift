import Foundation
import Glibc
import Testing
import TestSupport

/// `reachability wait` as a boot-time wait-online (issue 33), in namespaces of its own: each
/// condition, and the cases other wait-online services get wrong.
@Suite("wait-online in network namespaces", .serialized, .needsRoot)
struct WaitOnlineIntegrationTests {
    /// The last line of stderr, where a timeout says what was missing.
    static func lastLine(_ text: String) -> String {
        text.split(separator: "\n").last.map(String.init) ?? ""
    }

    /// Waits for a running `wait` to exit, at most `timeout`; its status, nil when it did not.
    static func exitStatus(of command: RunningCommand, within timeout: Duration) async -> Int32? {
        let exited = await withTaskGroup(of: Bool.self) { group in
            group.addTask { command.process.waitUntilExit(); return true }
            group.addTask { await deadline(timeout); return false }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        if !exited { _ = command.stop(signal: SIGKILL); return nil }
        return command.process.terminationStatus
    }

    /// A veth `name` in the client whose router end `up1` has `routerAddress` and is up; the client
    /// end is left bare (no address, down) for a bridge or a bond to take, or the test to address.
    static func bareUplink(_ name: String, in net: Topology, routerAddress: String = "10.77.1.1/24") throws {
        try ip("link add \(name) netns \(net.client) type veth peer name up1 netns \(net.router)")
        try ip("-n \(net.router) addr add \(routerAddress) dev up1" + (routerAddress.contains(":") ? " nodad" : ""))
        try ip("-n \(net.router) link set up1 up")
    }

    /// `dev` of the client gets 10.77.1.2/24, comes up, and takes the default route via the router.
    static func addressAndRoute(_ dev: String, in net: Topology) throws {
        try ip("-n \(net.client) addr add 10.77.1.2/24 dev \(dev)")
        try ip("-n \(net.client) link set \(dev) up")
        try ip("-n \(net.client) route add default via 10.77.1.1 dev \(dev)")
    }

    @Test("the default: an unplugged second interface does not delay it; --interface waits for it, --any does not")
    func secondInterfaceWithoutCarrier() throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        // eth1's peer stays down: eth1 is up without carrier, like an unplugged NIC.
        try ip("link add eth1 netns \(net.client) type veth peer name idle1 netns \(net.router)")
        try ip("-n \(net.client) link set eth1 up")
        let (online, _, quiet) = try runBuilt(["wait", "--netns", net.client, "--timeout", "10"])
        #expect(online == 0)
        #expect(quiet.isEmpty)
        let (timedOut, _, errors) = try runBuilt(["wait", "--netns", net.client, "--interface", "eth1", "--interface", "enp3s0",
                                                  "--timeout", "0.5"])
        #expect(timedOut == 1)
        #expect(Self.lastLine(errors) == "reachability wait: timed out after 0.5s: eth1: no carrier")
        let (any, _, _) = try runBuilt(["wait", "--netns", net.client, "--interface", "eth1", "--interface", "enp3s0", "--any",
                                        "--timeout", "10"])
        #expect(any == 0)
    }

    @Test("interface states: carrier, address (link-local counts), routable (it does not)")
    func interfaceStates() throws {
        let net = try Topology()
        defer { net.close() }
        try Self.bareUplink("eth2", in: net)
        try ip("-n \(net.client) addr add 169.254.7.2/16 dev eth2")
        try ip("-n \(net.client) link set eth2 up")
        for state in ["carrier", "address"] {
            let (code, _, errors) = try runBuilt(["wait", "--netns", net.client, "--interface", "eth2:\(state)", "--timeout", "10"])
            #expect(code == 0, "eth2:\(state): \(errors)")
        }
        let (routable, _, errors) = try runBuilt(["wait", "--netns", net.client, "--interface", "eth2", "--ipv4", "--timeout", "0.5"])
        #expect(routable == 1)
        #expect(Self.lastLine(errors)
            == "reachability wait: timed out after 0.5s: eth2: only a link-local IPv4 address; no IPv4 default route")
        let (missing, _, absent) = try runBuilt(["wait", "--netns", net.client, "--interface", "wlan9:carrier", "--timeout", "0.3"])
        #expect(missing == 1)
        #expect(Self.lastLine(absent) == "reachability wait: timed out after 0.3s: wlan9: no such interface yet")
    }

    @Test("a bridge over a veth is online like any link")
    func bridgeOverVeth() throws {
        let net = try Topology()
        defer { net.close() }
        try Self.bareUplink("enp3s0", in: net)
        try ip("-n \(net.client) link add br0 type bridge")
        try ip("-n \(net.client) link set enp3s0 master br0")
        try ip("-n \(net.client) link set enp3s0 up")
        try Self.addressAndRoute("br0", in: net)
        let (code, _, errors) = try runBuilt(["wait", "--netns", net.client, "--interface", "br0", "--timeout", "20"])
        #expect(code == 0, "\(errors)")
        let (plain, _, _) = try runBuilt(["wait", "--netns", net.client, "--timeout", "20"])
        #expect(plain == 0)
    }

    @Test("a bond over a veth is online like any link (when this kernel has the bonding driver)")
    func bondOverVeth() throws {
        let net = try Topology()
        defer { net.close() }
        do {
            try ip("-n \(net.client) link add bond0 type bond mode active-backup")
        } catch {
            // A container kernel without the bonding module: nothing to test, and said so.
            print("wait-online bond test skipped: this kernel cannot create a bond (\(error))")
            return
        }
        try Self.bareUplink("enp3s0", in: net)
        try ip("-n \(net.client) link set enp3s0 master bond0")
        try Self.addressAndRoute("bond0", in: net)
        let (code, _, errors) = try runBuilt(["wait", "--netns", net.client, "--interface", "bond0", "--timeout", "20"])
        #expect(code == 0, "\(errors)")
    }

    @Test("an IPv6-only link: the default and --ipv6 are online, --ipv4 is not")
    func ipv6Only() throws {
        let net = try Topology()
        defer { net.close() }
        try Self.bareUplink("enp3s0", in: net, routerAddress: "2001:db8:77::1/64")
        try ip("-n \(net.client) addr add 2001:db8:77::2/64 dev enp3s0 nodad")
        try ip("-n \(net.client) link set enp3s0 up")
        try ip("-n \(net.client) -6 route add default via 2001:db8:77::1 dev enp3s0")
        for arguments in [[], ["--ipv6"], ["--interface", "enp3s0", "--ipv6"]] {
            let (code, _, errors) = try runBuilt(["wait", "--netns", net.client, "--timeout", "10"] + arguments)
            #expect(code == 0, "\(arguments): \(errors)")
        }
        let (v4, _, errors) = try runBuilt(["wait", "--netns", net.client, "--ipv4", "--timeout", "0.5"])
        #expect(v4 == 1)
        #expect(Self.lastLine(errors) == "reachability wait: timed out after 0.5s: no IPv4 default route")
    }

    @Test("--ignore: a default route only through an ignored interface does not count")
    func ignoredInterface() throws {
        let net = try Topology(uplink: "docker0", subnet: 1)
        defer { net.close() }
        let (code, _, errors) = try runBuilt(["wait", "--netns", net.client, "--ignore", "docker*", "--timeout", "0.5"])
        #expect(code == 1)
        #expect(Self.lastLine(errors) == "reachability wait: timed out after 0.5s: no default route (leaves only through ignored docker0)")
        let (other, _, _) = try runBuilt(["wait", "--netns", net.client, "--ignore", "virbr*", "--timeout", "10"])
        #expect(other == 0)
    }

    /// A DNS responder on UDP 53 at `address` in `namespace`: answers every query NOERROR, empty.
    static func dnsResponder(_ lab: NetworkLab, in namespace: String, address: String) throws {
        let script = """
        import socket, sys
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((sys.argv[1], 53))
        sys.stdout.write('ready\\n'); sys.stdout.flush()
        while True:
            data, peer = s.recvfrom(4096)
            if len(data) >= 12:
                s.sendto(data[:2] + bytes([0x81, 0x80]) + data[4:6] + bytes(6) + data[12:], peer)
        """
        let out = Pipe()
        let process = try ChildProcess.start("python3", ["-c", script, address], prefix: ["ip", "netns", "exec", namespace],
                                             input: FileHandle.standardInput, output: out, error: FileHandle.standardError)
        lab.children.withLock { $0.append(process) }
        // Bound before the test goes on: the script prints once bind() succeeded.
        guard String(decoding: out.fileHandleForReading.availableData, as: UTF8.self).contains("ready") else {
            throw LabCommandFailure(description: "the DNS responder did not start in \(namespace)")
        }
    }

    @Test("a route but a silent DNS server: the default is online, --dns waits and says which server; an answering one ends it")
    func dnsServerThatDoesNotAnswer() throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1)
        defer { net.close() }
        // `ip netns exec` (which wait --dns re-executes through) mounts this over /etc/resolv.conf.
        let etc = "/etc/netns/\(net.client)"
        try FileManager.default.createDirectory(atPath: etc, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: etc) }
        try "nameserver 10.77.1.9\n".write(toFile: etc + "/resolv.conf", atomically: true, encoding: .utf8)
        let (plain, _, _) = try runBuilt(["wait", "--netns", net.client, "--timeout", "10"])
        #expect(plain == 0)
        let (silent, _, errors) = try runBuilt(["wait", "--netns", net.client, "--dns", "--timeout", "1.5"])
        #expect(silent == 1)
        #expect(Self.lastLine(errors) == "reachability wait: timed out after 1.5s: DNS: 10.77.1.9 did not answer")

        try Self.dnsResponder(net.lab, in: net.router, address: "10.77.1.1")
        try "nameserver 10.77.1.9\nnameserver 10.77.1.1\n".write(toFile: etc + "/resolv.conf", atomically: true, encoding: .utf8)
        let (answered, _, why) = try runBuilt(["wait", "--netns", net.client, "--dns", "--dns-name", "deb.debian.org", "--timeout", "20"])
        #expect(answered == 0, "\(why)")
    }

    @Test("the network arrives later: wait says it waits, then exits 0 on the route's arrival, not before")
    func networkArrivesLater() async throws {
        let net = try Topology(uplink: "enp3s0", subnet: 1, defaultRoute: false)
        defer { net.close() }
        let waiter = try RunningCommand(["wait", "--netns", net.client, "--json", "--timeout", "30"])
        // The first event says what is missing: the arrival below is an event, not a pause.
        let waiting = await waiter.line(timeout: .seconds(10)) { $0.contains(#""event":"waiting""#) }
        #expect(waiting?.contains(#""missing":["no default route"]"#) == true)
        #expect(waiter.process.isRunning)
        try ip("-n \(net.client) route add default via 10.77.1.1 dev enp3s0")
        let online = await waiter.line(timeout: .seconds(10)) { $0.contains(#""event":"online""#) }
        #expect(online != nil)
        // Both lines are the shared schema's (docs/events.md, type wait).
        let problems = [waiting, online].compactMap { $0 }.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
        #expect(await Self.exitStatus(of: waiter, within: .seconds(10)) == 0)
    }
}
