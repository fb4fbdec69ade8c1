import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ReachabilityEvents

/// Finds the user's agent for a background session, starting one when none runs.
///
/// - Where systemd's user manager runs the agent's socket unit
///   (`packaging/user/reachability-agent.socket`, enabled by the Debian package), the socket is
///   always there: connecting starts the agent, and nothing here runs.
/// - Otherwise, with no agent on the state directory, `EXECUTABLE agent --state-dir DIR` is
///   started detached: a session of its own (a terminal hang-up does not reach it), in `/`, no
///   descriptor of the caller's, stdin and stdout on /dev/null, stderr to `STATE_DIR/agent.err`
///   (so a start that fails can be explained). It outlives the caller. Under a systemd service
///   it is in that service's cgroup and is stopped with it: use the socket unit there.
///
/// Two processes starting one at once are fine: the second agent finds the state directory
/// locked and exits, and both connect to the first.
package enum AgentStarter {
    /// Variables meant for the caller's own unit, never passed to an agent it starts.
    static let unitVariables = ["NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC",
                                "REACHABILITY_BACKGROUND_SESSION"]

    /// Connects to the agent on `stateDirectory`, starting `executable` (`reachability`, looked
    /// up in `environment["PATH"]` unless a path) when none answers; waits up to `timeout` for it.
    package static func connect(stateDirectory: String, executable: String?, environment: [String: String],
                                timeout: Duration = .seconds(15),
                                onEvent: @escaping @Sendable (BackgroundEvent) -> Void,
                                onClose: @escaping @Sendable (AgentClientError) -> Void) throws(AgentClientError) -> AgentConnection {
        do {
            return try AgentConnection.connect(stateDirectory: stateDirectory, onEvent: onEvent, onClose: onClose)
        } catch where error != .notRunning {
            throw error
        } catch {}
        let program = executable ?? "reachability"
        let pid = try start(program, stateDirectory: stateDirectory, environment: environment)
        let deadline = ContinuousClock.now + timeout
        var exited: CurrentProcess.ExitStatus?
        while true {
            do {
                let connection = try AgentConnection.connect(stateDirectory: stateDirectory, onEvent: onEvent, onClose: onClose)
                if exited == nil { reap(pid) }
                return connection
            } catch where error == .notRunning {
                // Not listening yet.
            }
            if exited == nil, let status = CurrentProcess.exitStatusIfEnded(of: pid) {
                exited = status
                // Another agent won the state directory's lock: it will answer.
                if !lastError(stateDirectory).contains("another agent is already running") {
                    throw AgentClientError(.notRunning, "the agent started for this background session (\(program) agent --state-dir \(stateDirectory)) \(status): \(lastError(stateDirectory))")
                }
            }
            guard ContinuousClock.now < deadline else {
                throw AgentClientError(.notRunning, "the agent started for this background session (\(program), pid \(pid)) did not listen on \(stateDirectory)/agent.sock within \(timeout.formattedSeconds) s; see \(stateDirectory)/agent.err and agent.log")
            }
            CurrentProcess.sleep(milliseconds: 10)
        }
    }

    private static func start(_ program: String, stateDirectory: String, environment: [String: String]) throws(AgentClientError) -> Int32 {
        let directory: CheckedDirectory
        do {
            directory = try StateDirectoryLocation.open(stateDirectory)
        } catch {
            throw AgentClientError(.noStateDirectory, "cannot start an agent for this background session: \(error.message)")
        }
        let errors: CheckedDirectory.OpenedFile
        do {
            errors = try directory.openOwnedFile("agent.err", creating: .openOrCreate, mode: 0o600, appending: true)
            try errors.descriptor.truncate(to: 0)
        } catch {
            throw AgentClientError(.noStateDirectory, "cannot start an agent for this background session: \(error)")
        }
        defer { errors.descriptor.close() }
        var environment = environment
        for name in unitVariables { environment[name] = nil }
        do {
            // In "/": a daemon must not hold the program's working directory (a mount point) busy.
            return try CurrentProcess.spawn(program, arguments: [program, "agent", "--state-dir", stateDirectory],
                                            environment: environment, searchingPath: true, newSession: true, directory: "/",
                                            standardError: errors.descriptor)
        } catch {
            let hint = program.contains("/") ? "" : " (not found on PATH? install reachability, or name the binary in the configuration's agentExecutable)"
            throw AgentClientError(.notRunning, "cannot start the agent '\(program)' for this background session: \(error)\(hint)")
        }
    }

    /// The agent is a child of this process: reap it when it ends, so it leaves no zombie.
    private static func reap(_ pid: Int32) {
        SystemThread.detach(name: "agent-reaper") { _ = CurrentProcess.waitForExit(of: pid) }
    }

    /// The last lines the started agent wrote to `agent.err`.
    private static func lastError(_ stateDirectory: String) -> String {
        guard let directory = try? CheckedDirectory.open(stateDirectory, policy: .privateState),
              let bytes = try? directory.readOwnedFile("agent.err", limit: 64 << 10) else { return "no error output" }
        let text = String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
        return text.isEmpty ? "no error output" : String(text.suffix(2000))
    }
}
