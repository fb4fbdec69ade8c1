import Foundation
import LinuxReachability
import Testing
@testable import ResumableDownloads
import TestSupport

/// The agent driven by a scripted path stream over loopback: the path model says "wifi", "gone",
/// "ethernet", while the bytes really flow over 127.0.0.1. Network-namespace outage tests (link
/// down, route deleted, resets) need the real monitor and are added separately.
@Suite("Downloads driven by path updates", .serialized, .needsNginx)
struct DownloadPathTests: DownloadScenarios {

    static func interface(_ name: String, _ index: Int32, _ type: InterfaceType, _ address: String) -> NetworkInterface {
        NetworkInterface(name: name, index: index, type: type, classificationReason: "scripted", isUp: true,
                         hasCarrier: true, addresses: [address])
    }

    static func path(_ primary: NetworkInterface, also others: [NetworkInterface] = []) -> NetworkPath {
        NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: primary,
                    routes: [PathRoute(family: .ipv4, interfaceName: primary.name, interfaceIndex: primary.index,
                                       gateway: nil, sourceAddress: primary.addresses.first)],
                    interfaces: [primary] + others)
    }

    static let wifi = path(interface("wlan0", 3, .wifi, "192.168.1.20"))
    static let ethernet = path(interface("eth0", 2, .wired, "10.0.0.2"))
    static let cellular = path(interface("wwan0", 4, .cellular, "10.64.0.2"))

    /// An agent in `directory` whose paths the test scripts through the returned continuation,
    /// starting at `first`.
    static func scriptedAgent(in directory: F.Directory, startingAt first: NetworkPath,
                              _ edit: (inout DownloadAgent.Configuration) -> Void = { _ in })
        throws -> (DownloadAgent, AsyncStream<NetworkPath>.Continuation) {
        try F.scriptedAgent(F.configuration(state: directory.file("state"), edit), startingAt: first)
    }

    @Test func outageAbortsAtOnceAndTheNewPathResumes() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 12 << 20, seed: 5, at: "slow/file.bin", slowRate: "4m")
        // A stall timeout far beyond the bounds below: only the path can stop the transfer in time.
        let (agent, continuation) = try Self.scriptedAgent(in: directory, startingAt: Self.wifi) {
            $0.stallTimeout = .seconds(30)
        }
        let destination = directory.file("file.bin")
        let download = try await agent.download(from: nginx.url("slow/file.bin"), to: destination,
                                                options: .init(expectedSHA256: F.sha256(content)))
        let log = F.EventLog(download)
        #expect(await F.wait { download.progress.bytesReceived > 2 << 20 })

        // Path lost: the transfer must stop now, not when TCP or the stall watchdog times out.
        // Typically a few ms; the bound is generous for a loaded CI machine (latency is a benchmark).
        let lost = ContinuousClock.now
        continuation.yield(.unsatisfied(.noCarrier))
        #expect(await log.wait(timeout: .seconds(6)) { $0 == .waitingForConnectivity })
        #expect(ContinuousClock.now - lost < .seconds(5))
        #expect(download.state == .waitingForConnectivity)
        let frozen = download.progress.bytesReceived
        #expect(!FileManager.default.fileExists(atPath: destination.path))

        // Another interface appears: restart within milliseconds, from the checkpoint.
        let back = ContinuousClock.now
        continuation.yield(Self.ethernet)
        #expect(await log.wait(timeout: .seconds(6)) { if case .resumed = $0 { true } else { false } })
        #expect(ContinuousClock.now - back < .seconds(5))
        let resumedAt = try #require(log.resumedOffsets.last)
        #expect(resumedAt > 0 && resumedAt <= frozen)
        _ = try await F.finish(download, log: log)
        #expect(F.sha256(fileAt: destination) == F.sha256(content))
        #expect(log.restarts == 0)
        await agent.shutdown()
    }

    @Test func primaryInterfaceSwitchRestartsTheTransfer() async throws {
        // ~10 s: the switch must land mid-transfer even on a loaded machine
        let (nginx, directory, content) = try F.nginxServing(count: 10 << 20, seed: 6, at: "slow/file.bin", slowRate: "1m")
        let (agent, continuation) = try Self.scriptedAgent(in: directory, startingAt: Self.wifi) {
            $0.stallTimeout = .seconds(30)   // only the path switch can restart the transfer in time
        }
        let download = try await agent.download(from: nginx.url("slow/file.bin"), to: directory.file("file.bin"),
                                                options: .init(expectedSHA256: F.sha256(content)))
        let log = F.EventLog(download)
        #expect(await F.wait { download.progress.bytesReceived > 2 << 20 })
        continuation.yield(Self.ethernet)   // wifi -> ethernet, no outage in between
        let resumed = await log.wait(timeout: .seconds(6)) { if case .resumed = $0 { true } else { false } }
        #expect(resumed, "events: \(log.all), state: \(download.state), bytes: \(download.progress.bytesReceived)")
        #expect(!log.all.contains(.waitingForConnectivity))
        _ = try await F.finish(download, log: log)
        #expect(F.sha256(fileAt: directory.file("file.bin")) == F.sha256(content))
        await agent.shutdown()
    }

    @Test func expensivePathIsAvoidedWhenNotAllowed() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 1 << 20, seed: 8, at: "f.bin")
        let (agent, continuation) = try Self.scriptedAgent(in: directory, startingAt: Self.cellular)
        let download = try await agent.download(from: nginx.url("f.bin"), to: directory.file("f.bin"),
                                                options: .init(expectedSHA256: F.sha256(content), allowsExpensive: false))
        // State, not events: the first events may fire before a handler could be attached.
        #expect(await F.wait(timeout: .seconds(6)) { download.state == .waitingForConnectivity })
        #expect(download.progress.bytesReceived == 0)
        continuation.yield(Self.wifi)
        _ = try await F.finish(download)
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content))
        await agent.shutdown()
    }

    @Test func manyDownloadsRestartTogetherWhenThePathReturns() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 4 << 20, seed: 9, at: "slow/file.bin", slowRate: "1m")
        let (agent, continuation) = try Self.scriptedAgent(in: directory, startingAt: Self.wifi) {
            $0.maximumConcurrentDownloads = 8
            $0.stallTimeout = .seconds(30)
        }
        var started: [(Download, F.EventLog)] = []
        for index in 0..<6 {
            let download = try await agent.download(from: nginx.url("slow/file.bin"), to: directory.file("f\(index)"),
                                                    options: .init(expectedSHA256: F.sha256(content)))
            started.append((download, F.EventLog(download)))
        }
        let downloads = started
        #expect(await F.wait { downloads.allSatisfy { $0.0.progress.bytesReceived > 256 << 10 } })
        continuation.yield(.unsatisfied(.noRoute))
        #expect(await F.wait(timeout: .seconds(6)) { downloads.allSatisfy { $0.0.state == .waitingForConnectivity } })
        let back = ContinuousClock.now
        continuation.yield(Self.wifi)
        #expect(await F.wait(timeout: .seconds(6)) { downloads.allSatisfy { !$0.1.resumedOffsets.isEmpty } })
        #expect(ContinuousClock.now - back < .seconds(5))
        for (download, _) in downloads { _ = try await F.finish(download) }
        await agent.shutdown()
    }

    @Test(.enabled(if: DownloadFixtures.isRoot, "SO_BINDTODEVICE (CURLOPT_INTERFACE if!name) needs root"))
    func cheapInterfaceIsPinnedWhenThePrimaryIsExpensive() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 1 << 20, seed: 13, at: "f.bin")
        // Primary is cellular; "lo" plays a usable wired interface, so the agent must pin to it
        // (SO_BINDTODEVICE lo still reaches 127.0.0.1) rather than wait.
        let loopbackAsWired = Self.interface("lo", 1, .wired, "127.0.0.1")
        let (agent, _) = try Self.scriptedAgent(in: directory, startingAt: Self.path(Self.interface("wwan0", 4, .cellular, "10.64.0.2"), also: [loopbackAsWired]))
        let download = try await agent.download(from: nginx.url("f.bin"), to: directory.file("f.bin"),
                                                options: .init(expectedSHA256: F.sha256(content), allowsExpensive: false))
        _ = try await F.finish(download, timeout: .seconds(20))
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content))
        await agent.shutdown()
    }

    @Test(.enabled(if: DownloadFixtures.isRoot, "SO_BINDTODEVICE (CURLOPT_INTERFACE if!name) needs root"))
    func pinningToAMissingInterfaceFailsAsNotConnected() async throws {
        let nginx = try DownloadTestNginx()
        let directory = try F.Directory()
        try nginx.serve(Data("x".utf8), at: "f.bin")
        let ghost = Self.interface("ghost0", 99, .wired, "192.0.2.1")
        let (agent, _) = try Self.scriptedAgent(in: directory, startingAt: Self.path(Self.interface("wwan0", 4, .cellular, "10.64.0.2"), also: [ghost])) {
            $0.maximumConsecutiveFailures = 1
        }
        let download = try await agent.download(from: nginx.url("f.bin"), to: directory.file("f.bin"),
                                                options: .init(allowsExpensive: false))
        await #expect(throws: DownloadError.notConnectedToInternet) { _ = try await F.finish(download, timeout: .seconds(20)) }
        await agent.shutdown()
    }
}
