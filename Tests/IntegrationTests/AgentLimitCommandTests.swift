import Foundation
import Testing
import TestSupport

/// Issue 32 item 2 through the real agent: agent.conf's `limit-rate=` lines, `agent limit`,
/// `agent status`, the `limit` event, SIGHUP, and a bad line's exit 78 with file:line.
@Suite("agent limit", .serialized)
struct AgentLimitCommandTests: DownloadScenarios {

    @Test func agentConfSetsTheLimitAndAgentLimitChangesItUntilAReload() throws {
        let namespace = try ConnectedNamespace()
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try "limit-rate=2M 00:00-24:00\nlimit-rate=none\n".write(to: state.appendingPathComponent("agent.conf"), atomically: true, encoding: .utf8)
        let agent = try AgentProcess(stateDirectory: state, arguments: ["--netns", namespace.name])
        #expect(agent.waitForLine { $0.contains(#""event":"limit","bytesPerSecond":2097152,"window":"00:00-24:00""#) } != nil)
        let status = try agent.control(["agent", "status"])
        #expect(status.standardOutput.contains("limit 2 MiB/s (00:00-24:00)"), "\(status)")

        let set = try agent.control(["agent", "limit", "4m"])
        #expect(set.status == 0 && set.standardOutput == "limit 4 MiB/s (agent limit)\n", "\(set)")
        let json = try agent.control(["agent", "status", "--json"])
        #expect(json.standardOutput.contains(#""limitBytesPerSecond":4194304"#), "\(json)")
        #expect(agent.waitForLine { $0.contains(#""event":"limit","bytesPerSecond":4194304,"window":null,"source":"agent limit""#) } != nil)
        #expect(try agent.control(["agent", "limit", "none"]).standardOutput == "no limit (agent limit)\n")

        let bad = try agent.control(["agent", "limit", "fast"])
        #expect(bad.status == 64 && bad.standardError.contains("'fast'"), "\(bad)")

        // A reload goes back to the file's lines.
        kill(agent.process.processIdentifier, SIGHUP)
        #expect(agent.waitForLine { $0.contains(#""event":"limit","bytesPerSecond":2097152,"window":"00:00-24:00","source":"agent.conf""#) } != nil)
        #expect(agent.terminate()?.status == 0)
    }

    @Test func aBadLimitLineStopsTheAgentWithItsFileAndLine() throws {
        let directory = try F.Directory("agent")
        let state = directory.file("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try "# office hours\nlimit-rate=2M 9-17 mon-fri\n".write(to: state.appendingPathComponent("agent.conf"), atomically: true, encoding: .utf8)
        let agent = try AgentProcess(stateDirectory: state, waitUntilListening: false)
        #expect(waitUntilBlocking(deadline: .now + .seconds(20)) { !agent.process.isRunning })
        #expect(agent.process.terminationStatus == 78)
        #expect(agent.standardError.contains("agent.conf:2: limit-rate: expected a time span like 09:00-17:00"), "\(agent.standardError)")
    }
}
