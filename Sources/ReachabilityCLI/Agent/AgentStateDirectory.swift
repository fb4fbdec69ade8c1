import FoundationEssentials
import LinuxReachability
import Glibc

/// Where the agent keeps its socket, lock, log, configuration and resume records.
///
/// ```
/// STATE_DIR/          0700
///   agent.lock        flock: one agent per directory (holds its pid)
///   agent.sock        control socket, 0600
///   agent.log         NDJSON events, rotated to agent.log.1 ... agent.log.3
///   agent.conf        max-concurrent=N, no-expensive=true|false (re-read on SIGHUP)
///   agent-state.json  downloads paused by a user (kept paused across restarts)
///   records/          ResumableDownloads resume records
///   files/            downloads queued without -o
/// ```
enum AgentStateDirectory {
    /// `--state-dir` when given; else /var/lib/reachability for root, else
    /// `$XDG_STATE_HOME/reachability` (only when absolute, per the XDG spec), else
    /// `~/.local/state/reachability`.
    static func resolve(_ explicit: String?, environment: [String: String], isRoot: Bool) -> String {
        if let explicit, !explicit.isEmpty {
            return explicit.hasPrefix("/") ? explicit : FileManager.default.currentDirectoryPath + "/" + explicit
        }
        if isRoot { return "/var/lib/reachability" }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/reachability" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? FileManager.default.homeDirectoryForCurrentUser.path
        return home + "/.local/state/reachability"
    }

    static func socketPath(in directory: String) -> String { directory + "/agent.sock" }
    static func lockPath(in directory: String) -> String { directory + "/agent.lock" }
    static func logPath(in directory: String) -> String { directory + "/agent.log" }
    static func configurationPath(in directory: String) -> String { directory + "/agent.conf" }
    static func pausedPath(in directory: String) -> String { directory + "/agent-state.json" }
    static func recordsDirectory(in directory: String) -> String { directory + "/records" }
    static func filesDirectory(in directory: String) -> String { directory + "/files" }

    /// Creates the directory (and parents) and makes it 0700. An existing directory owned by
    /// this user is tightened to 0700 (systemd's StateDirectory= creates 0755 unless told otherwise).
    static func prepare(_ directory: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            var info = stat()
            guard stat(directory, &info) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            if info.st_uid == geteuid(), info.st_mode & 0o777 != 0o700 { chmod(directory, 0o700) }
            for sub in [recordsDirectory(in: directory), filesDirectory(in: directory)] {
                try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
            }
        } catch {
            throw CommandFailure(message: "cannot create state directory \(directory): \(TextFormat.reason(error))",
                                 exitCode: .failure)
        }
    }

    /// Holds the state directory's lock for the life of the process, or explains who has it.
    static func lock(_ directory: String) throws -> Int32 {
        let path = lockPath(in: directory)
        let descriptor: Int32?
        do {
            descriptor = try UnixSocketSyscalls.lockFile(path)
        } catch {
            throw CommandFailure(message: "cannot lock \(path): \(error)", exitCode: .failure)
        }
        guard let descriptor else {
            let holder = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingWhitespace()
            let who = holder.flatMap { $0.isEmpty ? nil : " (pid \($0))" } ?? ""
            throw CommandFailure(message: "another agent is already running on \(directory)\(who)", exitCode: .failure)
        }
        UnixSocketSyscalls.replaceContents(descriptor, with: "\(getpid())\n")
        return descriptor
    }
}

/// The settings SIGHUP can change, from the command line and `agent.conf`.
struct AgentSettings: Sendable, Equatable {
    /// Downloads transferring at once.
    var maximumConcurrentDownloads: Int
    /// Whether new downloads may use expensive (cellular-like) paths.
    var allowsExpensive: Bool

    /// `agent.conf`: `key=value` lines, `#` comments. Keys: `max-concurrent` (1...64),
    /// `no-expensive` (true/false). Values present in the file override `base`.
    static func parse(_ text: String, base: AgentSettings, path: String) throws -> AgentSettings {
        var settings = base
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            var line = Substring(rawLine)
            if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
            let trimmed = line.trimmingWhitespace()
            if trimmed.isEmpty { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1).map { $0.trimmingWhitespace() }
            let location = "\(path):\(number + 1)"
            guard parts.count == 2 else { throw CommandFailure(message: "\(location): expected key=value", exitCode: .configuration) }
            switch parts[0] {
            case "max-concurrent":
                guard let value = Int(parts[1]), (1...64).contains(value) else {
                    throw CommandFailure(message: "\(location): max-concurrent must be 1...64", exitCode: .configuration)
                }
                settings.maximumConcurrentDownloads = value
            case "no-expensive":
                switch parts[1].lowercased() {
                case "true", "yes", "1": settings.allowsExpensive = false
                case "false", "no", "0": settings.allowsExpensive = true
                default: throw CommandFailure(message: "\(location): no-expensive must be true or false", exitCode: .configuration)
                }
            default:
                throw CommandFailure(message: "\(location): unknown key '\(parts[0])' (expected max-concurrent, no-expensive)",
                                     exitCode: .configuration)
            }
        }
        return settings
    }
}
