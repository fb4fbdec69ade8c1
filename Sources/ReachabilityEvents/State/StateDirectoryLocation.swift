import FoundationEssentials
import LinuxSystem

/// The one resolver of the state directory for every product: the command line's `download`,
/// `agent`, `queue` and `agent status`, `AgentClient`, and `ResumableURLSession`'s default
/// configuration (its `url-session` subdirectory); and the check every one applies before using it.
///
/// Order: `--state-dir`; `$REACHABILITY_STATE_DIR`; `$XDG_STATE_HOME/reachability` (only when
/// absolute, per the XDG spec, and owned by the effective user, so `sudo -E` never puts root's
/// state in another user's directory); `/var/lib/reachability` for root; else
/// `$HOME/.local/state/reachability` (the passwd entry's home when `$HOME` is unset).
package enum StateDirectoryLocation {
    package static let environmentVariable = "REACHABILITY_STATE_DIR"

    /// What the resolver needs from the system, injectable for tests.
    package struct System {
        package var effectiveUserID: UInt32
        package var workingDirectory: String
        /// The owner of an existing path (following links), nil when it does not exist.
        package var owner: (String) -> UInt32?
        /// The passwd entry's home directory for the effective user.
        package var passwdHome: () -> String?

        package init(effectiveUserID: UInt32, workingDirectory: String, owner: @escaping (String) -> UInt32?,
                     passwdHome: @escaping () -> String?) {
            self.effectiveUserID = effectiveUserID
            self.workingDirectory = workingDirectory
            self.owner = owner
            self.passwdHome = passwdHome
        }

        package static var current: System { current(effectiveUserID: CurrentProcess.effectiveUserID, workingDirectory: FileManager.default.currentDirectoryPath) }

        package static func current(effectiveUserID: UInt32, workingDirectory: String) -> System {
            System(effectiveUserID: effectiveUserID, workingDirectory: workingDirectory,
                   owner: { path in (try? FileSystem.status(ofPath: path, followingLinks: true))??.ownerID },
                   passwdHome: { CurrentProcess.passwordHomeDirectory })
        }
    }

    /// The state directory's absolute path (not yet checked: see `open`).
    package static func resolve(explicit: String?, environment: [String: String], system: System = .current) throws(AgentFailure) -> String {
        func absolute(_ path: String) -> String {
            let joined = path.hasPrefix("/") ? path : system.workingDirectory + "/" + path
            return URL(fileURLWithPath: joined).standardizedFileURL.path
        }
        if let explicit, !explicit.isEmpty { return absolute(explicit) }
        if let variable = environment[environmentVariable], !variable.isEmpty {
            guard variable.hasPrefix("/") else {
                throw AgentFailure("\(environmentVariable) must be an absolute path, not '\(variable)'", kind: .configuration)
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
            throw AgentFailure("cannot find a state directory (no home directory); use --state-dir or \(environmentVariable)",
                                 kind: .configuration)
        }
        return absolute(home + "/.local/state/reachability")
    }

    /// Opens (creating it 0700) and checks the state directory: it must be the effective user's
    /// (or root's) and writable by nobody else, and so must its parents unless sticky. An unsafe
    /// one is refused with the fix (`.configuration`); one that cannot be created fails as
    /// `creationFailure`.
    package static func open(_ path: String, creationFailure: AgentFailure.Kind = .cannotCreate) throws(AgentFailure) -> CheckedDirectory {
        do {
            return try CheckedDirectory.open(path, policy: .privateState, creating: true)
        } catch {
            throw failure(error, creationFailure: creationFailure)
        }
    }

    /// The failure for a file trust error: unsafe is a configuration problem.
    package static func failure(_ error: FileTrustError, creationFailure: AgentFailure.Kind = .cannotCreate) -> AgentFailure {
        if error.isUnsafe {
            return AgentFailure("unsafe state directory: \(error)", kind: .configuration)
        }
        return AgentFailure("cannot create state directory: \(error); use --state-dir DIR or set \(environmentVariable) to a directory you can write",
                            kind: creationFailure)
    }
}
