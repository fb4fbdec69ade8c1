import Foundation
import Testing
@testable import LinuxSystem
import TestSupport

/// `CurrentProcess.spawn`: what a detached child (the agent started on demand, a program the
/// agent launches) gets from us, and what it must not.
@Suite("Spawning children")
struct ProcessSpawnTests {
    static let environment = ["PATH": "/usr/bin:/bin"]

    @Test func reportsTheExitStatusAndTheSignal() throws {
        let exited = try CurrentProcess.spawn("sh", arguments: ["sh", "-c", "exit 3"], environment: Self.environment)
        #expect(CurrentProcess.waitForExit(of: exited) == .exited(3))
        let killed = try CurrentProcess.spawn("sh", arguments: ["sh", "-c", "kill -9 $$"], environment: Self.environment)
        #expect(CurrentProcess.waitForExit(of: killed) == .signalled(9))
        #expect(CurrentProcess.waitForExit(of: killed) == nil)   // reaped already
    }

    @Test func looksTheProgramUpInTheChildsOwnPath() throws {
        let scratch = try ScratchDirectory("spawn", permissions: 0o700)
        let script = scratch.path("only-here")
        try "#!/bin/sh\nexit 7\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o700)
        let pid = try CurrentProcess.spawn("only-here", arguments: ["only-here"], environment: ["PATH": "/nonexistent:" + scratch.path])
        #expect(CurrentProcess.waitForExit(of: pid) == .exited(7))
        #expect(throws: Errno.self) {
            _ = try CurrentProcess.spawn("only-here", arguments: ["only-here"], environment: Self.environment)
        }
    }

    /// The child holds no descriptor of ours (a pipe it kept would never see end of file), has
    /// an empty signal mask, runs in a session of its own, and sees exactly the environment given.
    @Test func theChildInheritsNothingButWhatItIsGiven() throws {
        let scratch = try ScratchDirectory("spawn", permissions: 0o700)
        let output = scratch.path("out")
        let directory = try CheckedDirectory.open(scratch.path, policy: .privateState)
        let file = try directory.openOwnedFile("out", creating: .exclusive, mode: 0o600)
        defer { file.descriptor.close() }
        let leaked = try directory.openOwnedFile("leak", creating: .exclusive, mode: 0o600)   // must not reach the child
        defer { leaked.descriptor.close() }
        // The shell reads its own mask with builtins: while it forks a child (grep) dash blocks
        // every signal, and a child scheduled first under load read that mask, not the spawn's.
        let pid = try CurrentProcess.spawn(
            "sh", arguments: ["sh", "-c", "ls /proc/$$/fd; while IFS= read -r l; do case $l in SigBlk*) echo \"$l\";; esac; done < /proc/$$/status; ps -o sid= -p $$; echo pid $$; env"],
            environment: ["PATH": "/usr/bin:/bin", "ONLY": "this"], standardOutput: file.descriptor)
        #expect(CurrentProcess.waitForExit(of: pid) == .exited(0))
        let text = try String(contentsOfFile: output, encoding: .utf8)
        let lines = text.split(separator: "\n").map(String.init)
        let descriptors = lines.prefix { Int($0) != nil }
        #expect(Set(descriptors).isSubset(of: ["0", "1", "2", "3", "255"]), "\(text)")   // 3/255: the shell's own
        #expect(lines.contains("SigBlk:\t0000000000000000"), "\(text)")
        #expect(lines.contains { $0.trimmingCharacters(in: .whitespaces) == "\(pid)" }, "a session of its own: \(text)")
        #expect(lines.contains("ONLY=this"))
        #expect(!lines.contains { $0.hasPrefix("HOME=") })
    }

    @Test func theChildRunsInTheDirectoryGiven() throws {
        let scratch = try ScratchDirectory("spawn", permissions: 0o700)
        let directory = try CheckedDirectory.open(scratch.path, policy: .privateState)
        let file = try directory.openOwnedFile("out", creating: .exclusive, mode: 0o600)
        defer { file.descriptor.close() }
        let pid = try CurrentProcess.spawn("sh", arguments: ["sh", "-c", "pwd"], environment: Self.environment, directory: "/",
                                           standardOutput: file.descriptor)
        #expect(CurrentProcess.waitForExit(of: pid) == .exited(0))
        #expect(try String(contentsOfFile: scratch.path("out"), encoding: .utf8) == "/\n")
        #expect(throws: Errno.self) {
            _ = try CurrentProcess.spawn("sh", arguments: ["sh"], environment: Self.environment, directory: scratch.path("missing"))
        }
    }

    @Test func availableBytesAndHardLinks() throws {
        let scratch = try ScratchDirectory("spawn", permissions: 0o700)
        let directory = try CheckedDirectory.open(scratch.path, policy: .privateState)
        #expect(try directory.availableBytes() > 0)
        try directory.writeAtomically(Array("hello".utf8), to: "a", mode: 0o600)
        try directory.link("a", to: "b")
        #expect(try directory.status(of: "b")?.linkCount == 2)
        #expect(throws: FileTrustError.self) { try directory.link("a", to: "b") }
        #expect(throws: FileTrustError.self) { try directory.link("../a", to: "c") }
    }
}
