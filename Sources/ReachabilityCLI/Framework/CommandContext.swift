import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ReachabilityEvents

/// Where a command's paths come from: `PathMonitor` in the tool, a script in tests.
///
/// The requirements are exactly `PathMonitor`'s public surface, so the monitor conforms as is.
protocol PathSource: AnyObject, Sendable {
    /// Starts watching; `currentPath` is valid once this returns. Throws `ReachabilityError`.
    func start() throws
    /// The latest path.
    var currentPath: NetworkPath { get }
    /// Yields the current path first, then every change; finishes on `cancel()`.
    var paths: AsyncStream<NetworkPath> { get }
    /// The path to one host (the kernel's route to its address); finishes on `cancel()`.
    func paths(to host: String) -> AsyncStream<HostPath>
    /// Stops watching and finishes every stream.
    func cancel()
}

extension PathMonitor: PathSource {}

/// Everything a command touches outside itself, so tests can run commands without netlink,
/// signals, the clock or the file system.
struct CommandContext: Sendable {
    /// Data: status lines, NDJSON. Each call writes one whole line, unbuffered.
    var output: LineWriter
    /// Diagnostics.
    var errorOutput: LineWriter
    /// The process environment (for `XDG_CONFIG_HOME`, `HOME`).
    var environment: [String: String]
    /// The wall clock used for timestamps.
    var now: @Sendable () -> Date
    /// Contents of a file, nil when it does not exist; throws when it exists but cannot be read.
    var readFile: @Sendable (String) throws -> String?
    /// Builds the path source for a configuration.
    var makePathSource: @Sendable (PathMonitor.Configuration) -> any PathSource
    /// Whether the process may enter another network namespace (setns needs CAP_SYS_ADMIN).
    var canEnterNetworkNamespace: @Sendable () -> Bool
    /// Calls the handler with the signal's number whenever one of `signals` arrives, until the
    /// returned closure is called; returns once the handler is in place (see `InterruptSignals`).
    var onSignals: @Sendable (_ signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) async -> (@Sendable () -> Void)
    /// Suspends for the duration; throws when the task is cancelled.
    var sleep: @Sendable (Duration) async throws -> Void
    /// The effective user id (root picks other default directories).
    var effectiveUserID: UInt32 = 0
    /// The working directory relative paths are resolved against.
    var currentDirectory: String = "/"
    /// Whether the file descriptor is a terminal (progress bars only on one).
    var isTerminal: @Sendable (Int32) -> Bool = { _ in false }
    /// The names in a directory (empty when it does not exist or cannot be read).
    var listDirectory: @Sendable (String) -> [String] = { path in
        (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
    }
    /// Raw bytes for standard output (`download -o -`); throws when they cannot be written (EPIPE).
    var writeStandardOutput: @Sendable (UnsafeRawBufferPointer) throws -> Void = { _ in }

    /// Calls the handler on SIGINT/SIGTERM until the returned closure is called; returns once the
    /// handler is in place.
    func onInterrupt(_ handler: @escaping @Sendable () -> Void) async -> (@Sendable () -> Void) {
        await onSignals([SIGINT, SIGTERM]) { _ in handler() }
    }

    /// The real process: stdout/stderr, `PathMonitor`, signals, files.
    static func live(environment: [String: String] = ProcessInfo.processInfo.environment) -> CommandContext {
        CommandContext(
            output: .standardOutput,
            errorOutput: .standardError,
            environment: environment,
            now: { Date() },
            readFile: readFileIfPresent,
            makePathSource: { PathMonitor(configuration: $0) },
            canEnterNetworkNamespace: hasSystemAdministratorCapability,
            onSignals: { signals, handler in await InterruptSignals.installReportingNumber(for: signals, handler) },
            sleep: { try await Task.sleep(for: $0) },
            effectiveUserID: CurrentProcess.effectiveUserID,
            currentDirectory: FileManager.default.currentDirectoryPath,
            isTerminal: { FileDescriptor(rawValue: $0).isTerminal },
            writeStandardOutput: { bytes in try FileDescriptor.standardOutput.writeAll(bytes) }
        )
    }
}

/// Reads a whole file; nil when it does not exist.
func readFileIfPresent(_ path: String) throws -> String? {
    guard FileManager.default.fileExists(atPath: path) else { return nil }
    do {
        return try String(contentsOfFile: path, encoding: .utf8)
    } catch {
        throw CommandFailure(message: "cannot read \(path): \(TextFormat.reason(error))", exitCode: .configuration)
    }
}

/// Whether CAP_SYS_ADMIN (bit 21) is in the effective set, from /proc/self/status.
/// When that cannot be read, says yes and lets the monitor report the real error.
@Sendable func hasSystemAdministratorCapability() -> Bool {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return true }
    return effectiveCapabilities(fromProcStatus: status).map { $0 & (1 << 21) != 0 } ?? true
}

/// The `CapEff:` mask of a /proc/PID/status text.
func effectiveCapabilities(fromProcStatus status: String) -> UInt64? {
    for line in status.split(separator: "\n") where line.hasPrefix("CapEff:") {
        return UInt64(line.dropFirst("CapEff:".count).trimmingWhitespace(), radix: 16)
    }
    return nil
}

extension EnvironmentValue {
    /// The value in the command's environment; a bad one stops the command (exit 78) with the
    /// variable's name, what it expects and what it got.
    func value(in context: CommandContext) throws(CommandFailure) -> Kind.Value? {
        do {
            return try value(in: context.environment)
        } catch {
            throw CommandFailure(message: error.message(for: name), exitCode: .configuration)
        }
    }
}

extension StateDirectoryLocation.System {
    /// The real file system, with the command context's user and working directory.
    static func current(_ context: CommandContext) -> Self {
        current(effectiveUserID: context.effectiveUserID, workingDirectory: context.currentDirectory)
    }
}
