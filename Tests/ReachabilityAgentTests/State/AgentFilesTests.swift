import Foundation
import LinuxSystem
import Testing
import TestSupport
@testable import ReachabilityAgent
import ReachabilityAgent
@testable import ReachabilityEvents

/// The agent's files without a running agent: state directory mode, the lock, log rotation.
@Suite("Agent files")
struct AgentFilesTests {
    static func scratch() throws -> ScratchDirectory {
        try ScratchDirectory("af")
    }

    @Test func stateDirectoryIsPrivateAndTightened() throws {
        let baseScratch = try Self.scratch()
        let base = baseScratch.path
        let directory = base + "/a/b/state"
        try AgentStateDirectory.prepare(directory)
        var info = stat()
        #expect(stat(directory, &info) == 0 && info.st_mode & 0o777 == 0o700)
        chmod(directory, 0o755)
        try AgentStateDirectory.prepare(directory)
        #expect(stat(directory, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(FileManager.default.fileExists(atPath: directory + "/records"))
        #expect(FileManager.default.fileExists(atPath: directory + "/files"))
    }

    @Test func secondLockIsRefusedWithTheHoldersPid() throws {
        let directoryScratch = try Self.scratch()
        let directory = directoryScratch.path
        let checked = try AgentStateDirectory.prepare(directory)
        let held = try AgentStateDirectory.lock(checked)
        // flock(2) conflicts between open file descriptions, even within one process.
        #expect(throws: AgentFailure("another agent is already running on \(directory) (pid \(getpid()))", kind: .unavailable)) {
            _ = try AgentStateDirectory.lock(checked)
        }
        held.close()
        let again = try AgentStateDirectory.lock(checked)
        again.close()
    }

    @Test func logRotatesAndKeepsThreeFiles() throws {
        let directoryScratch = try Self.scratch()
        let directory = directoryScratch.path
        let log = try RotatingLogFile(directory: try CheckedDirectory.open(directory, policy: .privateState),
                                      maximumSize: 1024, keep: 3)
        let line = String(repeating: "x", count: 299)   // 300 bytes with the newline: 3 per file
        for index in 0..<20 { log.append("\(index % 10)" + line.dropFirst()) }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(names == ["agent.log", "agent.log.1", "agent.log.2", "agent.log.3"])
        for name in names {
            let size = (try FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? Int) ?? 0
            #expect(size <= 1024)
        }
        var info = stat()
        #expect(stat(directory + "/agent.log", &info) == 0 && info.st_mode & 0o777 == 0o600)
        // The newest line is in agent.log.
        let current = try String(contentsOfFile: directory + "/agent.log", encoding: .utf8)
        #expect(current.hasSuffix("9" + line.dropFirst() + "\n"))
    }

    /// Plants a link named `name` in a fresh state directory, pointing at a victim file that reads
    /// "keep", runs `open` on the checked directory, and answers whether the victim still reads "keep".
    static func victimKept(plantedAt name: String, _ open: (CheckedDirectory) throws -> Void) throws -> Bool {
        let directoryScratch = try scratch()
        let directory = directoryScratch.path
        let victim = directory + "-victim"
        FileManager.default.createFile(atPath: victim, contents: Data("keep".utf8))
        defer { unlink(victim) }
        let checked = try AgentStateDirectory.prepare(directory)
        symlink(victim, directory + "/" + name)
        try open(checked)
        return FileManager.default.contents(atPath: victim) == Data("keep".utf8)
    }

    @Test func aPlantedLogLinkIsNeverFollowed() throws {
        let kept = try Self.victimKept(plantedAt: "agent.log") { checked in
            #expect(throws: AgentFailure.self) { _ = try RotatingLogFile(directory: checked) }
        }
        #expect(kept)
    }

    @Test func aPlantedLockLinkIsNeverFollowed() throws {
        let kept = try Self.victimKept(plantedAt: "agent.lock") { checked in
            let error = #expect(throws: AgentFailure.self) { _ = try AgentStateDirectory.lock(checked) }
            #expect(error?.kind == .configuration)
        }
        #expect(kept, "the pid was not written through the link")
    }
}
