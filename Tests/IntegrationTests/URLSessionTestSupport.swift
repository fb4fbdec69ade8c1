import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ResumableURLSession

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
