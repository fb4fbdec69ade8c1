import Foundation
import Synchronization
import Testing

/// Runs the built `reachability` binary (optionally inside a namespace via `ip netns exec`),
/// collecting stdout lines as they arrive so tests can wait for NDJSON events with deadlines.
final class CLIProcess: Sendable {
    private struct Output {
        var partialLine = ""
        var lines: [String] = []
        var errorText = ""
    }

    /// Shared with the pipe and termination handlers, which are set up before `self` exists.
    private final class Collected: Sendable {
        let output = Mutex(Output())
        let exited = Mutex<Int32?>(nil)
        /// stdout and stderr each count once when they reach end of file.
        let closedPipes = Mutex(0)
    }

    let process: Process
    private let collected = Collected()

    /// `REACHABILITY_BINARY`, else next to the test bundle, else `.build/debug` under the package.
    static func binaryPath() throws -> String {
        var candidates: [String] = []
        if let path = ProcessInfo.processInfo.environment["REACHABILITY_BINARY"] { candidates.append(path) }
        let testExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        candidates.append(testExecutable.deletingLastPathComponent().appendingPathComponent("reachability").path)
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("reachability").path)
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug/reachability").path)
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw CommandFailure(description: "reachability binary not found (swift build first): \(candidates)")
        }
        return found
    }

    /// Starts `reachability ARGUMENTS` in `directory`, inside `namespace` when given.
    init(_ arguments: [String], namespace: String? = nil, directory: URL, environment: [String: String] = [:]) throws {
        let binary = try Self.binaryPath()
        process = Process()
        if let namespace {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["ip", "netns", "exec", namespace, binary] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = arguments
        }
        process.currentDirectoryURL = directory
        process.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NO_COLOR": "1", "HOME": directory.path]
            .merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let collected = collected
        out.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil; collected.closedPipes.withLock { $0 += 1 }; return }
            collected.output.withLock { state in
                state.partialLine += String(decoding: data, as: UTF8.self)
                while let newline = state.partialLine.firstIndex(of: "\n") {
                    state.lines.append(String(state.partialLine[..<newline]))
                    state.partialLine = String(state.partialLine[state.partialLine.index(after: newline)...])
                }
            }
        }
        err.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil; collected.closedPipes.withLock { $0 += 1 }; return }
            collected.output.withLock { $0.errorText += String(decoding: data, as: UTF8.self) }
        }
        process.terminationHandler = { process in collected.exited.withLock { $0 = process.terminationStatus } }
        try process.run()
    }

    var lines: [String] { collected.output.withLock { $0.lines } }
    var standardError: String { collected.output.withLock { $0.errorText } }

    /// stdout lines parsed as JSON objects (non-JSON lines skipped).
    var events: [[String: Any]] {
        lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Names of the NDJSON events seen so far, `progress` left out.
    var eventNames: [String] { events.compactMap { $0["event"] as? String }.filter { $0 != "progress" } }

    /// Largest `bytes` value seen in any event.
    var bytesSeen: Int { events.compactMap { $0["bytes"] as? Int }.max() ?? 0 }

    /// Number of events named `name`.
    func count(_ name: String) -> Int { eventNames.filter { $0 == name }.count }

    /// Waits for an event satisfying `predicate`; false at the deadline or when the process ended first.
    func waitForEvent(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable ([String: Any]) -> Bool) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) {
            self.events.contains(where: predicate)
        }
    }

    /// Waits for the event named `name` to have been seen `count` times.
    func waitFor(_ name: String, count: Int = 1, timeout: Duration = .seconds(30)) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.count(name) >= count }
    }

    /// Waits until progress reached `bytes`.
    func waitForBytes(_ bytes: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.bytesSeen >= bytes }
    }

    /// Waits for the exit status; nil at the deadline (the process is then killed).
    func waitForExit(timeout: Duration = .seconds(60)) async -> Int32? {
        _ = await DownloadFixtures.wait(timeout: timeout) { self.collected.exited.withLock { $0 } != nil }
        if let status = collected.exited.withLock({ $0 }) {
            // Let the pipe handlers drain what the process wrote last: both pipes at end of file
            // (the exit status can arrive before the last bytes of stderr were read).
            _ = await DownloadFixtures.wait(timeout: .seconds(5)) {
                self.collected.closedPipes.withLock { $0 } >= 2 && self.collected.output.withLock { $0.partialLine.isEmpty }
            }
            return status
        }
        kill()
        return nil
    }

    func signal(_ number: Int32) { Glibc.kill(process.processIdentifier, number) }

    func kill() {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Everything the process printed, for failure messages.
    var transcript: String { "stdout:\n\(lines.joined(separator: "\n"))\nstderr:\n\(standardError)" }

    deinit { kill() }
}
