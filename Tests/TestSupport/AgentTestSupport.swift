import Foundation
import Synchronization
import Testing

/// A `reachability agent` child process whose NDJSON stdout is collected line by line.
public final class AgentProcess: Sendable {
    /// The agent's `--state-dir`.
    public let stateDirectory: URL
    /// The running agent.
    public let process: Process
    private let lines = Mutex<[String]>([])
    private let errors = Mutex<String>("")

    /// Starts `reachability agent --state-dir DIR ARGS` and, unless told not to, waits for its
    /// socket to accept connections (the "listening" event).
    /// `prefix` wraps the command (e.g. `setpriv` to run the agent as another user).
    public init(stateDirectory: URL, arguments: [String] = [], environment: [String: String] = [:], waitUntilListening: Bool = true,
         prefix: [String] = []) throws {
        self.stateDirectory = stateDirectory
        let output = Pipe(), error = Pipe()
        process = try ChildProcess.start(try BuiltProducts.url("reachability").path,
                                         ["agent", "--state-dir", stateDirectory.path] + arguments, prefix: prefix,
                                         environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent"].merging(environment) { $1 },
                                         output: output, error: error)
        let outputHandle = output.fileHandleForReading, errorHandle = error.fileHandleForReading
        Thread { [weak self] in
            var pending = Data()
            while true {
                let chunk = outputHandle.availableData
                if chunk.isEmpty { break }
                pending += chunk
                while let newline = pending.firstIndex(of: 10) {
                    let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                    pending = Data(pending[(newline + 1)...])
                    self?.lines.withLock { $0.append(line) }
                }
            }
        }.start()
        Thread { [weak self] in
            while true {
                let chunk = errorHandle.availableData
                if chunk.isEmpty { break }
                self?.errors.withLock { $0 += String(decoding: chunk, as: UTF8.self) }
            }
        }.start()
        if waitUntilListening {
            guard waitForLine(timeout: .seconds(20), { $0.contains(#""event":"listening""#) }) != nil else {
                stop()
                throw LabCommandFailure(description: "agent did not start listening; stderr: \(standardError)")
            }
        }
    }

    /// Its stdout lines so far.
    public var output: [String] { lines.withLock { $0 } }
    /// Its stderr so far.
    public var standardError: String { errors.withLock { $0 } }
    /// Its process id.
    public var pid: Int32 { process.processIdentifier }

    /// The parsed NDJSON objects printed so far.
    public var events: [[String: Any]] {
        output.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Waits (deadline, not a fixed sleep) for an output line matching `predicate`.
    @discardableResult
    public func waitForLine(timeout: Duration = .seconds(30), _ predicate: (String) -> Bool) -> String? {
        var line: String?
        _ = waitUntilBlocking(deadline: .now + timeout) {
            line = output.first(where: predicate)
            return line != nil || !process.isRunning
        }
        return line ?? output.first(where: predicate)
    }

    /// Waits for `count` lines matching `predicate`.
    public func waitForLines(_ count: Int, timeout: Duration = .seconds(60), _ predicate: (String) -> Bool) -> Bool {
        waitUntilBlocking(deadline: .now + timeout) { output.filter(predicate).count >= count }
    }

    /// Sends `signal` and waits for the exit; returns the status and how long it took, or nil on timeout.
    public func terminate(_ signal: Int32 = SIGTERM, timeout: Duration = .seconds(10)) -> (status: Int32, elapsed: Duration)? {
        let start = ContinuousClock.now
        kill(process.processIdentifier, signal)
        guard waitUntilBlocking(deadline: start + timeout, every: .milliseconds(2), { !process.isRunning }) else { return nil }
        return (process.terminationStatus, ContinuousClock.now - start)
    }

    /// SIGKILL, and reaped (nothing when it already exited).
    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { stop() }

    /// Runs a `reachability` control command against this agent's state directory.
    public func control(_ arguments: [String], prefix: [String] = []) throws -> ChildProcess.Result {
        try BuiltProducts.run("reachability", arguments + ["--state-dir", stateDirectory.path], prefix: prefix)
    }

    /// `queue list --json`, parsed.
    public func list() throws -> [[String: Any]] {
        let result = try control(["queue", "list", "--json", "--all"])
        return result.standardOutput.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }
}

/// A network namespace whose path is satisfied (veth with a default route), for
/// `agent --netns`: the agent's monitor then sees a usable path whatever the host's routing,
/// while its downloads still go to nginx on the host's loopback.
public final class ConnectedNamespace: Sendable {
    /// The lab that owns the namespace.
    public let lab = NetworkLab()
    /// The namespace's name.
    public let name: String

    /// Creates the namespace with its veth pair and default route.
    public init() throws {
        name = try lab.namespace("agent")
        // A veth pair with both ends inside (the dummy module may be missing): carrier comes up
        // once both ends are up.
        try ip("-n \(name) link add uplink type veth peer name peer0")
        try ip("-n \(name) addr add 10.77.0.2/24 dev uplink")
        try ip("-n \(name) link set peer0 up")
        try ip("-n \(name) link set uplink up")
        try ip("-n \(name) route add default via 10.77.0.1 dev uplink")
    }

    deinit { lab.close() }
}
