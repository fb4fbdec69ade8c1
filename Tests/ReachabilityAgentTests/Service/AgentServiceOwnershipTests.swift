import Foundation
import Glibc
import LinuxSystem
import Testing
@testable import ReachabilityAgent
import TestSupport

/// Whose downloads `agent status` counts, and `add`'s client key (issue 29).
@Suite("Agent service: owners and client keys")
struct AgentServiceOwnershipTests {
    /// A connected peer with `uid` (the client end is returned to keep it open).
    static func peer(id: UInt64, uid: UInt32) throws -> (peer: ControlPeer, client: FileDescriptor) {
        try peer(id: id, credentials: PeerCredentials(pid: Int32(5000 + id), uid: uid, gid: uid))
    }

    /// A connected pair over a socketpair: the agent's end as a `ControlPeer` with `credentials`,
    /// and the client's end.
    static func peer(id: UInt64, credentials: PeerCredentials) throws -> (peer: ControlPeer, client: FileDescriptor) {
        var ends: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        return (ControlPeer(id: id, credentials: credentials, socket: FileDescriptor(rawValue: ends[0]), promote: { true }),
                FileDescriptor(rawValue: ends[1]))
    }

    /// An offline service, started, with two users' peers (alice 1000, bob 1001).
    static func serviceWithTwoUsers(_ label: String) async throws
        -> (ScratchDirectory, AgentService, alice: (peer: ControlPeer, client: FileDescriptor), bob: (peer: ControlPeer, client: FileDescriptor)) {
        let scratch = try ScratchDirectory(label)
        let service = try AgentServiceTests.offlineService(scratch.url, events: AgentServiceTests.EventSink())
        _ = await service.start()
        return (scratch, service, try peer(id: 1, uid: 1000), try peer(id: 2, uid: 1001))
    }

    /// A user's status counts that user's downloads only; root's counts every one and gives the total.
    @Test func statusCountsTheCallersDownloadsAndOnlyRootSeesTheTotal() async throws {
        let (scratch, service, alice, bob) = try await Self.serviceWithTwoUsers("ao")
        defer { alice.client.close(); bob.client.close(); withExtendedLifetime(scratch) {} }
        for index in 0..<3 {
            let added = await service.handle(.add(url: URL(string: "http://192.0.2.9/a\(index)")!, output: nil, sha256: nil),
                                             id: nil, peer: alice.peer)
            #expect(added?.ok == true, "\(String(describing: added))")
        }
        let bobs = await service.handle(.status, id: nil, peer: bob.peer)?.status
        #expect(bobs?.counts.values.reduce(0, +) == 0, "\(String(describing: bobs?.counts))")
        #expect(bobs?.summary == "idle")
        #expect(bobs?.totalDownloads == nil)
        let alices = await service.handle(.status, id: nil, peer: alice.peer)?.status
        #expect(alices?.counts.values.reduce(0, +) == 3, "\(String(describing: alices?.counts))")
        #expect(alices?.totalDownloads == nil)
        let root = try Self.peer(id: 3, uid: 0)
        defer { root.client.close() }
        let roots = await service.handle(.status, id: nil, peer: root.peer)?.status
        #expect(roots?.counts.values.reduce(0, +) == 3)
        #expect(roots?.totalDownloads == 3)
        await service.shutdown()
    }

    /// An add repeated with its client key gets the first job; another user's same key is theirs.
    @Test func aRepeatedClientKeyIsTheFirstJob() async throws {
        let (scratch, service, alice, bob) = try await Self.serviceWithTwoUsers("ak")
        defer { alice.client.close(); bob.client.close(); withExtendedLifetime(scratch) {} }
        let url = URL(string: "http://192.0.2.9/k.bin")!
        async let first = service.handle(.add(url: url, output: nil, sha256: nil, clientKey: "k1"), id: .number(1), peer: alice.peer)
        async let second = service.handle(.add(url: url, output: nil, sha256: nil, clientKey: "k1"), id: .number(2), peer: alice.peer)
        let (a, b) = await (first, second)
        #expect(a?.download?.id != nil && a?.download?.id == b?.download?.id, "\(String(describing: a)) \(String(describing: b))")
        #expect(b?.id == .number(2), "the reply carries the repeat's own request id")
        let other = await service.handle(.add(url: URL(string: "http://192.0.2.9/other.bin")!, output: nil, sha256: nil, clientKey: "k1"),
                                         id: nil, peer: bob.peer)
        #expect(other?.ok == true && other?.download?.id != a?.download?.id)
        #expect(await service.handle(.list(), id: nil).downloads?.count == 2)
        await service.shutdown()
    }
}
