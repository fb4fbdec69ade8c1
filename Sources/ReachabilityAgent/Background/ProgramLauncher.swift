import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// Starts a background session's program for its events: the Linux form of Apple relaunching an
/// app for `handleEventsForBackgroundURLSession`. Either a command (argv, no shell) run as a
/// child of the agent in a session of its own, or a systemd user unit started with
/// `systemctl --user start` (a template `name@.service` gets the identifier as its instance).
/// The program finds the identifier in `REACHABILITY_BACKGROUND_SESSION`.
///
/// Its output goes to the agent's standard error (the journal under systemd); the agent's
/// stdout is its NDJSON event stream and must not carry anything else. `ended` is called once,
/// from a thread of the launcher's, when the program (or `systemctl`) has ended: nil for exit
/// status 0, else why it failed.
package struct ProgramLauncher: Sendable {
    /// The variable the launched program reads its session identifier from.
    package static let sessionVariable = "REACHABILITY_BACKGROUND_SESSION"

    /// The agent's environment, handed on to commands (without the agent's own systemd variables).
    package var environment: [String: String]

    package init(environment: [String: String]) {
        var inherited = environment
        // Meant for the agent's own process: a launched program must not notify, or claim the
        // descriptors of, the agent's unit.
        for name in ["NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC"] {
            inherited[name] = nil
        }
        self.environment = inherited
    }

    /// How `settings` launches, for status lines: `unit NAME`, `command PROGRAM`, or nil.
    package static func describe(_ settings: BackgroundSessionSettings) -> String? {
        if let unit = settings.launchUnit { return "unit \(unit)" }
        if let command = settings.launchCommand?.first { return "command \(command)" }
        return nil
    }

    /// Starts the program for `identifier`; false (with `ended` already called) when nothing
    /// could be started.
    @discardableResult
    package func launch(_ identifier: String, settings: BackgroundSessionSettings,
                        ended: @escaping @Sendable (String?) -> Void) -> Bool {
        var environment = environment
        environment[Self.sessionVariable] = identifier
        let standardError = FileDescriptor(rawValue: 2)
        if let unit = settings.launchUnit {
            let name = SystemdUnitName.unit(unit, for: identifier)
            let isTemplate = SystemdUnitName.isTemplate(unit)
            let environment = environment
            SystemThread.detach(name: "launch-unit") {
                // A template's unit reads the identifier from its instance (%I); a plain unit gets
                // it from the user manager's environment for the moment of its start.
                if !isTemplate {
                    _ = Self.run(["systemctl", "--user", "set-environment", "\(Self.sessionVariable)=\(identifier)"], environment)
                }
                let outcome = Self.run(["systemctl", "--user", "start", name], environment)
                if !isTemplate {
                    _ = Self.run(["systemctl", "--user", "unset-environment", Self.sessionVariable], environment)
                }
                ended(outcome)
            }
            return true
        }
        guard let command = settings.launchCommand, let program = command.first else {
            ended("the session names no launchCommand or launchUnit")
            return false
        }
        let pid: Int32
        do {
            // In "/", as systemd starts a unit without WorkingDirectory=.
            pid = try CurrentProcess.spawn(program, arguments: command, environment: environment, searchingPath: true,
                                           newSession: true, directory: "/", standardOutput: standardError, standardError: standardError)
        } catch {
            ended("cannot start \(program): \(error)")
            return false
        }
        SystemThread.detach(name: "launch-wait") {
            let status = CurrentProcess.waitForExit(of: pid)
            ended(status.map { $0.isSuccess ? nil : "\(program) \($0)" } ?? nil)
        }
        return true
    }

    /// Runs `arguments` to completion; nil when it exited with 0, else why not.
    private static func run(_ arguments: [String], _ environment: [String: String]) -> String? {
        let standardError = FileDescriptor(rawValue: 2)
        do {
            let pid = try CurrentProcess.spawn(arguments[0], arguments: arguments, environment: environment,
                                               standardOutput: standardError, standardError: standardError)
            guard let status = CurrentProcess.waitForExit(of: pid) else { return nil }
            return status.isSuccess ? nil : "\(arguments.joined(separator: " ")) \(status)"
        } catch {
            return "cannot run \(arguments[0]): \(error)"
        }
    }
}
