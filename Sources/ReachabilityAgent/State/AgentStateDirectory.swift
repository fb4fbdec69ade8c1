import FoundationEssentials
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ReachabilityEvents

/// Where the agent keeps its socket, lock, log, configuration and resume records.
///
/// ```
/// STATE_DIR/          0700
///   agent.lock        flock: one agent per directory (holds its pid)
///   agent.sock        control socket, 0600
///   agent.log         NDJSON events, rotated to agent.log.1 ... agent.log.3
///   agent.conf        max-concurrent=N, no-expensive=|no-roaming=true|false (re-read on SIGHUP)
///   agent-state.json  downloads paused by a user (kept paused across restarts)
///   records/          ResumableDownloads resume records
///   files/            downloads queued without -o
/// ```
package enum AgentStateDirectory {
    /// The state directory from the one resolver (see `StateDirectoryLocation`).
    package static func resolve(_ explicit: String?, environment: [String: String],
                                system: StateDirectoryLocation.System = .current) throws(AgentFailure) -> String {
        try StateDirectoryLocation.resolve(explicit: explicit, environment: environment, system: system)
    }

    package static func socketPath(in directory: String) -> String { directory + "/agent.sock" }
    package static func lockPath(in directory: String) -> String { directory + "/agent.lock" }
    package static func configurationPath(in directory: String) -> String { directory + "/agent.conf" }
    package static func recordsDirectory(in directory: String) -> String { directory + "/records" }
    package static func filesDirectory(in directory: String) -> String { directory + "/files" }

    /// Creates the directory (and parents) 0700 and checks it (exit 78 with the fix when it is
    /// another user's or writable by others); an existing one of ours is tightened to 0700
    /// (systemd's StateDirectory= creates 0755 unless told otherwise). Makes `records/` and `files/`.
    @discardableResult
    package static func prepare(_ directory: String) throws -> CheckedDirectory {
        let checked = try StateDirectoryLocation.open(directory, creationFailure: .unavailable)
        do {
            _ = try checked.subdirectory("records", creating: true)
            _ = try checked.subdirectory("files", creating: true)
        } catch {
            throw StateDirectoryLocation.failure(error, creationFailure: .unavailable)
        }
        return checked
    }

    /// Holds the state directory's lock for the life of the process, or explains who has it.
    /// The lock file is opened relative to the checked directory, never through a link.
    package static func lock(_ directory: CheckedDirectory) throws -> FileDescriptor {
        let path = directory.child("agent.lock")
        let descriptor: FileDescriptor
        do {
            descriptor = try directory.openOwnedFile("agent.lock", creating: .openOrCreate, mode: 0o600).descriptor
        } catch {
            throw AgentFailure("cannot lock \(path): \(error)", kind: error.isUnsafe ? .configuration : .unavailable)
        }
        guard (try? descriptor.tryLockExclusive()) == true else {
            descriptor.close()
            let holder = (try? directory.readOwnedFile("agent.lock", limit: 64)).map { String(decoding: $0, as: UTF8.self) }?
                .trimmingWhitespace()
            let who = holder.flatMap { $0.isEmpty ? nil : " (pid \($0))" } ?? ""
            throw AgentFailure("another agent is already running on \(directory.path)\(who)", kind: .unavailable)
        }
        try? descriptor.truncate(to: 0)
        let pid = Array("\(CurrentProcess.id)\n".utf8)
        _ = pid.withUnsafeBytes { descriptor.writeAll($0, at: 0) }
        return descriptor
    }
}
