// background-probe: a program with a background ResumableURLSession, for the integration tests
// and bench/background_bench.py. Every delegate call becomes one NDJSON line (on stdout, or
// appended to --output when the agent launched it and its stdout is the agent's stderr);
// commands arrive one per line on stdin.
//
//   background-probe --state-dir DIR [--session ID] [--agent PATH] [--url URL]...
//                    [--launch ARG]... [--launch-unit UNIT] [--no-launch-events] [--discretionary]
//                    [--resource-timeout S] [--not-before S] [--expects BYTES] [--priority P]
//                    [--description TEXT] [--header 'Name: value'] [--output FILE]
//                    [--exit-after-events] [--die-in-delegate] [--keep-files DIR] [--lifetime S]
//                    [--connections N]
//   stdin: tasks | resume N | suspend N | cancel N | cancel-with-data N | invalidate | quit
//          | download URL | resume-data-download
//          | upload FILE URL | upload-data URL | upload-tasks | upload-cancel N
//          | upload-cancel-with-data N | upload-resume-data | upload-unresumed FILE URL
//
// Upload tasks (issue 28) report "sent", "response", "data" and "uploadCompleted" lines.
//
// The session identifier defaults to $REACHABILITY_BACKGROUND_SESSION (how a launched program
// learns it). Exit status 0; 2 when the session was invalidated with an error.

import Foundation
import FoundationNetworking
import ProbeSupport
import ResumableDownloads
import ResumableURLSession
import Synchronization

let output = Mutex<FileHandle?>(nil)

func emit(_ object: [String: Any]) {
    output.withLock { handle in (handle ?? FileHandle.standardOutput).write(ProbeLines.encoded(object)) }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    exit(64)
}

struct Options: Sendable {
    var stateDirectory = ""
    var session = ProcessInfo.processInfo.environment["REACHABILITY_BACKGROUND_SESSION"] ?? ""
    var agent: String?
    var urls: [URL] = []
    var launch: [String] = []
    var launchUnit: String?
    var sendsLaunchEvents = true
    var isDiscretionary = false
    var resourceTimeout: Double?
    var notBefore: Double?
    var expects: Int64?
    var priority: Float?
    var description: String?
    var headers: [String] = []
    var outputFile: String?
    var exitAfterEvents = false
    var dieInDelegate = false
    var keepFiles: String?
    /// Exits after this many seconds whatever happens (a launched probe whose events never come
    /// must not outlive its test).
    var lifetime: Double?
    /// `httpMaximumConnectionsPerHost` (1 unless given: most tests count one request per task).
    var connections = 1

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        readProbeArguments(arguments) { argument, value in
            switch argument {
            case "--state-dir": options.stateDirectory = value()
            case "--session": options.session = value()
            case "--agent": options.agent = value()
            case "--url": options.urls.append(URL(string: value()) ?? URL(fileURLWithPath: "/"))
            case "--launch": options.launch.append(value())
            case "--launch-unit": options.launchUnit = value()
            case "--no-launch-events": options.sendsLaunchEvents = false
            case "--discretionary": options.isDiscretionary = true
            case "--resource-timeout": options.resourceTimeout = Double(value())
            case "--not-before": options.notBefore = Double(value())
            case "--expects": options.expects = Int64(value())
            case "--priority": options.priority = Float(value())
            case "--description": options.description = value()
            case "--header": options.headers.append(value())
            case "--output": options.outputFile = value()
            case "--exit-after-events": options.exitAfterEvents = true
            case "--die-in-delegate": options.dieInDelegate = true
            case "--keep-files": options.keepFiles = value()
            case "--lifetime": options.lifetime = Double(value())
            case "--connections": options.connections = Int(value()) ?? 1
            default: fail("unknown argument \(argument)")
            }
        }
        guard !options.stateDirectory.isEmpty, !options.session.isEmpty else {
            fail("need --state-dir and --session (or REACHABILITY_BACKGROUND_SESSION)")
        }
        return options
    }
}

final class Probe: ProbeProgressLines, ResumableURLSessionDataDelegate {
    let options: Options
    let resumeData = Mutex<Data?>(nil)
    /// The last upload task's resume data (cancel, or a failure's `uploadTaskResumeData`).
    let uploadResumeData = Mutex<Data?>(nil)
    let died = Atomic<Bool>(false)

    init(options: Options) { self.options = options }

    func printLine(_ object: [String: Any]) { emit(object) }

    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didFinishDownloadingTo location: URL) {
        let existed = FileManager.default.fileExists(atPath: location.path)
        emit(["call": "finished", "task": downloadTask.taskIdentifier, "location": location.path, "existed": existed,
              "description": downloadTask.taskDescription ?? NSNull(),
              "sha256": SHA256.hex(ofFileAt: location.path) ?? "unreadable"])
        if options.dieInDelegate, !died.exchange(true, ordering: .relaxed) {
            // Inside the call, before it returns: the agent must hand the file out again.
            kill(getpid(), SIGKILL)
        }
        if let keep = options.keepFiles {
            try? FileManager.default.moveItem(at: location, to: URL(fileURLWithPath: keep).appendingPathComponent("task-\(downloadTask.taskIdentifier)"))
        }
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?) {
        if let data = (error as? URLError)?.downloadTaskResumeData { resumeData.withLock { $0 = data } }
        emit(ProbeLines.completed(task, error))
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didSendBodyData bytesSent: Int64,
                    totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        emit(["call": "sent", "task": task.taskIdentifier, "bytes": bytesSent, "total": totalBytesSent,
              "expected": totalBytesExpectedToSend])
    }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let http = response as? HTTPURLResponse
        emit(["call": "response", "task": dataTask.taskIdentifier, "status": http?.statusCode ?? 0])
        completionHandler(.allow)
    }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive data: Data) {
        emit(["call": "data", "task": dataTask.taskIdentifier, "bytes": data.count, "text": String(decoding: data, as: UTF8.self)])
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?) {
        let urlError = error as? URLError
        if let data = urlError?.uploadTaskResumeData { uploadResumeData.withLock { $0 = data } }
        emit(["call": "uploadCompleted", "task": task.taskIdentifier, "code": urlError?.code.rawValue ?? NSNull(),
              "message": error.map { "\($0.localizedDescription)" } ?? NSNull(), "sent": task.countOfBytesSent,
              "expected": task.countOfBytesExpectedToSend, "resumeData": urlError?.uploadTaskResumeData?.count ?? NSNull()])
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: ResumableURLSession) {
        emit(["call": "didFinishEvents"])
        if options.exitAfterEvents { exit(0) }
    }

    func urlSession(_ session: ResumableURLSession, didBecomeInvalidWithError error: (any Error)?) {
        let urlError = error as? URLError
        emit(["call": "invalidated", "code": urlError?.code.rawValue ?? NSNull(), "message": error.map { "\($0.localizedDescription)" } ?? NSNull()])
        exit(error == nil ? 0 : 2)
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
if let file = options.outputFile {
    if !FileManager.default.fileExists(atPath: file) { _ = FileManager.default.createFile(atPath: file, contents: nil) }
    let handle = FileHandle(forWritingAtPath: file)
    handle?.seekToEndOfFile()
    output.withLock { $0 = handle }
}
if let lifetime = options.lifetime {
    DispatchQueue.global().asyncAfter(deadline: .now() + lifetime) {
        emit(["call": "lifetimeOver"])
        exit(3)
    }
}
emit(["call": "launched", "session": options.session,
      "environment": ProcessInfo.processInfo.environment["REACHABILITY_BACKGROUND_SESSION"] ?? NSNull()])

var configuration = ResumableURLSession.Configuration.background(withIdentifier: options.session)
configuration.stateDirectory = URL(fileURLWithPath: options.stateDirectory, isDirectory: true)
configuration.agentExecutable = options.agent.map { URL(fileURLWithPath: $0) }
// One connection per task unless asked: the tests count each task's requests and the bytes served.
configuration.httpMaximumConnectionsPerHost = options.connections
configuration.launchCommand = options.launch.isEmpty ? nil : options.launch
configuration.launchUnit = options.launchUnit
configuration.sessionSendsLaunchEvents = options.sendsLaunchEvents
configuration.isDiscretionary = options.isDiscretionary
if let timeout = options.resourceTimeout { configuration.timeoutIntervalForResource = timeout }
let probe = Probe(options: options)
let session = ResumableURLSession(configuration: configuration, delegate: probe)

func describe(_ tasks: [ResumableDownloadTask]) -> [[String: Any]] {
    tasks.map { task in
        ["task": task.taskIdentifier, "url": task.originalRequest?.url?.absoluteString ?? NSNull(), "state": task.state.rawValue,
         "description": task.taskDescription ?? NSNull(), "received": task.countOfBytesReceived,
         "priority": Double(task.priority), "expects": task.countOfBytesClientExpectsToReceive,
         "notBefore": task.earliestBeginDate.map { $0.timeIntervalSince1970 } ?? NSNull()]
    }
}

func task(_ number: String) async -> ResumableDownloadTask? {
    await session.allTasks.first { $0.taskIdentifier == Int(number) }
}

Task {
    emit(["call": "attached", "tasks": describe(await session.allTasks)])
    for url in options.urls {
        var request = URLRequest(url: url)
        for header in options.headers {
            let parts = header.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2 { request.setValue(parts[1], forHTTPHeaderField: parts[0]) }
        }
        let task = session.downloadTask(with: request)
        task.taskDescription = options.description ?? url.lastPathComponent
        if let notBefore = options.notBefore { task.earliestBeginDate = Date().addingTimeInterval(notBefore) }
        if let expects = options.expects { task.countOfBytesClientExpectsToReceive = expects }
        if let priority = options.priority { task.priority = priority }
        task.resume()
        emit(["call": "created", "task": task.taskIdentifier, "url": url.absoluteString])
    }
    // Commands on a plain thread: readLine blocks.
    Thread {
        while let line = readLine() {
            let words = line.split(separator: " ").map(String.init)
            let semaphore = DispatchSemaphore(value: 0)
            Task {
                defer { semaphore.signal() }
                switch words.first ?? "" {
                case "tasks": emit(["call": "tasks", "tasks": describe(await session.allTasks)])
                case "resume": await task(words[1])?.resume()
                case "suspend": await task(words[1])?.suspend()
                case "cancel": await task(words[1])?.cancel()
                case "cancel-with-data":
                    let data = await task(words[1])?.cancelByProducingResumeData()
                    if let data { probe.resumeData.withLock { $0 = data } }
                    emit(["call": "resumeData", "bytes": data?.count ?? NSNull(), "data": data?.base64EncodedString() ?? NSNull()])
                case "resume-data-download":
                    guard let data = probe.resumeData.withLock({ $0 }) else { return emit(["call": "error", "message": "no resume data"]) }
                    let task = session.downloadTask(withResumeData: data)
                    task.resume()
                    emit(["call": "created", "task": task.taskIdentifier, "fromResumeData": true])
                case "download":
                    do {
                        let (file, response) = try await session.download(from: URL(string: words[1])!)
                        emit(["call": "downloaded", "sha256": SHA256.hex(ofFileAt: file.path) ?? "unreadable",
                              "status": (response as? HTTPURLResponse)?.statusCode ?? 0, "file": file.path])
                        try? FileManager.default.removeItem(at: file)
                    } catch {
                        emit(["call": "downloadFailed", "code": (error as? URLError)?.code.rawValue ?? 0])
                    }
                case "upload", "upload-unresumed":
                    var request = URLRequest(url: URL(string: words[2])!)
                    request.httpMethod = "POST"
                    let task = session.uploadTask(with: request, fromFile: URL(fileURLWithPath: words[1]))
                    // Made and never resumed: as on Apple platforms it never starts.
                    let resumes = words[0] == "upload"
                    if resumes { task.resume() }
                    emit(["call": "created", "task": task.taskIdentifier, "upload": words[1], "resumed": resumes])
                case "upload-data":
                    var request = URLRequest(url: URL(string: words[1])!)
                    request.httpMethod = "POST"
                    let task = session.uploadTask(with: request, from: Data("body".utf8))
                    task.resume()
                    emit(["call": "created", "task": task.taskIdentifier, "uploadData": true])
                case "upload-tasks":
                    let (_, uploads, _) = await session.tasks
                    emit(["call": "uploadTasks", "tasks": uploads.map { ["task": $0.taskIdentifier, "sent": $0.countOfBytesSent,
                                                                         "expected": $0.countOfBytesExpectedToSend,
                                                                         "state": $0.state.rawValue] }])
                case "upload-cancel":
                    let (_, uploads, _) = await session.tasks
                    uploads.first { $0.taskIdentifier == Int(words[1]) }?.cancel()
                case "upload-cancel-with-data":
                    let (_, uploads, _) = await session.tasks
                    let data = await uploads.first { $0.taskIdentifier == Int(words[1]) }?.cancelByProducingResumeData()
                    if let data { probe.uploadResumeData.withLock { $0 = data } }
                    emit(["call": "uploadResumeData", "bytes": data?.count ?? NSNull()])
                case "upload-resume-data":
                    guard let data = probe.uploadResumeData.withLock({ $0 }) else { return emit(["call": "error", "message": "no upload resume data"]) }
                    let task = session.uploadTask(withResumeData: data)
                    task.resume()
                    emit(["call": "created", "task": task.taskIdentifier, "fromResumeData": true])
                case "invalidate": session.invalidateAndCancel()
                case "finish": session.finishTasksAndInvalidate()
                case "quit": exit(0)
                default: emit(["call": "error", "message": "unknown command \(line)"])
                }
            }
            semaphore.wait()
        }
    }.start()
}
dispatchMain()
