// urlsession-probe: drives a ResumableURLSession for the integration tests, which run it inside
// network namespaces (libcurl opens its sockets on the engine thread, so the whole process must
// live in the client namespace). Every delegate call becomes one NDJSON line on stdout; commands
// arrive one per line on stdin.
//
//   urlsession-probe --state-dir DIR (--url URL | --resume-data FILE) [--waits-for-connectivity]
//                    [--save-resume-data FILE] [--exit-when-done]
//   stdin: cancel-with-data | resume (continue from the last resume data, in this process) | quit
//
// With --foundation the same download runs on Foundation's own URLSession (FoundationNetworking),
// the peer bench/urlsession_outage_bench.py compares against. With --data the URL is fetched
// with a data task instead (lines: started, response, received, waiting, completed with the
// body's SHA-256); --retries opts in to one retry of the idempotent request after a path change.
// With --upload FILE the file is POSTed to the URL in an upload task (lines: started, sent,
// response, received, completed with the code and the size of its upload resume data).

import Foundation
import FoundationNetworking
import LinuxReachability
import ProbeSupport
import ResumableDownloads
import ResumableURLSession
import Synchronization

func emit(_ object: [String: Any]) {
    FileHandle.standardOutput.write(ProbeLines.encoded(object))
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    exit(64)
}

struct Options: Sendable {
    var stateDirectory = ""
    var url: URL?
    var resumeDataFile: String?
    var saveResumeDataFile: String?
    var waitsForConnectivity = false
    var exitWhenDone = false
    var usesFoundation = false
    var allowsExpensive = true
    var classify: [String] = []
    var usesDataTask = false
    var retries = false
    var uploadFile: String?

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        readProbeArguments(arguments) { argument, value in
            switch argument {
            case "--state-dir": options.stateDirectory = value()
            case "--url": options.url = URL(string: value())
            case "--resume-data": options.resumeDataFile = value()
            case "--save-resume-data": options.saveResumeDataFile = value()
            case "--waits-for-connectivity": options.waitsForConnectivity = true
            case "--exit-when-done": options.exitWhenDone = true
            case "--foundation": options.usesFoundation = true
            case "--no-expensive": options.allowsExpensive = false
            case "--classify": options.classify.append(value())
            case "--data": options.usesDataTask = true
            case "--retries": options.retries = true
            case "--upload": options.uploadFile = value()
            default: fail("unknown argument \(argument)")
            }
        }
        guard !options.stateDirectory.isEmpty, options.url != nil || options.resumeDataFile != nil else {
            fail("need --state-dir and --url or --resume-data")
        }
        return options
    }
}

final class Probe: ProbeProgressLines {
    let options: Options
    let lastResumeData = Mutex<Data?>(nil)

    init(options: Options) { self.options = options }

    func printLine(_ object: [String: Any]) { emit(object) }

    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didFinishDownloadingTo location: URL) {
        emit(["call": "finished", "task": downloadTask.taskIdentifier,
              "sha256": SHA256.hex(ofFileAt: location.path) ?? "unreadable"])
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?) {
        var line = ProbeLines.completed(task, error)
        if let data = (error as? URLError)?.downloadTaskResumeData {
            lastResumeData.withLock { $0 = data }
            if let saveResumeDataFile = options.saveResumeDataFile {
                // The seed's recipe: offline, so keep the data for the next launch.
                do { try data.write(to: URL(fileURLWithPath: saveResumeDataFile), options: .atomic) }
                catch { line["saveError"] = "\(error)" }
            }
        }
        emit(line)
        if options.exitWhenDone { exit(0) }
    }
}

/// A data task's delegate: the same lines, for the body as it arrives.
final class DataProbe: ResumableURLSessionDataDelegate {
    let exitWhenDone: Bool
    private let body = Mutex(Data())

    init(exitWhenDone: Bool) { self.exitWhenDone = exitWhenDone }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        emit(["call": "response", "task": dataTask.taskIdentifier, "status": (response as? HTTPURLResponse)?.statusCode ?? 0])
        completionHandler(.allow)
    }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive data: Data) {
        let total = body.withLock { body in
            body.append(data)
            return body.count
        }
        emit(["call": "received", "task": dataTask.taskIdentifier, "bytes": data.count, "total": total])
    }

    func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDataTask) {
        emit(["call": "waiting", "task": task.taskIdentifier])
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didSendBodyData bytesSent: Int64,
                    totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        emit(["call": "sent", "task": task.taskIdentifier, "bytes": bytesSent, "total": totalBytesSent])
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?) {
        var line: [String: Any] = ["call": "completed", "task": task.taskIdentifier]
        // Read before the NSError bridge below, which loses the URLError type on Linux.
        let resumeData = (error as? URLError)?.uploadTaskResumeData
        if let error = error as NSError? {
            line["code"] = error.code
            line["message"] = error.localizedDescription
            line["uploadResumeData"] = resumeData?.count ?? NSNull()
        } else {
            line["sha256"] = SHA256.hex(body.withLock { [UInt8]($0) })
            line["bytes"] = body.withLock { $0.count }
        }
        emit(line)
        if exitWhenDone { exit(0) }
    }
}

/// Foundation's URLSession data delegate, printing DataProbe's lines (the bench's peer for --data).
final class FoundationDataProbe: NSObject, URLSessionDataDelegate, Sendable {
    let exitWhenDone: Bool
    private let received = Mutex(0)

    init(exitWhenDone: Bool) { self.exitWhenDone = exitWhenDone }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let total = received.withLock { total in
            total += data.count
            return total
        }
        emit(["call": "received", "task": dataTask.taskIdentifier, "bytes": data.count, "total": total])
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        var line: [String: Any] = ["call": "completed", "task": task.taskIdentifier]
        if let error = error as NSError? {
            line["code"] = error.code
            line["message"] = error.localizedDescription
        }
        emit(line)
        if exitWhenDone { exit(0) }
    }
}

/// Foundation's URLSession delegate, printing the same lines.
final class FoundationProbe: NSObject, URLSessionDownloadDelegate, Sendable {
    let exitWhenDone: Bool

    init(exitWhenDone: Bool) { self.exitWhenDone = exitWhenDone }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        emit(["call": "finished", "task": downloadTask.taskIdentifier, "sha256": SHA256.hex(ofFileAt: location.path) ?? "unreadable"])
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64,
                    totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        emit(["call": "wrote", "task": downloadTask.taskIdentifier, "bytes": bytesWritten, "total": totalBytesWritten,
              "expected": totalBytesExpectedToWrite])
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        var line: [String: Any] = ["call": "completed", "task": task.taskIdentifier]
        if let error = error as NSError? {
            line["code"] = error.code
            line["message"] = error.localizedDescription
            if let data = error.userInfo["NSURLSessionDownloadTaskResumeData"] as? Data { line["resumeData"] = data.count }
        }
        emit(line)
        if exitWhenDone { exit(0) }
    }
}

/// The session and the task the commands act on.
final class Driver: Sendable {
    let probe: Probe
    let session: ResumableURLSession
    let current = Mutex<ResumableDownloadTask?>(nil)

    init(_ options: Options) {
        probe = Probe(options: options)
        var configuration = ResumableURLSession.Configuration(stateDirectory: URL(fileURLWithPath: options.stateDirectory))
        configuration.waitsForConnectivity = options.waitsForConnectivity
        configuration.timeoutIntervalForRequest = 10
        configuration.allowsExpensiveNetworkAccess = options.allowsExpensive
        configuration.pathMonitor.classificationOverrides = options.classify.compactMap {
            try? ClassificationOverride(parsing: $0, source: "--classify")
        }
        session = ResumableURLSession(configuration: configuration, delegate: probe)
        if let url = options.url {
            start(session.downloadTask(with: url))
        } else if let file = options.resumeDataFile {
            guard let data = FileManager.default.contents(atPath: file) else { fail("cannot read \(file)") }
            start(session.downloadTask(withResumeData: data))
        }
    }

    func start(_ task: ResumableDownloadTask) {
        current.withLock { $0 = task }
        emit(["call": "started", "task": task.taskIdentifier, "url": task.originalRequest?.url?.absoluteString ?? NSNull()])
        task.resume()
    }

    /// Reads commands until stdin closes.
    func readCommands() {
        while let line = readLine() {
            switch line {
            case "cancel-with-data":
                current.withLock { $0 }?.cancel { [probe] data in
                    if let data { probe.lastResumeData.withLock { $0 = data } }
                    emit(["call": "resumeData", "bytes": data?.count ?? NSNull()])
                }
            case "resume":
                guard let data = probe.lastResumeData.withLock({ $0 }) else {
                    emit(["call": "error", "message": "no resume data"])
                    continue
                }
                start(session.downloadTask(withResumeData: data))
            case "quit":
                exit(0)
            default:
                emit(["call": "error", "message": "unknown command \(line)"])
            }
        }
        exit(0)
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
if options.usesFoundation, let url = options.url {
    let delegate: any URLSessionDelegate = options.usesDataTask ? FoundationDataProbe(exitWhenDone: options.exitWhenDone)
        : FoundationProbe(exitWhenDone: options.exitWhenDone)
    let session = URLSession(configuration: .default, delegate: delegate, delegateQueue: nil)
    let task: URLSessionTask = options.usesDataTask ? session.dataTask(with: url) : session.downloadTask(with: url)
    emit(["call": "started", "task": task.taskIdentifier, "url": url.absoluteString])
    task.resume()
    dispatchMain()
}
if options.usesDataTask || options.uploadFile != nil, let url = options.url {
    var configuration = ResumableURLSession.Configuration(stateDirectory: URL(fileURLWithPath: options.stateDirectory))
    configuration.waitsForConnectivity = options.waitsForConnectivity
    configuration.retriesIdempotentRequestsAfterPathChange = options.retries
    configuration.timeoutIntervalForRequest = 10
    let session = ResumableURLSession(configuration: configuration, delegate: DataProbe(exitWhenDone: options.exitWhenDone))
    let task: ResumableDataTask
    if let file = options.uploadFile {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        task = session.uploadTask(with: request, fromFile: URL(fileURLWithPath: file))
    } else {
        task = session.dataTask(with: url)
    }
    emit(["call": "started", "task": task.taskIdentifier, "url": url.absoluteString])
    task.resume()
    dispatchMain()
}
let driver = Driver(options)
// Commands on a plain thread: readLine blocks.
Thread { [driver] in driver.readCommands() }.start()
dispatchMain()
