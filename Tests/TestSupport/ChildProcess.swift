import Foundation
import Synchronization

/// The tests' one way to run a program to completion: both pipes read at once (a chatty child
/// never blocks on a full pipe), stdin from `input` or /dev/null, the status and both outputs
/// returned. Long-running children with output to wait on have their own types
/// (`CLIProcess`, `AgentProcess`), which find the binary through `BuiltProducts` too.
public enum ChildProcess {
    /// What a finished child said and how it ended.
    public struct Result: Sendable, CustomStringConvertible {
        /// The exit status (or the signal number of a signalled child).
        public var status: Int32
        /// All it wrote to stdout.
        public var standardOutput: String
        /// All it wrote to stderr.
        public var standardError: String
        /// The status and both outputs, for a failing expectation.
        public var description: String { "status \(status)\nstdout: \(standardOutput)\nstderr: \(standardError)" }
    }

    /// The environment children get unless a test says otherwise: no colour, no home.
    public static let quietEnvironment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "NO_COLOR": "1"]

    /// The tests' one `Process()` set-up (issue 31): `prefix + [executable] + arguments`, its
    /// first word an absolute path or a name `/usr/bin/env` finds on PATH; `prefix` wraps the
    /// command (`ip netns exec NS`, `setpriv ...`); `environment` nil inherits this process's;
    /// each standard stream is a `Pipe` or a `FileHandle`, /dev/null when nil. Not started, so a
    /// caller can set a termination handler first; `start` starts it.
    public static func configured(_ executable: String, _ arguments: [String], prefix: [String] = [], directory: URL? = nil,
                                  environment: [String: String]? = nil, input: Any? = nil, output: Any? = nil,
                                  error: Any? = nil) -> Process {
        let process = Process()
        let command = prefix + [executable] + arguments
        if command[0].hasPrefix("/") {
            process.executableURL = URL(fileURLWithPath: command[0])
            process.arguments = Array(command.dropFirst())
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = command
        }
        if let directory { process.currentDirectoryURL = directory }
        if let environment { process.environment = environment }
        process.standardInput = input ?? FileHandle.nullDevice
        process.standardOutput = output ?? FileHandle.nullDevice
        process.standardError = error ?? FileHandle.nullDevice
        return process
    }

    /// `configured`, started.
    @discardableResult
    public static func start(_ executable: String, _ arguments: [String], prefix: [String] = [], directory: URL? = nil,
                             environment: [String: String]? = nil, input: Any? = nil, output: Any? = nil,
                             error: Any? = nil) throws -> Process {
        let process = configured(executable, arguments, prefix: prefix, directory: directory, environment: environment,
                                 input: input, output: output, error: error)
        try process.run()
        return process
    }

    /// Runs `executable arguments` (an absolute path, or a name `/usr/bin/env` finds on PATH).
    public static func run(_ executable: String, _ arguments: [String], prefix: [String] = [], directory: URL? = nil,
                           environment: [String: String]? = quietEnvironment, input: Data? = nil) throws -> Result {
        let output = Pipe(), error = Pipe()
        let stdin = input.map { _ in Pipe() }
        let process = try start(executable, arguments, prefix: prefix, directory: directory, environment: environment,
                                input: stdin, output: output, error: error)
        // Written from a thread of its own: a child that answers while it reads must not block
        // on a full output pipe while we block on its full input pipe.
        // Each thread signals when it is done, so joining them waits for exactly that.
        let threadsDone = DispatchSemaphore(value: 0)
        let writer = Thread {
            if let stdin, let input {
                stdin.fileHandleForWriting.write(input)
                try? stdin.fileHandleForWriting.close()
            }
            threadsDone.signal()
        }
        writer.start()
        let errorData = Mutex<Data>(Data())
        let reader = Thread {
            errorData.withLock { $0 = error.fileHandleForReading.readDataToEndOfFile() }
            threadsDone.signal()
        }
        reader.start()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        threadsDone.wait()   // join the two threads
        threadsDone.wait()
        return Result(status: process.terminationStatus, standardOutput: String(decoding: outputData, as: UTF8.self),
                      standardError: String(decoding: errorData.withLock { $0 }, as: UTF8.self))
    }
}

/// The executables `swift build` made (`reachability`, the samples, the URLSession probe).
public enum BuiltProducts {
    /// Where `name` was built: `$REACHABILITY_BUILD_DIR`, else beside the test bundle
    /// (`.build/<triple>/debug`), else `.build/debug` under the package root.
    public static func url(_ name: String) throws -> URL {
        var candidates: [URL] = []
        if let directory = ProcessInfo.processInfo.environment["REACHABILITY_BUILD_DIR"] {
            candidates.append(URL(fileURLWithPath: directory).appendingPathComponent(name))
        }
        let testExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        candidates.append(testExecutable.deletingLastPathComponent().appendingPathComponent(name))
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent(name))
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(root.appendingPathComponent(".build/debug/\(name)"))
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else {
            throw NotBuilt(name: name, candidates: candidates.map(\.path))
        }
        return found
    }

    /// Runs the built `name` to completion; `prefix` wraps it (`setpriv ...`, `ip netns exec NS`).
    public static func run(_ name: String, _ arguments: [String], prefix: [String] = [], directory: URL? = nil,
                           environment: [String: String]? = ChildProcess.quietEnvironment,
                           input: Data? = nil) throws -> ChildProcess.Result {
        try ChildProcess.run(try url(name).path, arguments, prefix: prefix, directory: directory, environment: environment,
                             input: input)
    }

    /// Thrown when a product is not where `swift build` puts it.
    public struct NotBuilt: Error, CustomStringConvertible {
        /// The product.
        public var name: String
        /// The paths looked at.
        public var candidates: [String]
        /// What to run, and where it looked.
        public var description: String { "\(name) not built (run 'swift build'); looked at \(candidates.joined(separator: ", "))" }
    }
}
