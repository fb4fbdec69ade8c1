import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// What UPower says of the machine's power (issue 32 item 3): whether it runs on battery
/// (`org.freedesktop.UPower.OnBattery`) and the charge of the display device
/// (`/org/freedesktop/UPower/devices/DisplayDevice`'s `Percentage`, the one a desktop shows),
/// read over the system bus through the same sd-bus connection as NetworkManager's facts.
/// Unknown when UPower is not running (a server, a container): then nothing waits for AC power.
public struct PowerFacts: Sendable, Hashable, CustomStringConvertible {
    /// True on battery, false on AC power, nil when UPower did not say.
    public var isOnBattery: Bool?
    /// The display device's charge, 0-100, when a battery is present.
    public var batteryPercentage: Double?
    /// Why the facts are unknown (`UPower is not running`), nil when UPower answered.
    public var problem: String?

    /// Facts as given (tests, other sources).
    public init(isOnBattery: Bool?, batteryPercentage: Double? = nil, problem: String? = nil) {
        self.isOnBattery = isOnBattery
        self.batteryPercentage = batteryPercentage
        self.problem = problem
    }

    /// `on battery (54 %)`, `on AC power (battery 80 %)`, `on AC power`, or
    /// `unknown (UPower is not running)`.
    public var description: String {
        let charge = batteryPercentage.map { "\(Int($0.rounded(.down))) %" }
        switch isOnBattery {
        case true?: return "on battery" + (charge.map { " (\($0))" } ?? "")
        case false?: return "on AC power" + (charge.map { " (battery \($0))" } ?? "")
        case nil: return "unknown (\(problem ?? "UPower did not answer"))"
        }
    }

    static let busName = "org.freedesktop.UPower"
    static let managerPath = "/org/freedesktop/UPower"
    static let managerInterface = "org.freedesktop.UPower"
    static let displayDevicePath = "/org/freedesktop/UPower/devices/DisplayDevice"
    static let deviceInterface = "org.freedesktop.UPower.Device"

    /// The facts from UPower's two property sets (nil: not answered), bounded: a percentage
    /// outside 0...100 or not a number is left out, as is one of a device with no battery.
    static func from(manager: [String: DBusValue]?, displayDevice: [String: DBusValue]?, problem: String?) -> PowerFacts {
        let onBattery = manager?["OnBattery"]?.boolean
        var percentage: Double?
        if let device = displayDevice, device["IsPresent"]?.boolean != false,
           let value = device["Percentage"]?.double, value.isFinite, (0...100).contains(value) {
            percentage = value
        }
        return PowerFacts(isOnBattery: onBattery, batteryPercentage: percentage,
                          problem: onBattery == nil ? problem ?? "UPower gave no OnBattery" : nil)
    }

    /// Asks UPower once, waiting at most `timeout` for both answers: the system bus at
    /// `address`, else `$DBUS_SYSTEM_BUS_ADDRESS`, else `/run/dbus/system_bus_socket`. Never
    /// starts UPower (no bus activation); any failure is unknown facts with the reason.
    public static func read(systemBusAddress address: String? = nil, timeout: Duration = .seconds(1)) -> PowerFacts {
        let resolved: String
        if let address {
            resolved = address
        } else {
            switch SystemFactsClient.address(for: .automatic) {
            case .success(let found): resolved = found
            case .failure(let unavailable): return PowerFacts(isOnBattery: nil, problem: "no system bus: \(unavailable.detail)")
            }
        }
        do {
            let connection = try SystemBusConnection(address: resolved, wanted: [
                managerInterface: ["OnBattery"], deviceInterface: ["Percentage", "IsPresent"]])
            defer { connection.close() }
            try connection.call(tag: 1, destination: busName, path: managerPath, interface: "org.freedesktop.DBus.Properties",
                                member: "GetAll", argument: managerInterface, expecting: .properties(interface: managerInterface))
            try connection.call(tag: 2, destination: busName, path: displayDevicePath, interface: "org.freedesktop.DBus.Properties",
                                member: "GetAll", argument: deviceInterface, expecting: .properties(interface: deviceInterface))
            var manager: [String: DBusValue]?, device: [String: DBusValue]?, problem: String?
            var answers = 0
            let deadline = ContinuousClock.now + timeout
            while answers < 2 {
                let (events, hasMore) = try connection.process()
                for case .reply(let tag, _, let reply) in events {
                    answers += 1
                    switch reply {
                    case .properties(let properties): if tag == 1 { manager = properties } else { device = properties }
                    case .error(let name, let message):
                        if tag == 1 {
                            problem = name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
                                ? "UPower is not running" : "UPower: \(name): \(message)"
                        }
                    default: break
                    }
                }
                if answers >= 2 || hasMore { continue }
                let left = deadline - .now
                guard left > .zero, var entries = connection.pollRequest.map({ [$0] }) else {
                    problem = problem ?? "UPower did not answer within \(timeout)"
                    break
                }
                try? Poll.wait(&entries, timeoutMilliseconds: Int32(max(1, min(left / .milliseconds(1), 60_000))))
            }
            return from(manager: manager, displayDevice: device, problem: problem)
        } catch {
            return PowerFacts(isOnBattery: nil, problem: "\(error)")
        }
    }
}
