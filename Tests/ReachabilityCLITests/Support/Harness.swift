import Foundation
import LinuxReachability
import Synchronization
@testable import ReachabilityCLI

/// Collects everything written to one stream.
final class CapturedOutput: Sendable {
    private let buffer = Mutex("")

    var writer: LineWriter { LineWriter { text in self.buffer.withLock { $0 += text } } }
    var text: String { buffer.withLock { $0 } }
    var lines: [String] { text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
}

/// A `PathSource` that "plays the monitor": `paths` yields `current` then `script`, then either
/// finishes (like a monitor that was cancelled) or stays open until `cancel()`.
final class ScriptedPathSource: PathSource {
    struct State {
        var isStarted = false
        var isCancelled = false
        var continuations: [AsyncStream<NetworkPath>.Continuation] = []
        var configuration: PathMonitor.Configuration?
    }

    let current: NetworkPath
    let script: [NetworkPath]
    /// What `paths(to:)` yields for any host.
    let hostScript: [HostPath]
    let staysOpen: Bool
    let startError: (any Error)?
    let state = Mutex(State())

    init(current: NetworkPath, script: [NetworkPath] = [], hostScript: [HostPath] = [], staysOpen: Bool = false,
         startError: (any Error)? = nil) {
        self.current = current
        self.script = script
        self.hostScript = hostScript
        self.staysOpen = staysOpen
        self.startError = startError
    }

    func start() throws {
        if let startError { throw startError }
        state.withLock { $0.isStarted = true }
    }

    var currentPath: NetworkPath { current }

    var paths: AsyncStream<NetworkPath> {
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        let cancelled = state.withLock { state in
            if !state.isCancelled && staysOpen { state.continuations.append(continuation) }
            return state.isCancelled
        }
        if !cancelled {
            for path in [current] + script { continuation.yield(path) }
        }
        if cancelled || !staysOpen { continuation.finish() }
        return stream
    }

    /// `hostScript`, then the end (downloads then follow `paths`) unless `staysOpen` with a script.
    func paths(to host: String) -> AsyncStream<HostPath> {
        AsyncStream { continuation in
            for path in hostScript { continuation.yield(path) }
            if hostScript.isEmpty || !staysOpen { continuation.finish() }
        }
    }

    func cancel() {
        let continuations = state.withLock { state in
            state.isCancelled = true
            defer { state.continuations = [] }
            return state.continuations
        }
        for continuation in continuations { continuation.finish() }
    }

    var isCancelled: Bool { state.withLock { $0.isCancelled } }
}

/// A command context with captured output, in-memory files and a scripted path source.
final class Harness: Sendable {
    let standardOutput = CapturedOutput()
    let standardError = CapturedOutput()
    let source: ScriptedPathSource
    let files: [String: String]
    let environment: [String: String]
    let canEnterNetworkNamespace: Bool
    private let recorded = Mutex<(configurations: [PathMonitor.Configuration], handlers: [Int32: @Sendable (Int32) -> Void])>(([], [:]))
    let effectiveUserID: UInt32
    let currentDirectory: String
    let isTerminal: Bool
    let binaryOutput = Mutex<[UInt8]>([])
    private let sleep: @Sendable (Duration) async throws -> Void

    init(source: ScriptedPathSource = ScriptedPathSource(current: Fixtures.satisfiedWifi),
         files: [String: String] = [:],
         environment: [String: String] = ["HOME": "/home/tester"],
         canEnterNetworkNamespace: Bool = true,
         effectiveUserID: UInt32 = 1000,
         currentDirectory: String = "/home/tester",
         isTerminal: Bool = false,
         sleep: @escaping @Sendable (Duration) async throws -> Void = Harness.neverReturns) {
        self.effectiveUserID = effectiveUserID
        self.currentDirectory = currentDirectory
        self.isTerminal = isTerminal
        self.source = source
        self.files = files
        self.environment = environment
        self.canEnterNetworkNamespace = canEnterNetworkNamespace
        self.sleep = sleep
    }

    var context: CommandContext {
        CommandContext(
            output: standardOutput.writer,
            errorOutput: standardError.writer,
            environment: environment,
            now: { Fixtures.time },
            readFile: { [files] path in files[path] },
            makePathSource: { configuration in
                self.recorded.withLock { $0.configurations.append(configuration) }
                return self.source
            },
            canEnterNetworkNamespace: { self.canEnterNetworkNamespace },
            onSignals: { signals, handler in
                self.recorded.withLock { for number in signals { $0.handlers[number] = handler } }
                return { self.recorded.withLock { for number in signals { $0.handlers[number] = nil } } }
            },
            sleep: sleep,
            effectiveUserID: effectiveUserID,
            currentDirectory: currentDirectory,
            isTerminal: { [isTerminal] _ in isTerminal },
            listDirectory: { [files] directory in
                files.keys.filter { ($0 as NSString).deletingLastPathComponent == directory }.map { ($0 as NSString).lastPathComponent }
            },
            writeStandardOutput: { bytes in self.binaryOutput.withLock { $0 += bytes } })
    }

    func run(_ arguments: [String]) async -> Int32 {
        await ReachabilityCommandLine.run(arguments: arguments, context: context)
    }

    /// The configurations commands asked the source factory for.
    var configurations: [PathMonitor.Configuration] { recorded.withLock { $0.configurations } }

    /// Delivers a simulated SIGINT; false when no handler is installed.
    @discardableResult
    func interrupt() -> Bool { signal(SIGINT) }

    /// Delivers a simulated signal; false when no handler is installed for it.
    @discardableResult
    func signal(_ number: Int32) -> Bool {
        guard let handler = recorded.withLock({ $0.handlers[number] }) else { return false }
        handler(number)
        return true
    }

    /// Whether a handler for the signal is installed.
    func handles(_ number: Int32) -> Bool { recorded.withLock { $0.handlers[number] != nil } }

    /// A deadline that never passes: suspends until the task is cancelled.
    @Sendable static func neverReturns(_: Duration) async throws {
        // Nothing ever yields to this stream; iterating it ends only when the task is cancelled.
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        for await _ in stream {}
        continuation.finish()
        throw CancellationError()
    }

    /// A deadline that passes immediately.
    @Sendable static func returnsAtOnce(_: Duration) async throws {}
}
