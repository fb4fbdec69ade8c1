import Foundation
import Synchronization
import Testing

/// A namespace lab (client and server namespaces, nginx with an access log, `OutageLab`) for
/// background sessions: `background-probe` runs in the client namespace and starts the agent
/// there on demand (`--agent` names the built binary), on the lab's state directory. `close()`
/// kills that agent too (it outlives every probe by design).
public final class BackgroundLab: Sendable {
    /// The namespaces and the server.
    public let net: OutageLab
    /// The bytes served under each name.
    public let content: [String: Data]

    /// Serves `files` (name: size) of seeded random bytes at `rate` per connection.
    public init(rate: String = "1m", files: [String: Int], seed: UInt64) throws {
        net = try OutageLab(rate: rate)
        var content: [String: Data] = [:]
        for (offset, (name, size)) in files.sorted(by: { $0.key < $1.key }).enumerated() {
            let data = DownloadFixtures.randomData(count: size, seed: seed &+ UInt64(offset))
            try net.serve(data, at: name)
            content[name] = data
        }
        self.content = content
    }

    /// The agent's and the sessions' state directory.
    public var state: URL { net.directory.file("state") }
    /// The server's URL of `name`.
    public func url(_ name: String) -> String { "\(net.url)/\(name)" }
    /// The SHA-256 of what is served under `name`.
    public func sha256(_ name: String) -> String { DownloadFixtures.sha256(content[name] ?? Data()) }

    /// `background-probe` in the client namespace on the lab's agent.
    public func probe(_ session: String, _ arguments: [String] = [], prefix: [String] = [],
               environment: [String: String] = [:]) throws -> ProbeProcess {
        try ProbeProcess(["--state-dir", state.path, "--session", session, "--agent", try BuiltProducts.url("reachability").path]
                         + arguments, namespace: net.client, product: "background-probe", prefix: prefix, environment: environment)
    }

    /// The probe's arguments that make it the command the agent launches, writing to `output`.
    public func launchArguments(output: URL) throws -> [String] {
        let probe = try BuiltProducts.url("background-probe").path
        let agent = try BuiltProducts.url("reachability").path
        return [probe, "--state-dir", state.path, "--output", output.path, "--exit-after-events", "--lifetime", "60", "--agent", agent]
            .flatMap { ["--launch", $0] }
    }

    /// The running agent's pid (from its lock file), if one holds the state directory.
    public var agentPID: Int32? {
        guard let text = try? String(contentsOf: state.appendingPathComponent("agent.lock"), encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), kill(pid, 0) == 0 else { return nil }
        return pid
    }

    /// Body bytes nginx sent, once `count` requests have ended (nginx logs a request when it
    /// ends; the agent's idle keep-alive connections may stay open much longer).
    public func bytesSent(afterRequests count: Int) async -> Int {
        _ = await DownloadFixtures.wait(timeout: .seconds(15)) { self.net.requests.count >= count }
        return net.requests.reduce(0) { $0 + $1.bytes }
    }

    /// `reachability ARGS --state-dir STATE` (control commands reach the socket from any namespace).
    public func control(_ arguments: [String], prefix: [String] = []) throws -> ChildProcess.Result {
        try BuiltProducts.run("reachability", arguments + ["--state-dir", state.path], prefix: prefix)
    }

    /// `agent status --json`, parsed.
    public func status() -> [String: Any]? {
        guard let result = try? control(["agent", "status", "--json"]), result.status == 0 else { return nil }
        return try? JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any]
    }

    /// The status of background session `identifier`.
    public func session(_ identifier: String) -> [String: Any]? {
        (status()?["backgroundSessions"] as? [[String: Any]])?.first { $0["identifier"] as? String == identifier }
    }

    /// Waits until session `identifier`'s status satisfies `predicate`.
    public func waitForSession(_ identifier: String, timeout: Duration = .seconds(40),
                        _ predicate: @escaping @Sendable ([String: Any]) -> Bool) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.session(identifier).map(predicate) ?? false }
    }

    /// `queue list --json`, parsed.
    public func list() -> [[String: Any]] {
        let text = (try? control(["queue", "list", "--json", "--all"]))?.standardOutput ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Lines of the agent's log of one type and event.
    public func agentEvents(_ type: String, _ event: String) -> [[String: Any]] {
        let text = (try? String(contentsOf: state.appendingPathComponent("agent.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .filter { $0["type"] as? String == type && $0["event"] as? String == event }
    }

    /// Files left in `STATE/background/downloads`.
    public var backgroundFiles: [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("background/downloads").path)) ?? []
    }

    /// SIGKILL to the agent the probes started.
    public func killAgent() {
        if let pid = agentPID { kill(pid, SIGKILL) }
    }

    /// Stops the agent and removes the lab.
    public func close() {
        if let pid = agentPID {
            kill(pid, SIGKILL)
            _ = DownloadFixtures.waitSync(timeout: .seconds(5)) { kill(pid, 0) != 0 }
        }
        net.close()
    }
}

/// NDJSON lines appended to a file (what a launched probe writes with `--output`).
public struct LineFile: Sendable {
    /// The file.
    public let url: URL

    /// Reads `url`.
    public init(url: URL) { self.url = url }

    /// The lines parsed as JSON objects.
    public var objects: [[String: ProbeProcess.SendableJSON]] {
        let text = (try? String(contentsOf: url, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { ProbeProcess.parse(String($0)) }
    }

    /// The lines whose `call` is `name`.
    public func calls(_ name: String) -> [[String: ProbeProcess.SendableJSON]] { objects.filter { $0["call"]?.string == name } }
}

extension ProbeProcess {
    /// The tasks' finished lines, by task identifier.
    public var finishedByTask: [Int: [Line]] { Dictionary(grouping: calls("finished"), by: { $0.object["task"]?.int ?? -1 }) }
}
