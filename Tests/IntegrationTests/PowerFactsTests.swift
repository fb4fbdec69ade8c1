import Foundation
import Synchronization
import Testing
import TestSupport
@testable import LinuxReachability

/// UPower's facts over the system bus (issue 32 item 3), against python-dbusmock's `upower`
/// template on a private dbus-daemon the test starts (the system-facts tests' lab).
@Suite("Power facts from UPower", .serialized, .enabled(if: systemBusLabUnavailable == nil, systemBusLabReason))
struct PowerFactsTests {
    @Test func onBatteryAndTheDisplayDevicesChargeAreReadAndShownByStatusExplain() throws {
        let bus = try SystemBusLab()
        defer { bus.close() }
        // No UPower on the bus: unknown, with the reason (nothing started by asking).
        let absent = PowerFacts.read(systemBusAddress: bus.address, timeout: .seconds(5))
        #expect(absent.isOnBattery == nil)
        #expect(absent.description == "unknown (UPower is not running)", "\(absent)")

        try bus.startUPower()
        let mains = PowerFacts.read(systemBusAddress: bus.address, timeout: .seconds(5))
        #expect(mains == PowerFacts(isOnBattery: false), "\(mains)")
        #expect(mains.description == "on AC power")

        let device = "/org/freedesktop/UPower/devices/DisplayDevice"
        try bus.set(device, "org.freedesktop.UPower.Device", "IsPresent", .boolean(true), service: SystemBusLab.upower)
        try bus.set(device, "org.freedesktop.UPower.Device", "Percentage", .double(54.5), service: SystemBusLab.upower)
        try bus.set("/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery", .boolean(true), service: SystemBusLab.upower)
        let battery = PowerFacts.read(systemBusAddress: bus.address, timeout: .seconds(5))
        #expect(battery == PowerFacts(isOnBattery: true, batteryPercentage: 54.5), "\(battery)")
        #expect(battery.description == "on battery (54 %)")

        let status = try BuiltProducts.run("reachability", ["status", "--explain"],
                                           environment: ChildProcess.quietEnvironment.merging(bus.environment) { $1 })
        #expect(status.standardOutput.contains("\npower: on battery (54 %)\n"), "\(status)")

        // The agent says the same in `agent status` (text and --json).
        let directory = try DownloadFixtures.Directory("power")
        let agent = try AgentProcess(stateDirectory: directory.file("state"), environment: bus.environment)
        defer { agent.stop() }
        let text = try agent.control(["agent", "status"])
        #expect(text.standardOutput.contains("\npower: on battery (54 %)\n"), "\(text)")
        let json = try agent.control(["agent", "status", "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        #expect(object["isOnBattery"] as? Bool == true, "\(json)")
        #expect(object["power"] as? String == "on battery (54 %)", "\(json)")
        _ = agent.terminate()
    }

    @Test func hostileValuesAreLeftOut() {
        let facts = PowerFacts.from(manager: ["OnBattery": .variant(.string("yes"))],
                                    displayDevice: ["Percentage": .variant(.double(.nan)), "IsPresent": .variant(.boolean(true))],
                                    problem: nil)
        #expect(facts.isOnBattery == nil && facts.batteryPercentage == nil)
        #expect(PowerFacts.from(manager: ["OnBattery": .boolean(false)], displayDevice: ["Percentage": .double(140)],
                                problem: nil) == PowerFacts(isOnBattery: false))
        #expect(PowerFacts.from(manager: ["OnBattery": .boolean(true)],
                                displayDevice: ["Percentage": .double(80), "IsPresent": .boolean(false)],
                                problem: nil) == PowerFacts(isOnBattery: true), "no battery, no charge")
    }

    /// `queue add --not-on-battery`: the job waits while UPower says on battery (the others run),
    /// shows why, and completes once the machine is on AC power.
    @Test func aNotOnBatteryJobWaitsOnBatteryAndRunsOnACPower() throws {
        let bus = try SystemBusLab()
        defer { bus.close() }
        try bus.startUPower()
        try bus.set("/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery", .boolean(true), service: SystemBusLab.upower)
        let namespace = try ConnectedNamespace()
        let (nginx, directory, content) = try DownloadFixtures.nginxServing(count: 2 << 20, seed: 35, at: "a.bin", label: "power")
        try nginx.serve(content, at: "b.bin")
        try FileManager.default.createDirectory(at: directory.file("state"), withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        try "download-dir=\(directory.url.path)\n".write(to: directory.file("state/agent.conf"), atomically: true, encoding: .utf8)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name],
                                     environment: bus.environment)
        defer { agent.stop() }
        let sha = DownloadFixtures.sha256(content)
        let held = try agent.control(["queue", "add", nginx.url("a.bin").absoluteString, "-o", directory.file("a.bin").path,
                                      "--sha256", sha, "--not-on-battery"])
        #expect(held.status == 0, "\(held)")
        let free = try agent.control(["queue", "add", nginx.url("b.bin").absoluteString, "-o", directory.file("b.bin").path,
                                      "--sha256", sha])
        #expect(free.status == 0, "\(free)")

        // The other job runs on battery; this one waits, and says why.
        #expect(agent.waitForLine { $0.contains(#""event":"completed""#) && $0.contains("b.bin") } != nil, "\(agent.output)")
        #expect(DownloadFixtures.waitSync {
            (try? agent.list())?.contains { $0["waitingFor"] as? String == "onBattery" && $0["waitsForACPower"] as? Bool == true } == true
        }, "\(agent.output)")
        let text = try agent.control(["queue", "list"]).standardOutput
        #expect(text.contains("[not on battery]  (waiting: on battery)"), "\(text)")
        #expect(agent.waitForLine { $0.contains(#""event":"waiting""#) && $0.contains(#""reason":"onBattery""#) } != nil)
        #expect(!FileManager.default.fileExists(atPath: directory.file("a.bin").path))

        try bus.set("/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery", .boolean(false), service: SystemBusLab.upower)
        #expect(agent.waitForLine { $0.contains(#""event":"completed""#) && $0.contains("a.bin") } != nil, "\(agent.output)")
        #expect(DownloadFixtures.sha256(fileAt: directory.file("a.bin")) == sha)
        let problems = agent.output.flatMap(EventSchemaValidator.problems)
        #expect(problems.isEmpty, "\(problems)")
        _ = agent.terminate()
    }

    /// `PowerFactsWatch` follows UPower's signals: with a poll interval of a minute, each change
    /// (OnBattery, the display device's charge, UPower leaving and coming back) still arrives
    /// within a second; a bus that is not there falls back to polling, with the reason.
    @Test func theWatchFollowsUPowersSignals() throws {
        let bus = try SystemBusLab()
        defer { bus.close() }
        try bus.startUPower()
        let seen = Mutex<[PowerFacts]>([])
        let watch = try PowerFactsWatch(systemBusAddress: bus.address, pollInterval: .seconds(60)) { facts in
            seen.withLock { $0.append(facts) }
        }
        defer { watch.cancel() }
        func waitFor(_ what: String, _ predicate: @escaping (PowerFacts) -> Bool) -> Duration? {
            let start = ContinuousClock.now
            let arrived = DownloadFixtures.waitSync(timeout: .seconds(5)) { seen.withLock { $0.last.map(predicate) == true } }
            return arrived ? ContinuousClock.now - start : nil
        }
        #expect(waitFor("AC") { $0 == PowerFacts(isOnBattery: false) } != nil, "\(seen.withLock { $0 })")
        #expect(watch.isFollowingSignals)

        let upower = SystemBusLab.upower, manager = "/org/freedesktop/UPower", device = "/org/freedesktop/UPower/devices/DisplayDevice"
        try bus.set(manager, "org.freedesktop.UPower", "OnBattery", .boolean(true), service: upower)
        let battery = waitFor("battery") { $0.isOnBattery == true }
        #expect(battery.map { $0 < .seconds(1) } == true, "on battery after \(String(describing: battery))")
        try bus.set(device, "org.freedesktop.UPower.Device", "IsPresent", .boolean(true), service: upower)
        try bus.set(device, "org.freedesktop.UPower.Device", "Percentage", .double(41), service: upower)
        let charge = waitFor("charge") { $0.batteryPercentage == 41 }
        #expect(charge.map { $0 < .seconds(1) } == true, "41 % after \(String(describing: charge))")
        try bus.set(manager, "org.freedesktop.UPower", "OnBattery", .boolean(false), service: upower)
        let mains = waitFor("AC again") { $0.isOnBattery == false }
        #expect(mains.map { $0 < .seconds(1) } == true, "on AC power after \(String(describing: mains))")
        print("POWERWATCH battery=\(battery ?? .zero) charge=\(charge ?? .zero) mains=\(mains ?? .zero)")

        try bus.stopService(upower)
        #expect(waitFor("gone") { $0.description == "unknown (UPower is not running)" } != nil, "\(seen.withLock { $0 })")
        try bus.startUPower()
        #expect(waitFor("back") { $0.isOnBattery == false } != nil, "\(seen.withLock { $0 })")

        // No bus at all: polled, unknown with the reason, and not following signals.
        let nowhere = Mutex<PowerFacts?>(nil)
        let fallback = try PowerFactsWatch(systemBusAddress: "unix:path=/nonexistent/close32-bus", pollInterval: .seconds(60)) { facts in
            nowhere.withLock { $0 = facts }
        }
        defer { fallback.cancel() }
        #expect(DownloadFixtures.waitSync(timeout: .seconds(5)) { nowhere.withLock { $0 } != nil })
        #expect(nowhere.withLock { $0 }?.isOnBattery == nil)
        #expect(!fallback.isFollowingSignals)
    }

    /// A running `--not-on-battery` job stops within a second of UPower's OnBattery turning true,
    /// and starts again within a second of it turning false (signals: the agent used to poll
    /// every 2 s).
    @Test func aRunningNotOnBatteryJobFollowsThePlugWithinASecond() throws {
        let bus = try SystemBusLab()
        defer { bus.close() }
        try bus.startUPower()
        let namespace = try ConnectedNamespace()
        let (nginx, directory, _) = try DownloadFixtures.nginxServing(count: 8 << 20, seed: 36, at: "slow/plug.bin", slowRate: "512k", label: "power")
        try AgentTests.allowDownloads(into: directory)
        let agent = try AgentProcess(stateDirectory: directory.file("state"), arguments: ["--netns", namespace.name],
                                     environment: bus.environment)
        defer { agent.stop() }
        let added = try agent.control(["queue", "add", nginx.url("slow/plug.bin").absoluteString, "-o", directory.file("plug.bin").path,
                                       "--not-on-battery"])
        #expect(added.status == 0, "\(added)")
        #expect(agent.waitForLine { $0.contains(#""event":"started""#) } != nil, "\(agent.output)")

        func timed(_ predicate: @escaping (String) -> Bool, after change: () throws -> Void) rethrows -> Duration? {
            let before = agent.output.count
            try change()
            let start = ContinuousClock.now
            let seen = agent.waitForLine(timeout: .seconds(10)) { line in
                agent.output.dropFirst(before).contains(line) && predicate(line)
            }
            return seen == nil ? nil : ContinuousClock.now - start
        }
        let upower = SystemBusLab.upower
        let stopped = try timed({ $0.contains(#""event":"waiting""#) && $0.contains(#""reason":"onBattery""#) }) {
            try bus.set("/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery", .boolean(true), service: upower)
        }
        #expect(stopped.map { $0 < .seconds(1) } == true, "waited after \(String(describing: stopped)): \(agent.output)")
        let resumed = try timed({ $0.contains(#""event":"started""#) || $0.contains(#""event":"resumed""#) }) {
            try bus.set("/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery", .boolean(false), service: upower)
        }
        #expect(resumed.map { $0 < .seconds(1) } == true, "resumed after \(String(describing: resumed)): \(agent.output)")
        print("POWERPLUG stop=\(stopped ?? .zero) resume=\(resumed ?? .zero)")
        _ = agent.terminate()
    }
}
