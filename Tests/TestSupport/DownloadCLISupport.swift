import Foundation
import Synchronization
import Testing

/// Runs the built `reachability` binary (optionally inside a namespace via `ip netns exec`),
/// collecting stdout lines as they arrive so tests can wait for NDJSON events with deadlines.
public final class CLIProcess: Sendable {
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

    /// The running command.
    public let process: Process
    private let collected = Collected()

    /// The built `reachability` (`BuiltProducts`).
    public static func binaryPath() throws -> String { try BuiltProducts.url("reachability").path }

    /// Starts `reachability ARGUMENTS` in `directory`, inside `namespace` when given.
    public init(_ arguments: [String], namespace: String? = nil, directory: URL, environment: [String: String] = [:]) throws {
        let binary = try Self.binaryPath()
        let out = Pipe(), err = Pipe()
        process = ChildProcess.configured(binary, arguments, prefix: namespace.map { ["ip", "netns", "exec", $0] } ?? [],
                                          directory: directory,
                                          environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NO_COLOR": "1", "HOME": directory.path]
                                              .merging(environment) { $1 },
                                          output: out, error: err)
        let collected = collected
        PipeReader.start(out) { data in
            collected.output.withLock { state in
                state.partialLine += String(decoding: data, as: UTF8.self)
                while let newline = state.partialLine.firstIndex(of: "\n") {
                    state.lines.append(String(state.partialLine[..<newline]))
                    state.partialLine = String(state.partialLine[state.partialLine.index(after: newline)...])
                }
            }
        } atEnd: { collected.closedPipes.withLock { $0 += 1 } }
        PipeReader.start(err) { data in
            collected.output.withLock { $0.errorText += String(decoding: data, as: UTF8.self) }
        } atEnd: { collected.closedPipes.withLock { $0 += 1 } }
        process.terminationHandler = { process in collected.exited.withLock { $0 = process.terminationStatus } }
        try process.run()
    }

    /// Its stdout lines so far.
    public var lines: [String] { collected.output.withLock { $0.lines } }
    /// Its stderr so far.
    public var standardError: String { collected.output.withLock { $0.errorText } }

    /// stdout lines parsed as JSON objects (non-JSON lines skipped).
    public var events: [[String: Any]] {
        lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Names of the NDJSON events seen so far, `progress` left out.
    public var eventNames: [String] { events.compactMap { $0["event"] as? String }.filter { $0 != "progress" } }

    /// Largest `bytes` value seen in any event.
    public var bytesSeen: Int { events.compactMap { $0["bytes"] as? Int }.max() ?? 0 }

    /// Number of events named `name`.
    public func count(_ name: String) -> Int { eventNames.filter { $0 == name }.count }

    /// Waits for an event satisfying `predicate`; false at the deadline or when the process ended first.
    public func waitForEvent(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable ([String: Any]) -> Bool) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) {
            self.events.contains(where: predicate)
        }
    }

    /// Waits for the event named `name` to have been seen `count` times.
    public func waitFor(_ name: String, count: Int = 1, timeout: Duration = .seconds(30)) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.count(name) >= count }
    }

    /// Waits until progress reached `bytes`.
    public func waitForBytes(_ bytes: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.bytesSeen >= bytes }
    }

    /// Waits for the exit status; nil at the deadline (the process is then killed).
    public func waitForExit(timeout: Duration = .seconds(60)) async -> Int32? {
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

    /// Sends `number` to the command.
    public func signal(_ number: Int32) { Glibc.kill(process.processIdentifier, number) }

    /// SIGKILL, and reaped.
    public func kill() {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Everything the process printed, for failure messages.
    public var transcript: String { "stdout:\n\(lines.joined(separator: "\n"))\nstderr:\n\(standardError)" }

    deinit { kill() }
}

/// Reads a pipe to its end on a thread of its own with blocking `read(2)`, handing each chunk
/// over in order. Foundation's `readabilityHandler` on Linux sometimes stopped delivering before
/// the end (a `-o -` test saw 16 KiB of 19 and no end of file for 5 s, 4 runs in 30).
public enum PipeReader {
    /// Reads `pipe` on a thread of its own, handing each chunk to `onData`, then calls `atEnd`.
    public static func start(_ pipe: Pipe, _ onData: @escaping @Sendable (Data) -> Void, atEnd: @escaping @Sendable () -> Void) {
        let handle = pipe.fileHandleForReading
        let thread = Thread {
            let descriptor = handle.fileDescriptor
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                onData(Data(buffer[0..<count]))
            }
            try? handle.close()
            atEnd()
        }
        thread.start()
    }
}
