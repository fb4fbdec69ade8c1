import Dispatch
import Foundation
@testable import ReachabilityCLI
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Runs the built `reachability` executable, like swift-argument-parser's `AssertExecuteCommand`:
/// only commands that need neither root nor the netlink engine.
@Suite("Built binary")
struct BuiltBinaryTests {
    static func binaryURL() throws -> URL { try BuiltProducts.url("reachability") }

    static func run(_ arguments: [String]) throws -> ChildProcess.Result {
        try BuiltProducts.run("reachability", arguments, environment: ["PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent"])
    }

    @Test func help() throws {
        let result = try Self.run(["--help"])
        #expect(result.status == 0)
        #expect(result.standardOutput.hasPrefix("OVERVIEW: "))
        for heading in ["\nUSAGE: ", "\nOPTIONS:\n", "\nSUBCOMMANDS:\n", "  status ", "  watch ", "  wait "] {
            #expect(result.standardOutput.contains(heading))
        }
        #expect(result.standardError.isEmpty)
    }

    @Test func version() throws {
        let result = try Self.run(["--version"])
        #expect(result.status == 0)
        #expect(result.standardOutput == CommandRegistry.version + "\n")
        #expect(result.standardError.isEmpty)
    }

    @Test func helpStatus() throws {
        let result = try Self.run(["help", "status"])
        #expect(result.status == 0)
        #expect(result.standardOutput.hasPrefix("OVERVIEW: "))
        #expect(result.standardOutput.contains("\nUSAGE: reachability status [--json] [--explain]"))
        #expect(result.standardOutput.contains("  --classify <pattern=type>\n"))
        #expect(result.standardError.isEmpty)
    }

    @Test(arguments: [
        (["status", "--bogus"], "Error: Unknown option '--bogus'", "status"),
        (["wait", "--require", "ethernet"],
         "Error: The value 'ethernet' is invalid for '--require <kind>': expected one of wired, wifi, cellular, any, internet", "wait"),
        (["watch", "--netns"], "Error: Missing value for '--netns <name>'", "watch"),
    ])
    func usageErrorsGoToStandardErrorWithExit64(arguments: [String], message: String, command: String) throws {
        let result = try Self.run(arguments)
        #expect(result.status == 64)
        #expect(result.standardOutput.isEmpty)
        let lines = result.standardError.split(separator: "\n").map(String.init)
        #expect(lines.first == message)
        #expect(lines.dropFirst().first?.hasPrefix("Usage: reachability \(command) ") == true)
        #expect(lines.last == "  See 'reachability \(command) --help' for more information.")
    }

    @Test func unknownSubcommand() throws {
        let result = try Self.run(["frobnicate"])
        #expect(result.status == 64)
        #expect(result.standardError.hasPrefix("Error: Unknown subcommand 'frobnicate'\n"))
    }

    /// Runs against whatever monitor is linked (the placeholder or the netlink engine) in the current
    /// namespace, which needs no root: the JSON has the documented keys and agrees with the exit status.
    @Test func statusJSONAgreesWithTheExitStatus() throws {
        let result = try Self.run(["status", "--json"])
        guard !result.standardOutput.isEmpty else {
            // No netlink in this sandbox: the failure must still be a reported error, not a crash.
            #expect([1, 77].contains(result.status))
            #expect(result.standardError.hasPrefix("Error: "))
            return
        }
        #expect(result.standardOutput.filter { $0 == "\n" }.count == 1)
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any])
        for key in ["time", "status", "reason", "connection", "interface", "isExpensive", "supportsIPv4",
                    "supportsIPv6", "gateways", "interfaces", "sourceAddress", "index", "routes"] {
            #expect(object[key] != nil, "missing \(key)")
        }
        let status = try #require(object["status"] as? String)
        #expect(["satisfied", "unsatisfied"].contains(status))
        #expect((status == "satisfied") == (result.status == 0))
        #expect(result.status == 0 || result.status == 1)
    }

    /// A real SIGTERM ends `watch` with exit 0. `--verbose` says on stderr when the handlers are in
    /// place, so the test waits for that line rather than for time; a watchdog SIGKILLs a hung
    /// process after 30 s, which fails the test instead of hanging it.
    @Test(arguments: [SIGTERM, SIGINT])
    func signalEndsWatchWithExitZero(signalNumber: Int32) throws {
        let error = Pipe()
        let process = try ChildProcess.start(try Self.binaryURL().path, ["watch", "--verbose"],
                                             environment: ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent"], error: error)
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        defer { watchdog.cancel() }

        var errorText = ""
        // `availableData` returns what one read(2) got; `read(upToCount:)` would wait for the count or EOF.
        while !errorText.contains("SIGINT or SIGTERM stops") {
            let chunk = error.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            errorText += String(decoding: chunk, as: UTF8.self)
        }
        #expect(errorText.contains("info reachability: watching for changes; SIGINT or SIGTERM stops"))
        kill(pid, signalNumber)
        // Keep draining stderr (the engine's debug lines) so a full pipe cannot block the exit.
        errorText += String(decoding: error.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit, "ended by a signal: \(errorText)")
        #expect(process.terminationStatus == 0)
    }
}
