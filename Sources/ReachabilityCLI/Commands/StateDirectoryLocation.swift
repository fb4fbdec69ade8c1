import FoundationEssentials
import Glibc
import LinuxSystem

/// The one resolver of the state directory for `download`, `agent`, `queue` and `agent status`,
/// and the check every command applies before using it.
///
/// Order: `--state-dir`; `$REACHABILITY_STATE_DIR`; `$XDG_STATE_HOME/reachability` (only when
/// absolute, per the XDG spec, and owned by the effective user, so `sudo -E` never puts root's
/// state in another user's directory); `/var/lib/reachability` for root; else
/// `$HOME/.local/state/reachability` (the passwd entry's home when `$HOME` is unset).
enum StateDirectoryLocation {
    static let environmentVariable = "REACHABILITY_STATE_DIR"

    /// What the resolver needs from the system, injectable for tests.
    struct System {
        var effectiveUserID: UInt32
        var workingDirectory: String
        /// The owner of an existing path (following links), nil when it does not exist.
        var owner: (String) -> UInt32?
        /// The passwd entry's home directory for the effective user.
        var passwdHome: () -> String?

        static var current: System { current(effectiveUserID: geteuid(), workingDirectory: FileManager.default.currentDirectoryPath) }

        /// The real file system, with the command context's user and working directory.
        static func current(_ context: CommandContext) -> System {
            current(effectiveUserID: context.effectiveUserID, workingDirectory: context.currentDirectory)
        }

        static func current(effectiveUserID: UInt32, workingDirectory: String) -> System {
            System(effectiveUserID: effectiveUserID, workingDirectory: workingDirectory,
                   owner: { path in
                       var info = stat()
                       return stat(path, &info) == 0 ? info.st_uid : nil
                   },
                   passwdHome: {
                       guard let entry = getpwuid(geteuid()), let home = entry.pointee.pw_dir else { return nil }
                       return String(cString: home)
                   })
        }
    }

    /// The state directory's absolute path (not yet checked: see `open`).
    static func resolve(explicit: String?, environment: [String: String], system: System = .current) throws -> String {
        func absolute(_ path: String) -> String {
            let joined = path.hasPrefix("/") ? path : system.workingDirectory + "/" + path
            return URL(fileURLWithPath: joined).standardizedFileURL.path
        }
        if let explicit, !explicit.isEmpty { return absolute(explicit) }
        if let variable = environment[environmentVariable], !variable.isEmpty {
            guard variable.hasPrefix("/") else {
                throw CommandFailure(message: "\(environmentVariable) must be an absolute path, not '\(variable)'", exitCode: .configuration)
            }
            return absolute(variable)
        }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/"),
           system.owner(state) == system.effectiveUserID {
            return absolute(state + "/reachability")
        }
        if system.effectiveUserID == 0 { return "/var/lib/reachability" }
        // A HOME that belongs to someone else is caught by the check of the directories above
        // the state directory (`open`), with the fix in the message.
        let home: String?
        if let value = environment["HOME"], value.hasPrefix("/") { home = value } else { home = system.passwdHome() }
        guard let home, home.hasPrefix("/") else {
            throw CommandFailure(message: "cannot find a state directory (no home directory); use --state-dir or \(environmentVariable)",
                                 exitCode: .configuration)
        }
        return absolute(home + "/.local/state/reachability")
    }

    /// Opens (creating it 0700) and checks the state directory: it must be the effective user's
    /// (or root's) and writable by nobody else, and so must its parents unless sticky. An unsafe
    /// one is refused with the fix (exit 78); one that cannot be created exits `creationFailure`.
    static func open(_ path: String, creationFailure: ExitCode = .cannotCreate) throws -> CheckedDirectory {
        do {
            return try CheckedDirectory.open(path, policy: .privateState, creating: true)
        } catch {
            throw failure(error, creationFailure: creationFailure)
        }
    }

    /// The command failure for a file trust error: unsafe is a configuration problem (78).
    static func failure(_ error: FileTrustError, creationFailure: ExitCode = .cannotCreate) -> CommandFailure {
        if error.isUnsafe {
            return CommandFailure(message: "unsafe state directory: \(error)", exitCode: .configuration)
        }
        return CommandFailure(message: "cannot create state directory: \(error); use --state-dir DIR or set \(environmentVariable) to a directory you can write",
                              exitCode: creationFailure)
    }
}
