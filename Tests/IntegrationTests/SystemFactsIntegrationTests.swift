import Foundation
import Synchronization
import LinuxReachability
import Testing
import TestSupport

@Suite("NetworkManager and ModemManager over a private system bus", .serialized,
       .enabled(if: systemBusLabUnavailable == nil, systemBusLabReason))
struct SystemFactsIntegrationTests {
    @Test("Metered=guess-yes on the wifi makes the path expensive at once; back to guess-no, not expensive")
    func meteredWifi() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let (device, monitor) = try lab.wifiMonitor(metered: 4)
        let first = monitor.currentPath
        #expect(first.source(.networkManager) == .used, "\(first.factSources)")
        #expect(first.source(.modemManager) == .notRunning)
        #expect(first.primaryInterface?.name == "wlrch0")
        #expect(first.primaryInterface?.metered == .guessNo)
        #expect(!first.isExpensive)

        // When the monitor thread published the expensive path (not when this task saw it).
        let publishedAt = Mutex<ContinuousClock.Instant?>(nil)
        monitor.pathUpdateHandler = { path in
            if path.isExpensive { publishedAt.withLock { $0 = $0 ?? .now } }
        }
        try lab.bus.set(device, SystemBusLab.deviceInterface, "Metered", .uint32(3))
        // The mock sends PropertiesChanged before its reply, so the signal is out by now.
        let signalled = ContinuousClock.now
        // The handler runs on the monitor thread right after the stream has the path, so wait for
        // its stamp itself rather than for the stream.
        #expect(await DownloadFixtures.wait(timeout: .seconds(5)) { publishedAt.withLock { $0 } != nil })
        let published = try #require(publishedAt.withLock { $0 })
        let metered = monitor.currentPath
        let latency = published < signalled ? Duration.zero : published - signalled
        #expect(metered.primaryInterface?.costReason == "NetworkManager: Metered=guess-yes")
        #expect(metered.primaryInterface?.type == .wifi)
        #expect(latency < .milliseconds(100), "path published \(latency) after the signal was sent")
        print("Metered=guess-yes -> expensive path published \(latency) after the mock's signal (0: before its reply reached the test)")

        try lab.bus.setMetered(device, 4)
        let back = try await waitForPath(monitor, "not expensive after Metered=guess-no") { !$0.isExpensive }
        #expect(back.primaryInterface?.metered == .guessNo)
        try lab.bus.setMetered(device, 1)
        _ = try await waitForPath(monitor, "expensive after Metered=yes") {
            $0.isExpensive && $0.primaryInterface?.costReason == "NetworkManager: Metered=yes (set on the connection)"
        }
        try lab.bus.setMetered(device, 2)
        _ = try await waitForPath(monitor, "not expensive after Metered=no") { !$0.isExpensive && $0.primaryInterface?.metered == .no }
    }

    @Test("without NetworkManager the path is today's: no facts, no error, the answer is immediate")
    func networkManagerAbsent() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let monitor = try lab.monitor()
        let withBus = monitor.currentPath
        // Answered (not running), not the start wait running out.
        #expect(withBus.source(.networkManager) == .notRunning, "\(withBus.factSources)")
        #expect(withBus.source(.modemManager) == .notRunning)
        let plain = try lab.monitor(systemBus: .disabled)
        defer { plain.cancel() }
        #expect(plain.currentPath.source(.networkManager) == .noSystemBus)
        #expect(withBus == plain.currentPath, "the bus adds nothing without its services")
        #expect(withBus.connectivityEvidence == nil && withBus.connectivity == .unknown)
        #expect(!lab.log.all.contains { $0.contains("warning") || $0.contains("error") }, "\(lab.log.all)")

        let missing = try lab.monitor(systemBus: .address("unix:path=\(lab.bus.directory.path)/no-such-socket"))
        defer { missing.cancel() }
        #expect(missing.currentPath.source(.networkManager) == .failed)
        #expect(missing.currentPath == plain.currentPath)
    }

    /// A monitor on NetworkManager's wifi with Metered=guess-yes (3), seen as expensive.
    static func guessedMeteredWifi(_ lab: SystemFactsLab, sourceLocation: SourceLocation = #_sourceLocation) throws -> PathMonitor {
        let (_, monitor) = try lab.wifiMonitor(metered: 3)
        #expect(monitor.currentPath.isExpensive, "\(monitor.currentPath.factSources)", sourceLocation: sourceLocation)
        return monitor
    }

    @Test("NetworkManager going away and coming back")
    func networkManagerRestarts() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let monitor = try Self.guessedMeteredWifi(lab)
        try lab.bus.stopService(SystemBusLab.networkManager)
        let gone = try await waitForPath(monitor, "NetworkManager gone") { $0.source(.networkManager) == .notRunning }
        #expect(!gone.isExpensive)
        #expect(gone.primaryInterface?.metered == nil)
        #expect(gone.primaryInterface?.classificationReason == "name prefix 'wl' (systemd predictable name)")

        _ = try lab.networkManagerWithWifi(metered: 1)
        let back = try await waitForPath(monitor, "NetworkManager back, Metered=yes") { $0.isExpensive }
        #expect(back.source(.networkManager) == .used)
        #expect(back.primaryInterface?.classificationReason == "NetworkManager DeviceType=wifi")
    }

    @Test("the system bus restarting: kernel facts alone while it is gone, NetworkManager's again once it is back")
    func busRestarts() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let monitor = try Self.guessedMeteredWifi(lab)
        try lab.bus.restartBus()
        let lost = try await waitForPath(monitor, "the bus lost") { $0.source(.networkManager) != .used }
        #expect(!lost.isExpensive && lost.primaryInterface?.metered == nil)
        // Reconnected within the back-off (1 s, then 2 s), NetworkManager found again.
        _ = try lab.networkManagerWithWifi(metered: 1)
        let back = try await waitForPath(monitor, timeout: .seconds(10), "NetworkManager used again") {
            $0.source(.networkManager) == .used && $0.isExpensive
        }
        #expect(back.primaryInterface?.metered == .yes)
        #expect(lab.log.all.contains { $0.contains("system bus unavailable") })
    }

    @Test("a NetworkManager running in another network namespace describes other interfaces: not used")
    func otherNamespace() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        try lab.bus.startNetworkManager()   // in the test's namespace, not the client's
        try lab.bus.addDevice("wlan0", kind: "wifi", interface: "wlrch0", metered: 3)
        let monitor = try lab.monitor()
        let path = monitor.currentPath
        #expect(path.source(.networkManager) == .otherNamespace, "\(path.factSources)")
        #expect(!path.isExpensive)
        #expect(path.primaryInterface?.metered == nil)
    }

    @Test("a hostile bus: garbage and huge values from the owner are refused with a log line and the last good state is kept; another peer's spoofed signals are ignored")
    func hostilePeer() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let (device, monitor) = try lab.wifiMonitor(metered: 3, ipv4Connectivity: 0)
        #expect(monitor.currentPath.isExpensive)
        let garbage: [(String, SystemBusLab.Value)] = [
            ("Metered", .string("no")),
            ("Metered", .uint32(0xFFFF_FFFF)),
            ("Metered", .longString("x", count: 1 << 20)),
            ("Metered", .longArray(count: 100_000)),
            ("Interface", .longString("w", count: 200_000)),
            ("Interface", .string("../../etc")),
            ("DeviceType", .string("wifi")),
        ]
        for (property, value) in garbage {
            try lab.bus.set(device, SystemBusLab.deviceInterface, property, value)
        }
        // A good value after the garbage still applies: the connection and the model are intact.
        try lab.bus.set(device, SystemBusLab.deviceInterface, "Ip4Connectivity", .uint32(4))
        _ = try await waitForPath(monitor, "the good value after the garbage") { $0.connectivity == .full }
        let path = monitor.currentPath
        #expect(path.isExpensive, "the last good Metered (guess-yes) is kept")
        #expect(path.primaryInterface?.name == "wlrch0" && path.primaryInterface?.type == .wifi)
        let warnings = lab.log.all.filter { $0.contains("warning") }
        #expect(warnings.count >= garbage.count, "\(warnings)")
        #expect(warnings.contains { $0.contains("NetworkManager sent Metered of \(device): 'no' of type s is not a Metered value") })
        #expect(warnings.contains { $0.contains("4294967295 of type u is not a Metered value") })
        #expect(warnings.contains { $0.contains("more than 256") || $0.contains("longer than 4096") })
        #expect(warnings.allSatisfy { $0.utf8.count < 1024 }, "log lines stay short whatever the value")
        #expect(path.factSources.first { $0.service == .networkManager }?.detail.contains("refused") == true)

        // Another peer (no service name) unicasts a PropertiesChanged and a NameOwnerChanged.
        try lab.bus.setMetered(device, 4)
        _ = try await waitForPath(monitor, "not expensive") { !$0.isExpensive }
        try lab.bus.spoof(device)
        // The bus keeps each sender's order: a change from NetworkManager sent after the spoof
        // arrives after it, so once it is seen the spoof has been handled (and ignored).
        try lab.bus.set(device, SystemBusLab.deviceInterface, "Ip4Connectivity", .uint32(3))
        let after = try await waitForPath(monitor, "NetworkManager's change after the spoof") { $0.connectivity == .limited }
        #expect(!after.isExpensive && after.source(.networkManager) == .used)

        // A flood of devices beyond the bound (dbusmock announces objects added this way to no
        // one, so a second monitor reads them all in its first GetManagedObjects answer):
        // the rest is refused with a line, the device that matters is still read.
        try lab.bus.floodDevices(1100)
        try lab.bus.setMetered(device, 3)
        _ = try await waitForPath(monitor, "expensive again") { $0.isExpensive }
        let second = try lab.monitor()
        defer { second.cancel() }
        #expect(second.currentPath.source(.networkManager) == .used)
        #expect(lab.log.all.contains { $0.contains("more than 1024 devices") }, "\(lab.log.all.suffix(30))")
    }

    @Test("classify overrides win over NetworkManager, both ways")
    func overridesWin() async throws {
        let lab = try SystemFactsLab(uplinks: [("wlrch0", 1, 10), ("enrch1", 2, 20)])
        defer { lab.close() }
        _ = try lab.networkManagerWithWifi(metered: 3)
        try lab.bus.addDevice("eth1", kind: "ethernet", interface: "enrch1", metered: 2)
        let monitor = try lab.monitor(overrides: [
            try ClassificationOverride(parsing: "wlrch0=wifi", source: "--classify"),
            try ClassificationOverride(parsing: "enrch1=cellular", source: "--classify"),
        ], allInterfaces: true)
        defer { monitor.cancel() }
        let path = monitor.currentPath
        let wifi = try #require(path.interfaces.first { $0.name == "wlrch0" })
        let wired = try #require(path.interfaces.first { $0.name == "enrch1" })
        #expect(!wifi.isExpensive && wifi.metered == .guessYes)
        #expect(wifi.costReason == "not cellular by override 'wlrch0=wifi' from --classify (NetworkManager: Metered=guess-yes not used)")
        #expect(wired.isExpensive && wired.metered == .no)
        #expect(!path.isExpensive)
    }

    @Test("NetworkManager's connectivity is the source when no check of ours is configured, unless its own check is off")
    func networkManagerConnectivity() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let (device, monitor) = try lab.wifiMonitor(metered: 4, ipv4Connectivity: 2)
        let portal = monitor.currentPath
        #expect(portal.connectivity == .portal)
        #expect(portal.connectivityEvidence?.source == .networkManager)
        #expect(portal.connectivityEvidence?.answer == "NetworkManager: Ip4Connectivity=portal on wlrch0")
        try lab.bus.set(device, SystemBusLab.deviceInterface, "Ip4Connectivity", .uint32(4))
        _ = try await waitForPath(monitor, "full") { $0.connectivity == .full }
        // NetworkManager's check turned off: its `full` is then a guess from the default route
        // (nm-device.c's fake result), not a verdict, and is not used; back on, it is again.
        let manager = SystemBusLab.managerPath, managerInterface = SystemBusLab.managerInterface
        try lab.bus.addProperty(manager, managerInterface, "ConnectivityCheckEnabled", .boolean(true))
        try lab.bus.set(manager, managerInterface, "ConnectivityCheckEnabled", .boolean(false))
        let guess = try await waitForPath(monitor, "NetworkManager's guess not used") { $0.connectivityEvidence == nil }
        #expect(guess.connectivity == .unknown)
        #expect(guess.factSources.first { $0.service == .networkManager }?.detail.contains("(guessed: its check is off, not used)") == true,
                "\(guess.factSources)")
        try lab.bus.set(manager, managerInterface, "ConnectivityCheckEnabled", .boolean(true))
        _ = try await waitForPath(monitor, "full again") { $0.connectivity == .full }
        // No check has run (unknown): no answer, as without any check.
        try lab.bus.set(device, SystemBusLab.deviceInterface, "Ip4Connectivity", .uint32(0))
        try lab.bus.set(SystemBusLab.managerPath, SystemBusLab.managerInterface, "Connectivity", .uint32(0))
        let unknown = try await waitForPath(monitor, "no answer") { $0.connectivityEvidence == nil }
        #expect(unknown.connectivity == .unknown)
    }

    @Test("ModemManager: the modem's data port is cellular, its roaming state is the path's")
    func modemManagerRoaming() async throws {
        let lab = try SystemFactsLab(uplinks: [("rchmodem0", 1, 10)])
        defer { lab.close() }
        try lab.bus.startModemManager(in: lab.net.client)
        let modem = try lab.bus.addModem(0, port: "rchmodem0", registration: 1)
        let monitor = try lab.monitor()
        let home = monitor.currentPath
        #expect(home.source(.modemManager) == .used, "\(home.factSources)")
        #expect(home.primaryInterface?.type == .cellular)
        #expect(home.primaryInterface?.classificationReason == "ModemManager: data port of modem 0")
        #expect(home.primaryInterface?.cellular == CellularStatus(isRoaming: false, registration: "home",
                                                                    accessTechnologies: ["lte"], operatorName: "Test Operator"))
        #expect(home.isExpensive && !home.isRoaming)
        try lab.bus.set(modem, "org.freedesktop.ModemManager1.Modem.Modem3gpp", "RegistrationState", .uint32(5),
                        service: SystemBusLab.modemManager)
        let roaming = try await waitForPath(monitor, "roaming") { $0.isRoaming }
        #expect(roaming.primaryInterface?.cellular?.registration == "roaming")
        try lab.bus.set(modem, "org.freedesktop.ModemManager1.Modem", "AccessTechnologies", .uint32(1 << 15 | 1 << 14),
                        service: SystemBusLab.modemManager)
        _ = try await waitForPath(monitor, "5G") { $0.primaryInterface?.cellular?.accessTechnologies == ["lte", "5gnr"] }
        try lab.bus.stopService(SystemBusLab.modemManager)
        let gone = try await waitForPath(monitor, "ModemManager gone") { $0.source(.modemManager) == .notRunning }
        #expect(!gone.isRoaming && gone.primaryInterface?.cellular == nil)
    }
}

@Suite("Side by side with GLib's GNetworkMonitor on the same mocked NetworkManager", .serialized,
       .enabled(if: systemBusLabUnavailable == nil && glibUnavailable == nil, systemBusLabReason))
struct GLibAgreementTests {
    /// GLib's view, asked after a round trip to NetworkManager on GLib's own connection (its reply
    /// comes after every signal sent before it) and an idle main context: GLib has then seen
    /// every change the driver made.
    static let glibPeer = #"""
        import json, sys
        from gi.repository import Gio, GLib
        monitor = Gio.NetworkMonitor.get_default()
        bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
        context = GLib.MainContext.default()
        print(json.dumps({'type': type(monitor).__name__}), flush=True)
        for line in sys.stdin:
            bus.call_sync('org.freedesktop.NetworkManager', '/org/freedesktop/NetworkManager',
                          'org.freedesktop.DBus.Properties', 'Get',
                          GLib.Variant('(ss)', ('org.freedesktop.NetworkManager', 'Metered')),
                          None, Gio.DBusCallFlags.NONE, 5000, None)
            while context.pending():
                context.iteration(False)
            print(json.dumps({'metered': monitor.get_network_metered(),
                              'connectivity': monitor.get_connectivity().value_nick}), flush=True)
        """#

    @Test("network-metered and isExpensive agree at every Metered value NetworkManager can report")
    func meteredAgreement() async throws {
        let lab = try SystemFactsLab()
        defer { lab.close() }
        let (device, monitor) = try lab.wifiMonitor(metered: 4)
        let glib = try RequestReplyProcess(["/usr/bin/python3", "-u", "-c", Self.glibPeer], environment: lab.bus.environment)
        defer { glib.close() }
        let hello = try glib.readLine()
        #expect(hello.contains("GNetworkMonitorNM"), "GLib must use its NetworkManager backend: \(hello)")
        let names: [UInt32: Metered] = [0: .unknown, 1: .yes, 2: .no, 3: .guessYes, 4: .guessNo]
        var table: [String] = []
        for value: UInt32 in [3, 4, 1, 2, 0, 3, 4] {
            try lab.bus.setMetered(device, value)
            let expected = try #require(names[value])
            let ours = try await waitForPath(monitor, "Metered=\(expected.rawValue) seen") { $0.primaryInterface?.metered == expected }
            let reply = try JSONSerialization.jsonObject(with: Data(try glib.exchange("query").utf8)) as? [String: Any]
            let theirs = try #require(reply?["metered"] as? Bool)
            #expect(ours.isExpensive == theirs, "Metered=\(expected.rawValue): isExpensive \(ours.isExpensive), GLib network-metered \(theirs)")
            #expect(ours.isExpensive == expected.isMetered)
            table.append("| \(expected.rawValue) | \(theirs) | \(ours.isExpensive) |")
        }
        print((["| Metered | GLib network-metered | isExpensive |"] + table).joined(separator: "\n"))
    }
}

/// Why GLib's side cannot run, or nil (python3-gi and GLib's introspection data).
let glibUnavailable: String? = (try? sh(["/usr/bin/python3", "-c", "from gi.repository import Gio"])) == nil
    ? "needs python3-gi and gir1.2-glib-2.0 (scripts/setup.sh installs them)" : nil
