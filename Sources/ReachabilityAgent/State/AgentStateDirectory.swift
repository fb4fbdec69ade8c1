import FoundationEssentials
import LinuxReachability
import Glibc
import LinuxSystem
import ReachabilityBase

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
    /// The state directory from the one resolver (see `StateDirectoryLocation`).
    static func resolve(_ explicit: String?, environment: [String: String],
                        system: StateDirectoryLocation.System = .current) throws -> String {
        try StateDirectoryLocation.resolve(explicit: explicit, environment: environment, system: system)
    }

    static func socketPath(in directory: String) -> String { directory + "/agent.sock" }
    static func lockPath(in directory: String) -> String { directory + "/agent.lock" }
    static func configurationPath(in directory: String) -> String { directory + "/agent.conf" }
    static func recordsDirectory(in directory: String) -> String { directory + "/records" }
    static func filesDirectory(in directory: String) -> String { directory + "/files" }

    /// Creates the directory (and parents) 0700 and checks it (exit 78 with the fix when it is
    /// another user's or writable by others); an existing one of ours is tightened to 0700
    /// (systemd's StateDirectory= creates 0755 unless told otherwise). Makes `records/` and `files/`.
    @discardableResult
    static func prepare(_ directory: String) throws -> CheckedDirectory {
        let checked = try StateDirectoryLocation.open(directory, creationFailure: .failure)
        do {
            _ = try checked.subdirectory("records", creating: true)
            _ = try checked.subdirectory("files", creating: true)
        } catch {
            throw StateDirectoryLocation.failure(error, creationFailure: .failure)
        }
        return checked
    }

    /// Holds the state directory's lock for the life of the process, or explains who has it.
    /// The lock file is opened relative to the checked directory, never through a link.
    static func lock(_ directory: CheckedDirectory) throws -> FileDescriptor {
        let path = directory.child("agent.lock")
        let descriptor: FileDescriptor
        do {
            descriptor = try directory.openOwnedFile("agent.lock", creating: .openOrCreate, mode: 0o600).descriptor
        } catch {
            throw CommandFailure(message: "cannot lock \(path): \(error)", exitCode: error.isUnsafe ? .configuration : .failure)
        }
        guard (try? descriptor.tryLockExclusive()) == true else {
            descriptor.close()
            let holder = (try? directory.readOwnedFile("agent.lock", limit: 64)).map { String(decoding: $0, as: UTF8.self) }?
                .trimmingWhitespace()
            let who = holder.flatMap { $0.isEmpty ? nil : " (pid \($0))" } ?? ""
            throw CommandFailure(message: "another agent is already running on \(directory.path)\(who)", exitCode: .failure)
        }
        try? descriptor.truncate(to: 0)
        let pid = Array("\(getpid())\n".utf8)
        _ = pid.withUnsafeBytes { descriptor.writeAll($0, at: 0) }
        return descriptor
    }
}

/// The settings SIGHUP can change, from the command line and `agent.conf`.
struct AgentSettings: Sendable, Equatable {
    /// Downloads transferring at once.
    var maximumConcurrentDownloads: Int
    /// Whether new downloads may use expensive (cellular-like) paths.
    var allowsExpensive: Bool
    /// Directories (absolute, normalised) where `queue add -o` may put files, besides
    /// `STATE_DIR/files`: the owner lists them in `agent.conf` as `download-dir=`.
    var downloadDirectories: [String] = []

    /// `--max-concurrent` and `max-concurrent=`.
    static let concurrency = Count(1...64)

    /// `agent.conf`: `key=value` lines, `#` comments. Keys: `max-concurrent` (1...64),
    /// `no-expensive` (true/false), `download-dir` (an absolute directory; repeatable). Values
    /// present in the file override `base`.
    static func parse(_ text: String, base: AgentSettings, path: String) throws -> AgentSettings {
        var settings = base
        var directories: [String] = []
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            var line = Substring(rawLine)
            if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
            let trimmed = line.trimmingWhitespace()
            if trimmed.isEmpty { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1).map { $0.trimmingWhitespace() }
            let location = "\(path):\(number + 1)"
            guard parts.count == 2 else { throw CommandFailure(message: "\(location): expected key=value", exitCode: .configuration) }
            func value<Kind: TextValueKind>(_ kind: Kind) throws -> Kind.Value {
                do {
                    return try kind.parse(parts[1])
                } catch {
                    throw CommandFailure(message: "\(location): \(error.message(for: parts[0]))", exitCode: .configuration)
                }
            }
            switch parts[0] {
            case "max-concurrent":
                settings.maximumConcurrentDownloads = try value(Self.concurrency)
            case "no-expensive":
                settings.allowsExpensive = !(try value(YesOrNo()))
            case "download-dir":
                guard let directory = AgentDestination.normalizedAbsolutePath(parts[1]) else {
                    throw CommandFailure(message: "\(location): download-dir must be an absolute path without . or .. components",
                                         exitCode: .configuration)
                }
                directories.append(directory)
            default:
                throw CommandFailure(message: "\(location): unknown key '\(parts[0])' (expected max-concurrent, no-expensive, download-dir)",
                                     exitCode: .configuration)
            }
        }
        if !directories.isEmpty { settings.downloadDirectories = directories }
        return settings
    }
}
