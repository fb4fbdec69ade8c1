import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import Synchronization

/// Follows UPower's facts as they change (issue 32 item 3): `PropertiesChanged` of the manager
/// (`OnBattery`) and of the display device (`Percentage`, `IsPresent`), and UPower coming and
/// going (`NameOwnerChanged`), on a system-bus connection of its own read by one thread, the way
/// `SystemFactsClient` follows NetworkManager. The matches are added before the first `GetAll`:
/// the bus handles both in order, so no change falls between the answer and the subscription.
/// When the bus cannot be reached or refuses the subscription, it asks UPower every
/// `pollInterval` instead (the fallback) and tries to subscribe again each time.
package final class PowerFactsWatch: Sendable {
    private struct State {
        var facts: PowerFacts?
        var isFollowingSignals = false
        var isCancelled = false
    }

    private let state = Mutex(State())
    private let wake: WakeSignal

    /// Starts watching the system bus at `systemBusAddress` (else `$DBUS_SYSTEM_BUS_ADDRESS`, else
    /// `/run/dbus/system_bus_socket`); `onChange` gets the first facts and then each change, on the
    /// watch's thread. Throws when no eventfd can be made.
    package init(systemBusAddress: String? = nil, pollInterval: Duration = .seconds(2),
                onChange: @escaping @Sendable (PowerFacts) -> Void) throws(Errno) {
        wake = try WakeSignal()
        SystemThread.detach(name: "power-watch") { [self] in
            run(address: systemBusAddress, pollInterval: pollInterval, onChange: onChange)
            wake.close()
        }
    }

    /// The latest facts, nil before the first answer.
    package var facts: PowerFacts? { state.withLock { $0.facts } }

    /// Whether changes arrive as signals now (false while it polls).
    package var isFollowingSignals: Bool { state.withLock { $0.isFollowingSignals } }

    /// Stops the watch; its thread ends at its next wake-up (at once).
    package func cancel() {
        state.withLock { $0.isCancelled = true }
        wake.signal()
    }

    private var isCancelled: Bool { state.withLock { $0.isCancelled } }

    private func publish(_ facts: PowerFacts, signals: Bool, _ onChange: @Sendable (PowerFacts) -> Void) {
        let changed = state.withLock { state -> Bool in
            state.isFollowingSignals = signals
            defer { state.facts = facts }
            return state.facts != facts
        }
        if changed { onChange(facts) }
    }

    private func run(address given: String?, pollInterval: Duration, onChange: @escaping @Sendable (PowerFacts) -> Void) {
        while !isCancelled {
            var address = given
            if address == nil, case .success(let found) = SystemFactsClient.address(for: .automatic) { address = found }
            if let address {
                follow(address: address, onChange)
                guard !isCancelled else { return }
            }
            // The fallback: ask, then wait; and try to subscribe again after.
            publish(PowerFacts.read(systemBusAddress: address ?? given, timeout: .milliseconds(250)), signals: false, onChange)
            var entries = [PollEntry(wake.pollDescriptor, .readable)]
            try? Poll.wait(&entries, timeoutMilliseconds: Int32(pollInterval / .milliseconds(1)))
            if entries[0].isReady { wake.reset() }
        }
    }

    /// Follows the signals until the connection fails or the watch is cancelled.
    private func follow(address: String, _ onChange: @escaping @Sendable (PowerFacts) -> Void) {
        let busName = PowerFacts.busName
        let connection: SystemBusConnection
        do {
            connection = try SystemBusConnection(address: address, wanted: [
                PowerFacts.managerInterface: ["OnBattery"], PowerFacts.deviceInterface: ["Percentage", "IsPresent"]])
        } catch {
            return
        }
        defer { connection.close() }
        var known = PowerSignalState()
        func ask() throws {
            known.generation += 1
            let generation = known.generation
            try connection.call(tag: generation * 2, destination: busName, path: PowerFacts.managerPath,
                                interface: "org.freedesktop.DBus.Properties", member: "GetAll",
                                argument: PowerFacts.managerInterface, expecting: .properties(interface: PowerFacts.managerInterface))
            try connection.call(tag: generation * 2 + 1, destination: busName, path: PowerFacts.displayDevicePath,
                                interface: "org.freedesktop.DBus.Properties", member: "GetAll",
                                argument: PowerFacts.deviceInterface, expecting: .properties(interface: PowerFacts.deviceInterface))
        }
        do {
            try connection.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(busName)'")
            try connection.addMatch("type='signal',sender='\(busName)',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='\(PowerFacts.managerPath)'")
            try ask()
            while !isCancelled {
                let (events, hasMore) = try connection.process()
                var isChanged = false
                for event in events {
                    let outcome = known.apply(event)
                    if outcome.asksAgain { try ask() }
                    isChanged = isChanged || outcome.isChanged
                }
                if isChanged, known.manager != nil || known.problem != nil {
                    publish(PowerFacts.from(manager: known.manager, displayDevice: known.device, problem: known.problem), signals: true, onChange)
                }
                if hasMore { continue }
                guard let request = connection.pollRequest else { return }
                var entries = [request, PollEntry(wake.pollDescriptor, .readable)]
                try? Poll.wait(&entries, timeoutMilliseconds: 5_000)
                if entries[1].isReady { wake.reset() }
            }
        } catch {
            state.withLock { $0.isFollowingSignals = false }
        }
    }
}

/// What the watch knows of UPower between signals: the two property sets, why it has none, the
/// owner whose signals count, and the generation of `GetAll` calls whose answers count.
struct PowerSignalState {
    var manager: [String: DBusValue]?
    var device: [String: DBusValue]?
    var problem: String?
    var owner: String?
    var generation = 0

    /// Takes one event; whether the facts changed, and whether UPower must be asked again (it has
    /// a new owner).
    mutating func apply(_ event: SystemBusEvent) -> (isChanged: Bool, asksAgain: Bool) {
        switch event {
        case .reply(let tag, let sender, let reply):
            guard tag / 2 == generation else { return (false, false) }
            switch reply {
            case .properties(let properties):
                if tag % 2 == 0 {
                    (manager, owner, problem) = (properties, sender, nil)
                } else {
                    device = properties
                }
            case .error(let name, let message):
                guard tag % 2 == 0 else { device = nil; break }
                manager = nil
                problem = name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
                    ? "UPower is not running" : "UPower: \(name): \(message)"
            default: return (false, false)
            }
            return (true, false)
        case .propertiesChanged(let sender, let path, let interface, let changed):
            // The match names UPower, but a peer may send the signal straight to us.
            guard sender == owner else { return (false, false) }
            if path == PowerFacts.managerPath, interface == PowerFacts.managerInterface {
                manager = (manager ?? [:]).merging(changed) { $1 }
            } else if path == PowerFacts.displayDevicePath, interface == PowerFacts.deviceInterface {
                device = (device ?? [:]).merging(changed) { $1 }
            } else {
                return (false, false)
            }
            return (true, false)
        case .nameOwnerChanged(let sender, let name, let newOwner):
            guard sender == "org.freedesktop.DBus", name == PowerFacts.busName else { return (false, false) }
            (manager, device, owner) = (nil, nil, nil)
            problem = "UPower is not running"
            return (true, !newOwner.isEmpty)
        default:
            return (false, false)
        }
    }
}
