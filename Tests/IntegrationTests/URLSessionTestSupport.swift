import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ResumableURLSession
import TestSupport

/// A delegate that records every call (with the time and the queue it ran on), moves finished
/// files to `finishedFiles/`, and lets tests wait for a call with a deadline.
final class RecordingDelegate: ResumableURLSessionDownloadDelegate {
    enum Call: Sendable, CustomStringConvertible {
        case wrote(task: Int, bytes: Int64, total: Int64, expected: Int64)
        case resumed(task: Int, offset: Int64, expected: Int64)
        case finished(task: Int, sha256: String?, locationExisted: Bool)
        case completed(task: Int, error: URLError?)
        case waiting(task: Int)
        case invalidated

        var description: String {
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

    struct Record: Sendable {
        var call: Call
        var time: ContinuousClock.Instant
        var queueName: String?
    }

    private let records = Mutex<[Record]>([])
    let finishedDirectory: URL
    /// Called (on the delegate queue) after each call is recorded, for tests that react like an app.
    let onCall = Mutex<(@Sendable (Call) -> Void)?>(nil)

    init(finishedDirectory: URL) {
        self.finishedDirectory = finishedDirectory
        try? FileManager.default.createDirectory(at: finishedDirectory, withIntermediateDirectories: true)
    }

    private func record(_ call: Call) {
        let name = OperationQueue.current?.name
        records.withLock { $0.append(Record(call: call, time: .now, queueName: name)) }
        onCall.withLock { $0 }?(call)
    }

    var all: [Record] { records.withLock { $0 } }
    var calls: [Call] { all.map(\.call) }

    func completion(of task: ResumableDownloadTask) -> Record? {
        all.first { if case .completed(task.taskIdentifier, _) = $0.call { true } else { false } }
    }

    func error(of task: ResumableDownloadTask) -> URLError? {
        guard case .completed(_, let error)? = completion(of: task)?.call else { return nil }
        return error
    }

    func finishedSHA256(of task: ResumableDownloadTask) -> String? {
        for record in all { if case .finished(task.taskIdentifier, let sha, _) = record.call { return sha } }
        return nil
    }

    /// `didWriteData` totals of a task, in order.
    func totals(of task: ResumableDownloadTask) -> [Int64] {
        all.compactMap { if case .wrote(task.taskIdentifier, _, let total, _) = $0.call { total } else { nil } }
    }

    func resumeOffsets(of task: ResumableDownloadTask) -> [Int64] {
        all.compactMap { if case .resumed(task.taskIdentifier, let offset, _) = $0.call { offset } else { nil } }
    }

    /// Waits (polling, with a deadline) until a recorded call satisfies `predicate`.
    func wait(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable (Call) -> Bool) async -> Bool {
        await DownloadFixtures.wait(timeout: timeout) { self.calls.contains(where: predicate) }
    }

    func waitForCompletion(of task: ResumableDownloadTask, timeout: Duration = .seconds(60)) async -> Bool {
        let id = task.taskIdentifier
        return await wait(timeout: timeout) { if case .completed(id, _) = $0 { true } else { false } }
    }

    func waitForBytes(_ bytes: Int64, of task: ResumableDownloadTask, timeout: Duration = .seconds(30)) async -> Bool {
        let id = task.taskIdentifier
        return await wait(timeout: timeout) { if case .wrote(id, _, let total, _) = $0 { total >= bytes } else { false } }
    }

    var transcript: String { calls.map(\.description).joined(separator: "\n") }

    // MARK: delegate

    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didFinishDownloadingTo location: URL) {
        let existed = FileManager.default.fileExists(atPath: location.path)
        let target = finishedDirectory.appendingPathComponent("task-\(downloadTask.taskIdentifier)")
        try? FileManager.default.removeItem(at: target)
        try? FileManager.default.moveItem(at: location, to: target)
        record(.finished(task: downloadTask.taskIdentifier, sha256: DownloadFixtures.sha256(fileAt: target), locationExisted: existed))
    }

    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didWriteData bytesWritten: Int64,
                    totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        record(.wrote(task: downloadTask.taskIdentifier, bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite))
    }

    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didResumeAtOffset fileOffset: Int64,
                    expectedTotalBytes: Int64) {
        record(.resumed(task: downloadTask.taskIdentifier, offset: fileOffset, expected: expectedTotalBytes))
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?) {
        record(.completed(task: task.taskIdentifier, error: error as? URLError))
    }

    func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDownloadTask) {
        record(.waiting(task: task.taskIdentifier))
    }

    func urlSession(_ session: ResumableURLSession, didBecomeInvalidWithError error: (any Error)?) {
        record(.invalidated)
    }
}

/// Scripted paths for sessions on loopback: the engine aborts transfers when the path goes
/// away, exactly as it does for a real monitor's updates.
enum ScriptedPaths {
    static let loopbackUplink = NetworkInterface(name: "eth0", index: 2, type: .wired, classificationReason: "test",
                                                 isUp: true, hasCarrier: true, addresses: ["10.0.0.2"])
    static let cellularUplink = NetworkInterface(name: "wwan0", index: 3, type: .cellular, classificationReason: "test",
                                                 isUp: true, hasCarrier: true, addresses: ["10.64.0.2"])

    static func online(via interface: NetworkInterface = loopbackUplink) -> NetworkPath {
        NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: interface,
                    routes: [PathRoute(family: .ipv4, interfaceName: interface.name, interfaceIndex: interface.index,
                                       gateway: nil, sourceAddress: interface.addresses.first)],
                    interfaces: [interface])
    }

    static let offline = NetworkPath.unsatisfied(.noRoute)
}

/// A session on loopback driven by a scripted path stream, with short engine timeouts.
struct LoopbackSession {
    let session: ResumableURLSession
    let delegate: RecordingDelegate
    let paths: AsyncStream<NetworkPath>.Continuation

    init(state: URL, finished: URL, waitsForConnectivity: Bool = false, initialPath: NetworkPath? = ScriptedPaths.online(),
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

    func shutDown() async {
        session.invalidateAndCancel()
        await session.waitUntilInvalidated()
    }
}

/// A built product (a sample, `urlsession-probe`) run as a child, inside a namespace when given,
/// with its stdout lines collected as they arrive (with the arrival time) and commands written
/// to its stdin.
final class LineProcess: Sendable {
    struct Line: Sendable {
        var text: String
        var arrival: ContinuousClock.Instant
    }

    /// Shared with the pipe and termination handlers, which are set up before `self` exists.
    private final class Collected: Sendable {
        let output = Mutex((partial: "", lines: [Line](), errors: ""))
        let exited = Mutex<Int32?>(nil)
    }

    let process = Process()
    private let input = Pipe()
    private let collected = Collected()

    /// `prefix` runs it through another program (`setpriv` to run it as another user).
    /// `environment` adds to (or overrides) the quiet one.
    init(_ product: String, _ arguments: [String], namespace: String? = nil, prefix: [String] = [],
         environment: [String: String] = [:]) throws {
        let binary = try BuiltProducts.url(product).path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = (namespace.map { ["ip", "netns", "exec", $0] } ?? []) + prefix + [binary] + arguments
        process.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "NO_COLOR": "1"].merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
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

    var lines: [Line] { collected.output.withLock { $0.lines } }
    var texts: [String] { lines.map(\.text) }

    /// Waits for a line satisfying `predicate`; returns it, or nil at the deadline.
    func waitForLine(timeout: Duration = .seconds(30), _ predicate: @escaping @Sendable (String) -> Bool) async -> Line? {
        _ = await DownloadFixtures.wait(timeout: timeout) { self.lines.contains { predicate($0.text) } }
        return lines.first { predicate($0.text) }
    }

    func send(_ command: String) {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
    }

    func waitForExit(timeout: Duration = .seconds(20)) async -> Int32? {
        _ = await DownloadFixtures.wait(timeout: timeout) { self.collected.exited.withLock { $0 } != nil }
        return collected.exited.withLock { $0 }
    }

    /// Signals the program itself (`ip netns exec` execs it: same pid).
    func signal(_ number: Int32) { Glibc.kill(process.processIdentifier, number) }

    func kill() {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    var transcript: String {
        collected.output.withLock { "stdout:\n\($0.lines.map(\.text).joined(separator: "\n"))\nstderr:\n\($0.errors)" }
    }

    deinit { kill() }
}
