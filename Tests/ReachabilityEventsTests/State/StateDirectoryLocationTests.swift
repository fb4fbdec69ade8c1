import Testing
@testable import ReachabilityEvents

/// The one state-directory resolver of every product (`download`, `agent`, `queue`,
/// `AgentClient()`, `ResumableURLSession.Configuration.default`).
@Suite("State directory location")
struct StateDirectoryLocationTests {
    /// Explicit, then the variable, then XDG (when it is the user's), then root's, then HOME; uid 1000 owns /home/u and /x, root owns /r.
    @Test(arguments: [
        (nil as String?, ["XDG_STATE_HOME": "/x/state", "HOME": "/home/u"], 1000 as UInt32, "/x/state/reachability"),
        (nil, ["XDG_STATE_HOME": "relative", "HOME": "/home/u"], 1000, "/home/u/.local/state/reachability"),
        (nil, ["HOME": "/home/u"], 1000, "/home/u/.local/state/reachability"),
        (nil, ["HOME": "/root"], 0, "/var/lib/reachability"),
        (nil, ["XDG_STATE_HOME": "/r/state"], 0, "/r/state/reachability"),
        // sudo -E: another user's XDG_STATE_HOME is ignored.
        (nil, ["XDG_STATE_HOME": "/x/state", "HOME": "/home/u"], 0, "/var/lib/reachability"),
        // No HOME: the passwd entry's home.
        (nil, [:], 1001, "/home/passwd/.local/state/reachability"),
        (nil, ["REACHABILITY_STATE_DIR": "/srv/state", "XDG_STATE_HOME": "/x/state"], 1000, "/srv/state"),
        ("/tmp/mine", ["REACHABILITY_STATE_DIR": "/srv/state"], 0, "/tmp/mine"),
        ("rel/dir", [:], 0, "/work/rel/dir"),
    ])
    func stateDirectory(_ explicit: String?, _ environment: [String: String], _ uid: UInt32, _ expected: String) throws {
        let system = StateDirectoryLocation.System(
            effectiveUserID: uid, workingDirectory: "/work",
            owner: { path in path.hasPrefix("/home/u") || path.hasPrefix("/x") ? 1000 : path.hasPrefix("/r") ? 0 : nil },
            passwdHome: { "/home/passwd" })
        #expect(try StateDirectoryLocation.resolve(explicit: explicit, environment: environment, system: system) == expected)
    }

    @Test func aRelativeStateDirectoryVariableIsAConfigurationError() {
        #expect(throws: AgentFailure("REACHABILITY_STATE_DIR must be an absolute path, not 'rel'", kind: .configuration)) {
            try StateDirectoryLocation.resolve(explicit: nil, environment: ["REACHABILITY_STATE_DIR": "rel"])
        }
    }
}
