import Foundation
import Glibc
import Synchronization
import Testing

/// Why the system-bus suites skip.
public let systemBusLabReason: Comment = "needs root, dbus-daemon and Debian's python3-dbusmock (scripts/setup.sh installs them; CI runs as root)"

/// Why the D-Bus tests cannot run, or nil: they need root (namespaces), `dbus-daemon`, Debian's
/// python3 with python3-dbusmock (scripts/setup.sh installs them; CI has them).
public let systemBusLabUnavailable: String? = {
    guard isRoot else { return "needs root to create network namespaces (CI runs as root)" }
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon") else {
        return "needs dbus-daemon (scripts/setup.sh installs it)"
    }
    guard (try? sh(["/usr/bin/python3", "-c", "import dbusmock, dbus"])) != nil else {
        return "needs Debian's python3-dbusmock (scripts/setup.sh installs it)"
    }
    return nil
}()

/// A private D-Bus system bus (`dbus-daemon` on a socket in a scratch directory) with
/// python-dbusmock's NetworkManager template and a ModemManager template of our own, plus a
/// driver process that changes their objects on command. Everything it starts is killed by
/// `close()`.
///
/// Debian 12's python3-dbusmock (0.28) has no ModemManager template (upstream's, added in 2024,
/// has no Ports or RegistrationState either), so `modemManagerTemplate` is written to the scratch
/// directory and loaded by path, in the shape of dbusmock's own templates.
public final class SystemBusLab: Sendable {
    /// The bus socket, configuration and templates.
    public let directory: URL
    /// `unix:path=DIRECTORY/system_bus_socket`.
    public let address: String
    /// The bus daemon and the driver, replaced by `restartBus()`.
    private let processes: Mutex<(daemon: Process, driver: RequestReplyProcess)>
    private let services = Mutex<[String: Process]>([:])

    /// NetworkManager's bus name.
    public static let networkManager = "org.freedesktop.NetworkManager"
    /// ModemManager's bus name.
    public static let modemManager = "org.freedesktop.ModemManager1"
    /// Where NetworkManager's device objects live.
    public static let devicePrefix = "/org/freedesktop/NetworkManager/Devices/"
    /// NetworkManager's device interface.
    public static let deviceInterface = "org.freedesktop.NetworkManager.Device"
    /// NetworkManager's object path.
    public static let managerPath = "/org/freedesktop/NetworkManager"
    /// NetworkManager's interface.
    public static let managerInterface = "org.freedesktop.NetworkManager"

    /// Starts a private bus and the driver.
    public init() throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("rchT-bus-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let socket = directory.appendingPathComponent("system_bus_socket").path
        let configuration = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>system</type>
              <listen>unix:path=\(socket)</listen>
              <auth>EXTERNAL</auth>
              <limit name="max_message_size">33554432</limit>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        try configuration.write(to: directory.appendingPathComponent("bus.conf"), atomically: true, encoding: .utf8)
        try Self.modemManagerTemplate.write(to: directory.appendingPathComponent("mm_template.py"), atomically: true, encoding: .utf8)
        address = "unix:path=" + socket
        processes = Mutex(try Self.startBus(directory: directory, address: address))
    }

    /// Starts dbus-daemon (returning once it listens) and the driver connected to it.
    private static func startBus(directory: URL, address: String) throws -> (daemon: Process, driver: RequestReplyProcess) {
        let out = Pipe()
        let daemon = try ChildProcess.start("/usr/bin/dbus-daemon", [
            "--config-file=\(directory.appendingPathComponent("bus.conf").path)", "--nofork", "--print-address=1"],
            input: FileHandle.standardInput, output: out)
        // The daemon prints its address once it listens.
        let printed = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        guard printed.hasPrefix("unix:") else { throw LabCommandFailure(description: "dbus-daemon did not start: \(printed)") }
        let driver = try RequestReplyProcess(["/usr/bin/python3", "-u", "-c", Self.driverScript],
                                             environment: ["DBUS_SYSTEM_BUS_ADDRESS": address])
        return (daemon, driver)
    }

    /// Kills the bus daemon and everything on it (as a crash or an upgrade would), then starts a
    /// new one on the same socket with no service on it.
    public func restartBus() throws {
        stopAll()
        try? FileManager.default.removeItem(at: directory.appendingPathComponent("system_bus_socket"))
        let started = try Self.startBus(directory: directory, address: address)
        processes.withLock { $0 = started }
    }

    /// The environment a client of this bus needs.
    public var environment: [String: String] { ["DBUS_SYSTEM_BUS_ADDRESS": address] }

    // MARK: services

    /// Starts python-dbusmock's NetworkManager, inside `namespace` when given (its devices are
    /// that namespace's interfaces only if it runs there), and waits until it owns its name.
    public func startNetworkManager(in namespace: String? = nil) throws {
        try startService(Self.networkManager, template: "networkmanager", in: namespace)
        // NetworkManager >= 1.2 has a global Metered; the template predates it.
        try addProperty(Self.managerPath, Self.managerInterface, "Metered", .uint32(4))
    }

    /// UPower's bus name.
    public static let upower = "org.freedesktop.UPower"

    /// Starts python-dbusmock's `upower` template (OnBattery false, a display device without
    /// a battery) and waits until it owns its name.
    public func startUPower() throws {
        try startService(Self.upower, template: "upower", in: nil)
    }

    /// Starts the ModemManager template (see the type's comment).
    public func startModemManager(in namespace: String? = nil) throws {
        try startService(Self.modemManager, template: directory.appendingPathComponent("mm_template.py").path, in: namespace)
    }

    private func startService(_ name: String, template: String, in namespace: String?) throws {
        let process = try ChildProcess.start("/usr/bin/python3", ["-m", "dbusmock", "--system", "--template", template],
                                             prefix: namespace.map { ["ip", "netns", "exec", $0] } ?? [],
                                             environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DBUS_SYSTEM_BUS_ADDRESS": address],
                                             input: FileHandle.standardInput)
        services.withLock { $0[name] = process }
        try command(["op": "wait-owner", "name": name, "present": true])
    }

    /// Kills the service (as a crash would) and waits until the bus has seen it go.
    public func stopService(_ name: String) throws {
        guard let process = services.withLock({ $0.removeValue(forKey: name) }) else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try command(["op": "wait-owner", "name": name, "present": false])
    }

    // MARK: objects

    /// A D-Bus value for the driver: its signature and value.
    public enum Value {
        case uint32(UInt32)
        case boolean(Bool)
        case double(Double)
        case string(String)
        case objectPath(String)
        /// A string of `count` copies of `character`.
        case longString(Character, count: Int)
        /// An array of `count` unsigned integers.
        case longArray(count: Int)

        /// The value as the driver reads it.
        public var json: [String: Any] {
            switch self {
            case .uint32(let value): return ["type": "u", "value": value]
            case .boolean(let value): return ["type": "b", "value": value]
            case .double(let value): return ["type": "d", "value": value]
            case .string(let value): return ["type": "s", "value": value]
            case .objectPath(let value): return ["type": "o", "value": value]
            case .longString(let character, let count): return ["type": "s", "value": String(character), "count": count]
            case .longArray(let count): return ["type": "au", "count": count]
            }
        }
    }

    /// Adds a NetworkManager device `name` for kernel interface `interface`: `wifi` or `ethernet`
    /// through the template, `modem` and `bt` as an ethernet device retyped (with `interface` as
    /// the IP interface). Returns its object path.
    @discardableResult
    public func addDevice(_ name: String, kind: String, interface: String, metered: UInt32? = nil,
                   ipv4Connectivity: UInt32? = nil) throws -> String {
        let reply = try command(["op": "nm-device", "name": name, "kind": kind, "iface": interface])
        let path = try #require(reply["result"] as? String)
        // Added, then set: AddProperty sends no signal, Set sends the PropertiesChanged a monitor
        // already watching needs (the template announced the device before these existed).
        for (property, value) in [("Metered", metered), ("Ip4Connectivity", ipv4Connectivity)] {
            guard let value else { continue }
            try addProperty(path, Self.deviceInterface, property, .uint32(value))
            try set(path, Self.deviceInterface, property, .uint32(value))
        }
        return path
    }

    /// Adds a property to an object without a signal (for setup before the monitor looks).
    public func addProperty(_ path: String, _ interface: String, _ property: String, _ value: Value,
                     service: String = SystemBusLab.networkManager) throws {
        try command(["op": "add-property", "service": service, "path": path, "iface": interface, "prop": property,
                     "value": value.json])
    }

    /// Sets a property through org.freedesktop.DBus.Properties.Set: the mock emits
    /// PropertiesChanged, as the real service does. Returns once the mock has sent the signal.
    public func set(_ path: String, _ interface: String, _ property: String, _ value: Value,
             service: String = SystemBusLab.networkManager) throws {
        try command(["op": "set", "service": service, "path": path, "iface": interface, "prop": property, "value": value.json])
    }

    /// A device's Metered and NetworkManager's global one together, as NetworkManager changes
    /// them when the device carries the primary connection.
    public func setMetered(_ path: String, _ value: UInt32) throws {
        try set(path, Self.deviceInterface, "Metered", .uint32(value))
        try set(Self.managerPath, Self.managerInterface, "Metered", .uint32(value))
    }

    /// Adds a modem whose data port is `port`: 3GPP registration state (1 home, 5 roaming) and
    /// access technology bits (1 << 14 LTE).
    @discardableResult
    public func addModem(_ number: Int, port: String, registration: UInt32, access: UInt32 = 1 << 14) throws -> String {
        let reply = try command(["op": "mm-modem", "number": "\(number)", "port": port, "registration": registration,
                                 "access": access])
        return try #require(reply["result"] as? String)
    }

    /// From a peer that owns no service name, sends a PropertiesChanged claiming `path` is
    /// metered and a NameOwnerChanged claiming NetworkManager left, straight to every other
    /// connection on the bus (unicast signals reach a client whatever its match rules).
    public func spoof(_ path: String) throws {
        try command(["op": "spoof", "path": path])
    }

    /// Adds `count` more devices in one go (NetworkManager's object flood), each for interface
    /// `fl<N>`.
    public func floodDevices(_ count: Int) throws {
        try command(["op": "flood", "count": count])
    }

    /// Sends one request to the driver and returns its reply.
    @discardableResult
    public func command(_ request: [String: Any]) throws -> [String: Any] {
        let data = try JSONSerialization.data(withJSONObject: request)
        let line = try processes.withLock { $0.driver }.exchange(String(decoding: data, as: UTF8.self))
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "driver said: \(line)")
        guard reply["ok"] as? Bool == true else {
            throw LabCommandFailure(description: "bus driver: \(request["op"] ?? "?"): \(reply["error"] ?? line)")
        }
        return reply
    }

    private func stopAll() {
        for process in services.withLock({ services in defer { services = [:] }; return Array(services.values) })
        where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let (daemon, driver) = processes.withLock { $0 }
        driver.close()
        if daemon.isRunning {
            kill(daemon.processIdentifier, SIGKILL)
            daemon.waitUntilExit()
        }
    }

    /// Stops the services and the bus and removes the directory.
    public func close() {
        stopAll()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { close() }

    // MARK: scripts

    /// Reads one JSON command per line, answers one JSON line: `{"ok":true,"result":...}`.
    public static let driverScript = #"""
        import json, sys, time
        import dbus
        from dbus.lowlevel import SignalMessage

        bus = dbus.SystemBus()
        MOCK = 'org.freedesktop.DBus.Mock'
        PROPS = 'org.freedesktop.DBus.Properties'
        NM = 'org.freedesktop.NetworkManager'
        MM = 'org.freedesktop.ModemManager1'
        DEVICE = 'org.freedesktop.NetworkManager.Device'

        def value(spec):
            kind = spec['type']
            if kind == 'u': return dbus.UInt32(spec['value'], variant_level=1)
            if kind == 'b': return dbus.Boolean(spec['value'], variant_level=1)
            if kind == 'd': return dbus.Double(spec['value'], variant_level=1)
            if kind == 'o': return dbus.ObjectPath(spec['value'], variant_level=1)
            if kind == 's': return dbus.String(spec['value'] * spec.get('count', 1), variant_level=1)
            if kind == 'au': return dbus.Array([dbus.UInt32(i) for i in range(spec['count'])], signature='u', variant_level=1)
            raise ValueError('unknown type ' + kind)

        def obj(service, path):
            return bus.get_object(service, path, introspect=False)

        def run(cmd):
            op = cmd['op']
            if op == 'wait-owner':
                deadline = time.monotonic() + 20
                while bus.name_has_owner(cmd['name']) != cmd['present']:
                    if time.monotonic() > deadline: raise TimeoutError(cmd['name'])
                    time.sleep(0.005)
                return None
            if op == 'nm-device':
                mock = dbus.Interface(obj(NM, '/org/freedesktop/NetworkManager'), MOCK)
                kind = cmd['kind']
                if kind == 'wifi':
                    return str(mock.AddWiFiDevice(cmd['name'], cmd['iface'], 100))
                path = str(mock.AddEthernetDevice(cmd['name'], cmd['iface'], 100))
                if kind in ('modem', 'bt'):
                    device = dbus.Interface(obj(NM, path), PROPS)
                    device.Set(DEVICE, 'DeviceType', dbus.UInt32(8 if kind == 'modem' else 5, variant_level=1))
                    device.Set(DEVICE, 'Interface', dbus.String('cdc-wdm-' + cmd['name'], variant_level=1))
                    device.Set(DEVICE, 'IpInterface', dbus.String(cmd['iface'], variant_level=1))
                return path
            if op == 'add-property':
                dbus.Interface(obj(cmd['service'], cmd['path']), MOCK).AddProperty(cmd['iface'], cmd['prop'], value(cmd['value']))
                return None
            if op == 'set':
                dbus.Interface(obj(cmd['service'], cmd['path']), PROPS).Set(cmd['iface'], cmd['prop'], value(cmd['value']))
                return None
            if op == 'mm-modem':
                mock = dbus.Interface(obj(MM, '/org/freedesktop/ModemManager1'), MOCK)
                return str(mock.AddModem(cmd['number'], cmd['port'], dbus.UInt32(cmd['registration']), dbus.UInt32(cmd['access'])))
            if op == 'spoof':
                own = bus.get_unique_name()
                for name in bus.list_names():
                    if not name.startswith(':') or name == own: continue
                    message = SignalMessage(cmd['path'], PROPS, 'PropertiesChanged')
                    message.append(DEVICE, {'Metered': dbus.UInt32(1, variant_level=1)}, dbus.Array([], signature='s'), signature='sa{sv}as')
                    message.set_destination(name)
                    bus.send_message(message)
                    message = SignalMessage('/org/freedesktop/DBus', 'org.freedesktop.DBus', 'NameOwnerChanged')
                    message.append(NM, bus.get_name_owner(NM), '', signature='sss')
                    message.set_destination(name)
                    bus.send_message(message)
                bus.flush()
                return None
            if op == 'flood':
                mock = dbus.Interface(obj(NM, '/org/freedesktop/NetworkManager'), MOCK)
                for i in range(cmd['count']):
                    path = '/org/freedesktop/NetworkManager/Devices/flood%d' % i
                    properties = dbus.Dictionary({'Interface': dbus.String('fl%d' % i), 'DeviceType': dbus.UInt32(1),
                                                  'Metered': dbus.UInt32(1), 'IpInterface': dbus.String('')}, signature='sv')
                    mock.AddObject(path, DEVICE, properties, dbus.Array([], signature='(ssss)'))
                return None
            raise ValueError('unknown op ' + op)

        for line in sys.stdin:
            try:
                result = run(json.loads(line))
                print(json.dumps({'ok': True, 'result': result}), flush=True)
            except Exception as error:
                print(json.dumps({'ok': False, 'error': '%s: %s' % (type(error).__name__, error)}), flush=True)
        """#

    /// ModemManager with an ObjectManager and `AddModem(number, port, registration, access)`.
    public static let modemManagerTemplate = #"""
        '''ModemManager mock template for reachability's tests: the manager object and modems
        with the Modem (Ports, AccessTechnologies) and Modem3gpp (RegistrationState, OperatorName)
        interfaces.'''
        import dbus
        from dbusmock import MOCK_IFACE, OBJECT_MANAGER_IFACE, mockobject

        BUS_NAME = 'org.freedesktop.ModemManager1'
        MAIN_OBJ = '/org/freedesktop/ModemManager1'
        MAIN_IFACE = 'org.freedesktop.ModemManager1'
        SYSTEM_BUS = True
        IS_OBJECT_MANAGER = True
        MODEM = 'org.freedesktop.ModemManager1.Modem'
        MODEM_3GPP = 'org.freedesktop.ModemManager1.Modem.Modem3gpp'

        def load(mock, parameters):
            mock.AddMethods(MAIN_IFACE, [('ScanDevices', '', '', '')])
            mock.AddProperties(MAIN_IFACE, {'Version': parameters.get('DaemonVersion', '1.20.4')})

        @dbus.service.method(MOCK_IFACE, in_signature='ssuu', out_signature='s')
        def AddModem(self, number, port, registration, access):
            path = MAIN_OBJ + '/Modem/' + number
            ports = dbus.Array([(port, dbus.UInt32(2)), ('cdc-wdm' + number, dbus.UInt32(6))], signature='(su)')
            modem_props = {'Ports': ports, 'AccessTechnologies': dbus.UInt32(access), 'State': dbus.Int32(11)}
            self.AddObject(path, MODEM, modem_props, [])
            gpp_props = {'RegistrationState': dbus.UInt32(registration), 'OperatorName': dbus.String('Test Operator')}
            mockobject.objects[path].AddProperties(MODEM_3GPP, gpp_props)
            # AddObject announced the Modem interface; ModemManager adds the others as it learns them.
            mockobject.objects[MAIN_OBJ].EmitSignal(OBJECT_MANAGER_IFACE, 'InterfacesAdded', 'oa{sa{sv}}',
                                                     [dbus.ObjectPath(path), {MODEM_3GPP: gpp_props}])
            return path
        """#
}

/// A child process spoken to one line at a time over its stdin and stdout.
public final class RequestReplyProcess: Sendable {
    private let process: Process
    private let input: FileHandle
    private let output: Int32
    private let buffer = Mutex<[UInt8]>([])

    /// Starts `arguments` with both pipes.
    public init(_ arguments: [String], environment: [String: String] = [:]) throws {
        let inPipe = Pipe(), outPipe = Pipe()
        process = try ChildProcess.start(arguments[0], Array(arguments.dropFirst()),
                                         environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"].merging(environment) { $1 },
                                         input: inPipe, output: outPipe)
        input = inPipe.fileHandleForWriting
        output = outPipe.fileHandleForReading.fileDescriptor
    }

    /// Writes `line` and returns the next line the process prints (20 s at most).
    public func exchange(_ line: String, timeout: Duration = .seconds(20)) throws -> String {
        try input.write(contentsOf: Data((line + "\n").utf8))
        return try readLine(timeout: timeout)
    }

    /// The next line printed, waiting at most `timeout`.
    public func readLine(timeout: Duration = .seconds(20)) throws -> String {
        let deadline = ContinuousClock.now + timeout
        var line: String?
        // No pause between checks: poll(2) itself waits for output, up to the time left.
        let answered = try waitUntilBlocking(deadline: deadline, every: .zero) {
            line = buffer.withLock { buffer -> String? in
                guard let newline = buffer.firstIndex(of: 0x0A) else { return nil }
                defer { buffer.removeFirst(newline + 1) }
                return String(decoding: buffer[..<newline], as: UTF8.self)
            }
            if line != nil { return true }
            var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, Int32(max(deadline - .now, .zero) / .milliseconds(1)) + 1)
            guard descriptor.revents != 0 else { return false }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if count <= 0 { throw LabCommandFailure(description: "\(process.arguments ?? []) ended") }
            buffer.withLock { $0 += chunk[0..<count] }
            return false
        }
        guard answered, let line else { throw LabCommandFailure(description: "no answer from \(process.arguments ?? []) within \(timeout)") }
        return line
    }

    /// Closes its stdin and reaps it.
    public func close() {
        try? input.close()
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { close() }
}
