import Foundation
@testable import ReachabilityCLI
import Testing

/// What the Debian package and the units promise, checked without building them (the package
/// itself is built, installed and run by scripts/test-deb.sh in CI).
@Suite("packaging")
struct PackagingTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// One version: `CommandRegistry.version` is what `--version` prints, and the top entry of
    /// debian/changelog (the .deb's version) must be the same (debian/rules checks the binary too).
    @Test func theChangelogCarriesTheBinarysVersion() throws {
        let firstLine = try Self.text("debian/changelog").split(separator: "\n").first.map(String.init) ?? ""
        #expect(firstLine.hasPrefix("reachability (\(CommandRegistry.version)) "),
                "debian/changelog starts '\(firstLine)', --version says \(CommandRegistry.version): add a changelog entry for the new version")
    }

    /// The settings a unit file gives `key`, in order.
    static func values(_ key: String, in unit: String) -> [String] {
        unit.split(separator: "\n").compactMap { line in
            line.hasPrefix(key + "=") ? String(line.dropFirst(key.count + 1)) : nil
        }
    }

    @Test func theUnitsNameWhatTheInstallsPut() throws {
        let system = try Self.text("packaging/reachability-agent.service")
        let userService = try Self.text("packaging/user/reachability-agent.service")
        let userSocket = try Self.text("packaging/user/reachability-agent.socket")
        for unit in [system, userService, userSocket] {
            // Installed by the README's source install and by the package.
            #expect(Self.values("Documentation", in: unit) == ["man:reachability(1)"])
        }
        // debian/rules rewrites this path to /usr/bin; a source install puts the binary there.
        #expect(Self.values("ExecStart", in: system) == ["/usr/local/bin/reachability agent --state-dir /var/lib/reachability"])
        // The socket systemd binds is the agent.sock of the state directory the service is given,
        // which is the default state directory of `reachability queue` for that user.
        let listen = try #require(Self.values("ListenStream", in: userSocket).first)
        let exec = try #require(Self.values("ExecStart", in: userService).first)
        #expect(listen == "%h/.local/state/reachability/agent.sock")
        #expect(exec == "/usr/local/bin/reachability agent --state-dir %h/.local/state/reachability")
        #expect(Self.values("Requires", in: userService) == ["reachability-agent.socket"])
        #expect(Self.values("SocketMode", in: userSocket) == ["0600"] && Self.values("DirectoryMode", in: userSocket) == ["0700"])
    }

    /// The wait-online unit is what issue 33 asks of one: a oneshot before network-online.target,
    /// pulled in by it once enabled, outside the default dependencies, its arguments from a
    /// conffile whose variable the command line names, and the package installs both.
    @Test func theWaitOnlineUnitOrdersNetworkOnline() throws {
        let unit = try Self.text("packaging/reachability-wait-online.service")
        #expect(Self.values("Type", in: unit) == ["oneshot"])
        #expect(Self.values("DefaultDependencies", in: unit) == ["no"])
        #expect(Self.values("Before", in: unit).first?.split(separator: " ").contains("network-online.target") == true)
        #expect(Self.values("WantedBy", in: unit) == ["network-online.target"])
        #expect(Self.values("EnvironmentFile", in: unit) == ["-/etc/reachability/wait-online.conf"])
        #expect(Self.values("ExecStart", in: unit) == ["/usr/local/bin/reachability wait $WAIT_ONLINE_ARGUMENTS"])
        #expect(Self.values("Documentation", in: unit) == ["man:reachability(1)"])
        let configuration = try Self.text("packaging/wait-online.conf")
        let arguments = try #require(Self.values("WAIT_ONLINE_ARGUMENTS", in: configuration).first)
        // What the unit would run parses as a wait command line.
        let parsed = try ParsedArguments.parse(arguments.split(separator: " ").map(String.init), options: WaitCommand.options)
        #expect(try WaitCommand(arguments: parsed).timeoutDuration == .seconds(120))
        let rules = try Self.text("debian/rules")
        #expect(rules.contains("$(PACKAGE_ROOT)/lib/systemd/system/reachability-wait-online.service"))
        #expect(rules.contains("packaging/wait-online.conf $(PACKAGE_ROOT)/etc/reachability/wait-online.conf"))
    }
}
