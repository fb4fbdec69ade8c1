import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ReachabilityAgent
import TestSupport

/// A connection's bytes into request lines, and what to answer, without sockets.
@Suite("Control connection")
struct ControlConnectionStateMachineTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func splitsLinesAcrossReads() {
        var machine = ControlConnectionStateMachine()
        #expect(machine.received(Self.bytes(#"{"version":1,"id":1,"com"#)) == [])
        #expect(machine.received(Self.bytes("mand\":\"list\"}\r\n{\"version\":1,\"id\":2,\"command\":\"status\"}\n\n"))
                == [.handle(.number(1), .list()), .handle(.number(2), .status)])
        #expect(machine.endOfInput() == [.close])
        #expect(machine.received(Self.bytes("{}\n")) == [])
    }

    @Test func malformedLinesGetAnErrorAndTheConnectionGoesOn() {
        var machine = ControlConnectionStateMachine()
        let actions = machine.received(Self.bytes("garbage\n{\"version\":1,\"id\":2,\"command\":\"list\"}\n"))
        #expect(actions.count == 2)
        guard case .reply(let reply) = actions.first else { Issue.record("no reply"); return }
        #expect(!reply.ok && reply.error?.code == .malformed)
        #expect(actions.last == .handle(.number(2), .list()))
    }

    @Test func oversizedLinesAreAnsweredOnceAndSkipped() {
        var machine = ControlConnectionStateMachine(maximumLineLength: 64)
        var actions = machine.received([UInt8](repeating: UInt8(ascii: "x"), count: 200))
        actions += machine.received([UInt8](repeating: UInt8(ascii: "y"), count: 10_000))
        #expect(actions == [.reply(.failure(.tooLarge(), id: nil))])
        actions = machine.received(Self.bytes("zzz\n{\"version\":1,\"command\":\"status\"}\n"))
        #expect(actions == [.handle(nil, .status)])
    }

    @Test func anUnterminatedLastLineIsHandledAtEndOfInput() {
        var machine = ControlConnectionStateMachine()
        #expect(machine.received(Self.bytes(#"{"version":1,"command":"list"}"#)) == [])
        #expect(machine.endOfInput() == [.handle(nil, .list()), .close])
    }
}
