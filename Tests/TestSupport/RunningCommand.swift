import Foundation
import Glibc
import Synchronization

/// The built `reachability` executable (`swift build` puts it next to the test bundle).
public func builtBinary() throws -> URL { try BuiltProducts.url("reachability") }

/// A running `reachability` process whose stdout lines arrive as a stream.
public final class RunningCommand: Sendable {
    /// The running command.
    public let process: Process
    /// Its stdout lines as they arrive.
    public let lines: AsyncStream<String>

    /// Starts the built `reachability ARGUMENTS`, `environment` added to this process's.
    public init(_ arguments: [String], environment: [String: String] = [:]) throws {
        let out = Pipe()
        process = ChildProcess.configured(try builtBinary().path, arguments,
                                          environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
                                          input: FileHandle.standardInput, output: out)
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        lines = stream
        let handle = out.fileHandleForReading
        Thread {
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    continuation.yield(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending.removeSubrange(pending.startIndex...newline)
                }
            }
            continuation.finish()
        }.start()
        try process.run()
    }

    /// The next line satisfying `predicate`, or nil after `timeout`.
    public func line(timeout: Duration = .seconds(5), where predicate: @escaping @Sendable (String) -> Bool) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            group.addTask { [lines] in
                for await line in lines where predicate(line) { return line }
                return nil
            }
            group.addTask { await deadline(timeout); return nil }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// Sends `signal`, waits for the exit and returns the status.
    public func stop(signal: Int32 = SIGTERM) -> Int32 {
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        return process.terminationStatus
    }
}

/// Runs the built binary with `environment` added to this process's; returns status, stdout, stderr.
public func runBuilt(_ arguments: [String], environment: [String: String] = [:]) throws -> (Int32, String, String) {
    let result = try ChildProcess.run(try builtBinary().path, arguments,
                                      environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
    return (result.status, result.standardOutput, result.standardError)
}
