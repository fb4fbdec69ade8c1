import Foundation
import LinuxReachability
import Testing
import TestSupport
@testable import ReachabilityCLI

/// `--metrics-file` against a hostile directory, and `watch` keeping it.
@Suite("metrics file")
struct MetricsFileTests {
    static func directory(mode: mode_t = 0o755) throws -> ScratchDirectory {
        try ScratchDirectory("mf", permissions: Int(mode))
    }

    @Test func writesAtomicallyWithMode0644AndLeavesNoTemporaryFile() throws {
        let directoryScratch = try Self.directory()
        let directory = directoryScratch.path
        let file = try MetricsFile(path: directory + "/r.prom", effectiveUserID: geteuid())
        #expect(file.warnings.isEmpty)
        let old = umask(0o077)
        defer { umask(old) }
        try file.write("a 1\n")
        try file.write("a 2\n")
        #expect(try String(contentsOfFile: directory + "/r.prom", encoding: .utf8) == "a 2\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["r.prom"])
        let mode = try FileManager.default.attributesOfItem(atPath: directory + "/r.prom")[.posixPermissions] as? Int
        #expect(mode == 0o644, "node_exporter runs as another user and must read it, whatever the umask")
    }

    /// A link at the file's name is replaced, never written through.
    @Test func aPlantedSymlinkIsReplacedNotFollowed() throws {
        let directoryScratch = try Self.directory()
        let directory = directoryScratch.path
        let victim = directory + "/victim"
        try "precious\n".write(toFile: victim, atomically: false, encoding: .utf8)
        symlink(victim, directory + "/r.prom")
        link(victim, directory + "/hard.prom")
        try MetricsFile(path: directory + "/r.prom", effectiveUserID: geteuid()).write("a 1\n")
        try MetricsFile(path: directory + "/hard.prom", effectiveUserID: geteuid()).write("a 1\n")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "precious\n")
        let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/r.prom")
        #expect(attributes[.type] as? FileAttributeType == .typeRegular)
    }

    /// The directory is pinned at start: moving another one into its place later changes nothing.
    @Test func writesStayInTheDirectoryCheckedAtStart() throws {
        let directoryScratch = try Self.directory()
        let directory = directoryScratch.path
        let elsewhereScratch = try Self.directory()
        let elsewhere = elsewhereScratch.path
        defer {
            try? FileManager.default.removeItem(atPath: directory + ".moved")
        }
        let file = try MetricsFile(path: directory + "/r.prom", effectiveUserID: geteuid())
        try FileManager.default.moveItem(atPath: directory, toPath: directory + ".moved")
        symlink(elsewhere, directory)
        try file.write("a 1\n")
        #expect(!FileManager.default.fileExists(atPath: elsewhere + "/r.prom"))
        #expect(FileManager.default.fileExists(atPath: directory + ".moved/r.prom"))
    }

    /// A symbolic link on the way that another user owns is not followed (root would otherwise
    /// write wherever that user points it).
    @Test(.enabled(if: geteuid() == 0, "lchown to another user needs root (CI runs as root)"))
    func aForeignSymlinkOnTheWayIsRefused() throws {
        let directoryScratch = try Self.directory()
        let directory = directoryScratch.path
        let targetScratch = try Self.directory()
        let target = targetScratch.path
        symlink(target, directory + "/link")
        lchown(directory + "/link", 12345, 12345)
        do {
            _ = try MetricsFile(path: directory + "/link/r.prom", effectiveUserID: 0)
            Issue.record("followed a symbolic link owned by uid 12345")
        } catch let failure as CommandFailure {
            #expect(failure.message.contains("symbolic link owned by uid 12345"), "\(failure.message)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: target).isEmpty)
    }

    @Test(arguments: [
        (mode_t(0o777), "is writable by every user"),
        (mode_t(0o1777), "is writable by every user"),
    ])
    func refusesAWorldWritableDirectory(mode: mode_t, fragment: String) throws {
        let directoryScratch = try Self.directory(mode: mode)
        let directory = directoryScratch.path
        do {
            _ = try MetricsFile(path: directory + "/r.prom", effectiveUserID: geteuid())
            Issue.record("accepted a directory with mode \(String(mode, radix: 8))")
        } catch let failure as CommandFailure {
            #expect(failure.exitCode == .cannotCreate)
            #expect(failure.message.contains(fragment), "\(failure.message)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
    }

    @Test func refusesAnotherUsersDirectoryAndBadNames() throws {
        let directoryScratch = try Self.directory()
        let directory = directoryScratch.path
        // Owned by root (uid 0) or by the user running the test: as uid 12345 it is someone else's
        // only when root does not own it.
        if geteuid() != 0 {
            #expect(throws: CommandFailure.self) { try MetricsFile(path: directory + "/r.prom", effectiveUserID: 12345) }
        } else {
            chown(directory, 12345, 12345)
            #expect(throws: CommandFailure.self) { try MetricsFile(path: directory + "/r.prom", effectiveUserID: 0) }
            chown(directory, 0, 0)
        }
        try FileManager.default.createDirectory(atPath: directory + "/d.prom", withIntermediateDirectories: false)
        for bad in [directory + "/", directory + "/d.prom", directory + "/..", directory + "/missing/r.prom"] {
            #expect(throws: CommandFailure.self, "\(bad)") { try MetricsFile(path: bad, effectiveUserID: geteuid()) }
        }
        let unusual = try MetricsFile(path: directory + "/r.txt", effectiveUserID: geteuid())
        #expect(unusual.warnings.first?.contains("only files whose names end in .prom") == true)
    }

    @Test(arguments: [
        (["--metrics-interval", "5"], "needs '--metrics-file <path>'"),
        (["--metrics-file", "x.prom", "--metrics-interval", "0"], "from 1 to 86400"),
        (["--metrics-file", "x.prom", "--metrics-interval", "soon"], "from 1 to 86400"),
        (["--metrics-file", ""], "expected a file path"),
    ])
    func rejectsBadOptions(arguments: [String], fragment: String) async {
        let harness = Harness()
        #expect(await harness.run(["watch"] + arguments) == 64)
        #expect(harness.standardError.text.contains(fragment), "\(harness.standardError.text)")
    }

    // MARK: watch

    /// `watch --metrics-file` under the harness: the file holds the path before the first line is
    /// printed, and the last path (with the outage) when the watch ends.
    @Test func watchKeepsTheFile() async throws {
        let directoryScratch = try Self.directory()
        let directory = directoryScratch.path
        let source = ScriptedPathSource(current: Fixtures.satisfiedWifi, script: [Fixtures.noRoute], staysOpen: true)
        let harness = Harness(source: source, currentDirectory: directory)
        let task = Task { await harness.run(["watch", "--metrics-file", "r.prom"]) }
        // The first line is printed after the file's first write and the signal handler are in place.
        #expect(await Polling.wait { !harness.standardOutput.lines.isEmpty })
        let path = directory + "/r.prom"
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(harness.signal(SIGTERM))
        #expect(await task.value == 0)
        let families = try MetricsParser.parse(try String(contentsOfFile: path, encoding: .utf8), format: .prometheus)
        #expect(MetricsParser.family("reachability_path_satisfied", in: families)?.samples.first?.value == 0)
        #expect(MetricsParser.family("reachability_path_outages", in: families)?.samples.first?.value == 1)
        #expect(MetricsParser.family("reachability_path_changes", in: families)?.samples.first?.value == 1)
        #expect(harness.standardOutput.lines.count == 2)
    }

    @Test func watchRefusesTmpBeforeWatching() async throws {
        let directoryScratch = try Self.directory(mode: 0o1777)
        let directory = directoryScratch.path
        let harness = Harness()
        #expect(await harness.run(["watch", "--metrics-file", directory + "/r.prom"]) == 73)
        #expect(harness.standardError.text.hasPrefix("Error: refusing --metrics-file \(directory)/r.prom: \(directory) is writable by every user (mode 1777)"))
        #expect(harness.configurations.isEmpty, "no monitor was started")
        #expect(harness.standardOutput.text.isEmpty)
    }
}
