import Foundation
import Glibc
import LinuxSystem
import Testing
@testable import ReachabilityAgent
import TestSupport

/// A background session's holder that is gone does not block its successor, even before the
/// agent has heard that its connection ended; a live holder still does.
@Suite("Agent service: re-attaching a background session")
struct AgentServiceReattachTests {
    /// A connected pair for this user with process `pid`: the agent's end and the client's end.
    static func connection(id: UInt64, pid: Int32) throws -> (peer: ControlPeer, client: FileDescriptor) {
        try AgentServiceOwnershipTests.peer(id: id, credentials: PeerCredentials(
            pid: pid, uid: CurrentProcess.effectiveUserID, gid: CurrentProcess.effectiveGroupID))
    }

    static func attach(_ service: AgentService, _ peer: ControlPeer) async -> ControlResponse? {
        await service.handle(.attach(session: "com.example.relaunch", settings: BackgroundSessionSettings()), id: nil, peer: peer)
    }

    @Test func aHolderThatExitedDoesNotBlockItsSuccessor() async throws {
        let scratch = try ScratchDirectory("ra")
        let service = try AgentServiceTests.offlineService(scratch.url, events: AgentServiceTests.EventSink())
        _ = await service.start()
        let first = try Self.connection(id: 1, pid: 4001)
        #expect(await Self.attach(service, first.peer) == nil, "the first attach replies on the connection itself")

        // A live holder: the second process is refused, as before.
        let second = try Self.connection(id: 2, pid: 4002)
        let refused = try #require(await Self.attach(service, second.peer))
        #expect(refused.error?.code == .sessionInUse, "\(refused)")

        // The first process exits; its serving thread has not reported the end yet.
        first.client.close()
        let third = try Self.connection(id: 3, pid: 4003)
        #expect(await Self.attach(service, third.peer) == nil, "attached: the gone holder was detached first")
        // The late report of the first connection's end changes nothing.
        await service.connectionClosed(first.peer)
        let fourth = try Self.connection(id: 4, pid: 4004)
        let stillHeld = try #require(await Self.attach(service, fourth.peer))
        #expect(stillHeld.error?.code == .sessionInUse && stillHeld.error?.message.contains("process 4003") == true, "\(stillHeld)")

        for connection in [first, second, third, fourth] {
            await service.connectionClosed(connection.peer)
            connection.peer.finish()
        }
        for client in [second.client, third.client, fourth.client] { client.close() }
        await service.shutdown()
    }
}
