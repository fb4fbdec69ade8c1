import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ResumableURLSession  // the scripted path source and adjustAgent, internal to the session

/// A delegate that records every call (with the time and the queue it ran on), moves finished
/// files to `finishedFiles/`, and lets tests wait for a call with a deadline.
public final class RecordingDelegate: ResumableURLSessionDownloadDelegate {
    /// One delegate call.
    public enum Call: Sendable, CustomStringConvertible {
        case wrote(task: Int, bytes: Int64, total: Int64, expected: Int64)
        case resumed(task: Int, offset: Int64, expected: Int64)
        case finished(task: Int, sha256: String?, locationExisted: Bool)
        case completed(task: Int, error: URLError?)
        case waiting(task: Int)
        case invalidated

        /// The call as a transcript line.
        public var description: String {
            switch self {
            case .wrote(let task, let bytes, let total, let expected): "wrote(\(task), +\(bytes), \(total)/\(expected))"
            case .resumed(let task, let offset, let expected): "resumed(\(task), at \(offset)/\(expected))"
            case .finished(let task, let sha, _): "finished(\(task), \(sha?.prefix(12) ?? "nil"))"
            case .completed(let task, let error): "completed(\(task), \(error.map { "\($0.code.rawValue) \($0.localizedDescription)" } ?? "nil"))"
            case .waiting(let task): "waiting(\(task))"
            case .invalidated: "invalidated"
            }
        }
    }

    /// A call, when it came and on which queue.
    public struct Record: Sendable {
        /// The call.
        public var call: Call
        /// When it came.
        public var time: ContinuousClock.Instant
        /// The delegate queue's name.
        public var queueName: String?
    }

    private let records = Mutex<[Record]>([])
    /// Where finished files are moved (the location is only valid during the call).
    public let finishedDirectory: URL
    /// Called (on the delegate queue) after each call is recorded, for tests that react like an app.
    public let onCall = Mutex<(@Sendable (Call) -> Void)?>(nil)

    /// A delegate that moves finished files into `finishedDirectory`.
    public init(finishedDirectory: URL) {
        self.finishedDirectory = finishedDirectory
        try? FileManager.default.createDirectory(at: finishedDirectory, withIntermediateDirectories: true)
    }

    private func record(_ call: Call) {
        let name = OperationQueue.current?.name
        records.withLock { $0.append(Record(call: call, time: .now, queueName: name)) }
        onCall.withLock { $0 }?(call)
    }

    /// Every call so far.
    public var all: [Record] { records.withLock { $0 } }
    /// Every call so far, without times.
    public var calls: [Call] { all.map(\.call) }

    /// The completion of `task`, if it came.
    public func completion(of task: ResumableDownloadTask) -> Record? {
        all.first { if case .completed(task.taskIdentifier, _) = $0.call { true } else { false } }
    }

    /// The `URLError` `task` completed with.
    public func error(of task: ResumableDownloadTask) -> URLError? {
        guard case .completed(_, let error)? = completion(of: task)?.call else { return nil }
        return error
    }

    /// The SHA-256 of the file `task` finished with.
    public func finishedSHA256(of task: ResumableDownloadTask) -> String? {
        for record in all { if case .finished(task.taskIdentifier, let sha, _) = record.call { return sha } }
        return nil
    }

    /// `didWriteData` totals of a task, in order.
    public func totals(of task: ResumableDownloadTask) -> [Int64] {
        all.compactMap { if case .wrote(task.taskIdentifier, _, let total, _) = $0.call { total } else { nil } }
    }

    /// The offsets `task` resumed at.
    public func resumeOffsets(of task: ResumableDownloadTask) -> [Int64] {
        all.compactMap { if case .resumed(task.taskIdentifier, let offset, _) = $0.call { offset } else { nil } }
    }

    /// Waits (polling, with a deadline) until a recorded call satisfies `predicate`.
    public func wait(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable (Call) -> Bool) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.calls.contains(where: predicate) }
    }

    /// Waits for `task`'s completion.
    public func waitForCompletion(of task: ResumableDownloadTask, timeout: Duration = .seconds(60)) async -> Bool {
        let id = task.taskIdentifier
        return await wait(timeout: timeout) { if case .completed(id, _) = $0 { true } else { false } }
    }

    /// Waits until `task` wrote `bytes` in total.
    public func waitForBytes(_ bytes: Int64, of task: ResumableDownloadTask, timeout: Duration = .seconds(30)) async -> Bool {
        let id = task.taskIdentifier
        return await wait(timeout: timeout) { if case .wrote(id, _, let total, _) = $0 { total >= bytes } else { false } }
    }

    /// Every call, a line each.
    public var transcript: String { calls.map(\.description).joined(separator: "\n") }

    // MARK: delegate

    /// Moves the file to `finishedDirectory` and records the call.
    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didFinishDownloadingTo location: URL) {
        let existed = FileManager.default.fileExists(atPath: location.path)
        let target = finishedDirectory.appendingPathComponent("task-\(downloadTask.taskIdentifier)")
        try? FileManager.default.removeItem(at: target)
        try? FileManager.default.moveItem(at: location, to: target)
        record(.finished(task: downloadTask.taskIdentifier, sha256: DownloadFixtures.sha256(fileAt: target), locationExisted: existed))
    }

    /// Records the call.
    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didWriteData bytesWritten: Int64,
                    totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        record(.wrote(task: downloadTask.taskIdentifier, bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite))
    }

    /// Records the call.
    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didResumeAtOffset fileOffset: Int64,
                    expectedTotalBytes: Int64) {
        record(.resumed(task: downloadTask.taskIdentifier, offset: fileOffset, expected: expectedTotalBytes))
    }

    /// Records the call.
    public func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?) {
        record(.completed(task: task.taskIdentifier, error: error as? URLError))
    }

    /// Records the call.
    public func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDownloadTask) {
        record(.waiting(task: task.taskIdentifier))
    }

    /// Records the call.
    public func urlSession(_ session: ResumableURLSession, didBecomeInvalidWithError error: (any Error)?) {
        record(.invalidated)
    }
}

/// Scripted paths for sessions on loopback: the engine aborts transfers when the path goes
/// away, exactly as it does for a real monitor's updates.
public enum ScriptedPaths {
    /// A wired uplink.
    public static let loopbackUplink = NetworkInterface(name: "eth0", index: 2, type: .wired, classificationReason: "test",
                                                 isUp: true, hasCarrier: true, addresses: ["10.0.0.2"])
    /// A cellular uplink.
    public static let cellularUplink = NetworkInterface(name: "wwan0", index: 3, type: .cellular, classificationReason: "test",
                                                 isUp: true, hasCarrier: true, addresses: ["10.64.0.2"])

    /// A satisfied path through `interface`.
    public static func online(via interface: NetworkInterface = loopbackUplink) -> NetworkPath {
        NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: interface,
                    routes: [PathRoute(family: .ipv4, interfaceName: interface.name, interfaceIndex: interface.index,
                                       gateway: nil, sourceAddress: interface.addresses.first)],
                    interfaces: [interface])
    }

    /// No route.
    public static let offline = NetworkPath.unsatisfied(.noRoute)
}

/// A session on loopback driven by a scripted path stream, with short engine timeouts.
public struct LoopbackSession: Sendable {
    /// The session.
    public let session: ResumableURLSession
    /// Its delegate.
    public let delegate: RecordingDelegate
    /// Feeds the session's path source.
    public let paths: AsyncStream<NetworkPath>.Continuation

    /// A session on a scripted path source that starts at `initialPath`.
    public init(state: URL, finished: URL, waitsForConnectivity: Bool = false, initialPath: NetworkPath? = ScriptedPaths.online(),
         delegateQueue: OperationQueue? = nil, edit: (inout ResumableURLSession.Configuration) -> Void = { _ in }) {
        var configuration = ResumableURLSession.Configuration(stateDirectory: state)
        configuration.waitsForConnectivity = waitsForConnectivity
        configuration.timeoutIntervalForRequest = 5
        configuration.adjustAgent = { agent in
            agent.initialBackoff = .milliseconds(20)
            agent.maximumBackoff = .milliseconds(200)
            agent.checkpointInterval = 1 << 20
            if ProcessInfo.processInfo.environment["DOWNLOAD_TEST_LOG"] != nil {
                agent.logger = Logger(label: "urlsession-test", minimumLevel: .debug)
            }
        }
        edit(&configuration)
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        if let initialPath { continuation.yield(initialPath) }
        delegate = RecordingDelegate(finishedDirectory: finished)
        session = ResumableURLSession(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue,
                                      pathSource: .stream(stream))
        paths = continuation
    }

    /// Invalidates the session and waits for it.
    public func shutDown() async {
        session.invalidateAndCancel()
        await session.waitUntilInvalidated()
    }
}

/// A built product (a sample, `urlsession-probe`) run as a child, inside a namespace when given,
/// with its stdout lines collected as they arrive (with the arrival time) and commands written
/// to its stdin.
public final class LineProcess: Sendable {
    /// One stdout line and when it arrived.
    public struct Line: Sendable {
        /// The line.
        public var text: String
        /// When the test read it.
        public var arrival: ContinuousClock.Instant
    }

    /// Shared with the pipe and termination handlers, which are set up before `self` exists.
    private final class Collected: Sendable {
        let output = Mutex((partial: "", lines: [Line](), errors: ""))
        let exited = Mutex<Int32?>(nil)
    }

    /// The running program.
    public let process: Process
    private let input: Pipe
    private let collected = Collected()

    /// `prefix` runs it through another program (`setpriv` to run it as another user).
    /// `environment` adds to (or overrides) the quiet one.
    public init(_ product: String, _ arguments: [String], namespace: String? = nil, prefix: [String] = [],
         environment: [String: String] = [:]) throws {
        let binary = try BuiltProducts.url(product).path
        let out = Pipe(), err = Pipe(), input = Pipe()
        self.input = input
        process = ChildProcess.configured(binary, arguments, prefix: (namespace.map { ["ip", "netns", "exec", $0] } ?? []) + prefix,
                                          environment: ChildProcess.quietEnvironment.merging(environment) { $1 },
                                          input: input, output: out, error: err)
        let collected = collected
        PipeReader.start(out) { data in
            let now = ContinuousClock.now
            collected.output.withLock { state in
                state.partial += String(decoding: data, as: UTF8.self)
                while let newline = state.partial.firstIndex(of: "\n") {
                    state.lines.append(Line(text: String(state.partial[..<newline]), arrival: now))
                    state.partial = String(state.partial[state.partial.index(after: newline)...])
                }
            }
        } atEnd: {}
        PipeReader.start(err) { data in
            collected.output.withLock { $0.errors += String(decoding: data, as: UTF8.self) }
        } atEnd: {}
        process.terminationHandler = { process in collected.exited.withLock { $0 = process.terminationStatus } }
        try process.run()
    }

    /// Its stdout lines so far.
    public var lines: [Line] { collected.output.withLock { $0.lines } }
    /// Its stdout lines so far, text only.
    public var texts: [String] { lines.map(\.text) }

    /// Waits for a line satisfying `predicate`; returns it, or nil at the deadline.
    public func waitForLine(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable (String) -> Bool) async -> Line? {
        _ = await DownloadFixtures.wait(timeout: timeout) { self.lines.contains { predicate($0.text) } }
        return lines.first { predicate($0.text) }
    }

    /// Writes a command line to its stdin.
    public func send(_ command: String) {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
    }

    /// Its exit status, or nil after `timeout`.
    public func waitForExit(timeout: Duration = .seconds(20)) async -> Int32? {
        _ = await DownloadFixtures.wait(timeout: timeout) { self.collected.exited.withLock { $0 } != nil }
        return collected.exited.withLock { $0 }
    }

    /// Signals the program itself (`ip netns exec` execs it: same pid).
    public func signal(_ number: Int32) { Glibc.kill(process.processIdentifier, number) }

    /// SIGKILL, and reaped.
    public func kill() {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Everything it printed, for a failing expectation.
    public var transcript: String {
        collected.output.withLock { "stdout:\n\($0.lines.map(\.text).joined(separator: "\n"))\nstderr:\n\($0.errors)" }
    }

    /// What it printed on stderr so far (a `--verbose` trace).
    public var standardError: String { collected.output.withLock { $0.errors } }

    deinit { kill() }
}
