import Foundation
import LinuxReachability
import Synchronization
import Testing
import TestSupport
@testable import ResumableDownloads

@Suite("Downloads gated by the route to their own host")
struct PathWaitersTests {
    static let lan = RecoveryPartsTests.path("enp3s0", 2, .wired, "10.77.0.2")
    static let wifi = RecoveryPartsTests.path("wlan0", 3, .wifi, "192.168.1.2")
    static let noDefaultRoute = NetworkPath.unsatisfied(.noRoute)

    static func host(_ path: NetworkPath?, failure: String? = nil) -> HostPath {
        HostPath(host: "10.77.0.1", addresses: ["10.77.0.1"], resolutionFailure: failure, path: path)
    }

    @Test func aLANHostIsUsableWithoutADefaultRoute() {
        var waiters = PathWaiters(hasPathSource: true, followsHosts: true)
        let download = PathWaiters.Listener(id: UUID(), access: PathAccess(allowsExpensive: true), host: "10.77.0.1")
        #expect(waiters.update(Self.noDefaultRoute, listeners: [download]).isEmpty, "the primary path is not its gate")
        // Until the host's first answer: wait quietly.
        #expect(waiters.usability(access: PathAccess(allowsExpensive: true), host: "10.77.0.1") == .unknown)
        let first = waiters.update(Self.host(Self.lan), for: "10.77.0.1", listeners: [download])
        #expect(first.map(\.facts) == [.init(usability: .usable(pinnedInterface: nil), isNewPath: true)])
        // The default route comes and goes: nothing for this download.
        #expect(waiters.update(Self.wifi, listeners: [download]).isEmpty)
        #expect(waiters.update(Self.noDefaultRoute, listeners: [download]).isEmpty)
        // The same route again: no news; the LAN link going away invalidates the running transfer.
        let running = PathWaiters.Listener(id: download.id, access: PathAccess(allowsExpensive: true), host: "10.77.0.1",
                                           transfer: (PathKey(Self.lan), nil))
        let same = waiters.update(Self.host(Self.lan), for: "10.77.0.1", listeners: [running])
        #expect(same.map(\.facts) == [.init(usability: .usable(pinnedInterface: nil))])
        let gone = waiters.update(Self.host(.unsatisfied(.noCarrier)), for: "10.77.0.1", listeners: [running])
        #expect(gone.map(\.facts) == [.init(usability: .unusable, invalidatesTransfer: true, isNewPath: true)])
    }

    @Test("a name that does not resolve, or host paths that stop, hand the download back to the primary path")
    func fallbacks() {
        var waiters = PathWaiters(hasPathSource: true, followsHosts: true)
        let download = PathWaiters.Listener(id: UUID(), access: PathAccess(allowsExpensive: true), host: "10.77.0.1")
        _ = waiters.update(Self.wifi, listeners: [download])
        let unresolved = waiters.update(Self.host(nil, failure: "Name or service not known"), for: "10.77.0.1", listeners: [download])
        #expect(unresolved.map(\.facts.usability) == [.usable(pinnedInterface: nil)])
        #expect(waiters.update(Self.noDefaultRoute, listeners: [download]).map(\.facts.usability) == [.unusable])
        var ended = PathWaiters(hasPathSource: true, followsHosts: true)
        _ = ended.update(Self.wifi, listeners: [download])
        #expect(ended.unfollow("10.77.0.1", listeners: [download]).map(\.facts) == [.init(usability: .usable(pinnedInterface: nil), isNewPath: true)])
        // Without host paths at all, everything follows the primary path, as before.
        let plain = PathWaiters(hasPathSource: true)
        #expect(plain.usability(access: PathAccess(allowsExpensive: true), host: "10.77.0.1") == .unknown)
        #expect(plain.followsPrimaryPath(host: "10.77.0.1"))
    }

    @Test("the agent follows the route to the download's proxy when one applies, else to its server")
    func gateHostIsTheProxy() async throws {
        let directory = try TemporaryDirectory()
        let asked = Mutex<[String]>([])
        let (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        continuation.yield(Paths.offline)
        // An agent through `proxy` ("" for none) that records the hosts whose route it asks for.
        func agent(proxy: String, state: String) throws -> DownloadAgent {
            var configuration = DownloadAgent.Configuration(stateDirectory: directory.url.appendingPathComponent(state))
            configuration.proxy = proxy
            return try DownloadAgent(configuration: configuration, paths: paths, hostPaths: { host in
                asked.withLock { $0.append(host) }
                return AsyncStream { _ in }
            })
        }
        let proxied = try agent(proxy: "http://proxy.example:3128", state: "state")
        _ = try await proxied.download(from: URL(string: "http://10.77.0.1/f")!, to: directory.url.appendingPathComponent("f"))
        #expect(await Polling.wait(timeout: .seconds(5)) { asked.withLock { $0 } == ["proxy.example"] })
        await proxied.shutdown()
        let plain = try agent(proxy: "", state: "state2")
        _ = try await plain.download(from: URL(string: "http://10.77.0.1/f")!, to: directory.url.appendingPathComponent("g"))
        #expect(await Polling.wait(timeout: .seconds(5)) { asked.withLock { $0 } == ["proxy.example", "10.77.0.1"] })
        await plain.shutdown()
    }
}

