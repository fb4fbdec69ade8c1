// StormWatch: the WWDC 2022 "Efficiency awaits: Background tasks in SwiftUI" sample on Linux.
//
// On iOS, an app refresh task (`.backgroundTask(.appRefresh(...))`) asks whether it is stormy
// with `try await URLSession.shared.data(for: request)`; when the system ends the refresh before
// the answer arrives, the task is cancelled and its `withTaskCancellationHandler { } onCancel: { }`
// hands the request to a background session's download task; the system later relaunches the app for that session
// (`.backgroundTask(.urlSession("isStormy"))`) and the answer is read from the finished file.
//
// Here a systemd user timer runs the program (the app refresh): it asks within --budget seconds,
// and when the budget runs out the same code hands the request to the background session and the
// program exits. The download agent finishes it and starts the program again (launchUnit, or
// this program's own argv), with REACHABILITY_BACKGROUND_SESSION=isStormy in its environment:
// that run takes the file and writes the answer. Stormy's photo goes the same way: an upload task
// of the background session, which the agent sends after this run exits; the agent starts the
// program again with the server's answer. Samples/StormWatch/README.md has the units.

import Foundation
import FoundationNetworking
import ResumableURLSession

let usage = "USAGE: StormWatch --url <url> [--photo <file> --upload-url <url>] [--budget <seconds>] [--output <file>] [--launch-unit <unit>] [--state-dir <dir>] [--agent <path>] [--connections <n>]"

func fail(_ message: String, _ status: Int32) -> Never {
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    if status == 64 { FileHandle.standardError.write(Data("\(usage)\nSee 'StormWatch --help'.\n".utf8)) }
    exit(status)
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

// MARK: arguments

struct Options: Sendable {
    var url: URL?
    var budget: Double = 20
    var output: URL?
    var launchUnit: String?
    var stateDirectory: URL?
    var agent: URL?
    /// `httpMaximumConnectionsPerHost` (`--connections`); nil keeps the default (6).
    var connections: Int?
    /// The "photo" (`--photo`) and where it is uploaded (`--upload-url`).
    var photo: URL?
    var uploadURL: URL?
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
    print("""
    OVERVIEW: Is it stormy? The WWDC background-tasks sample: ask within a budget, and when the
    budget runs out hand the request to a background session; the download agent finishes it and
    starts this program again to read the answer.

    \(usage)

    OPTIONS:
      --url <url>           The forecast (a JSON object with "stormy": true or false).
      --photo <file>        The photo of the sky, uploaded after the forecast (Stormy's upload).
      --upload-url <url>    Where the photo goes (an HTTP PUT; with --photo), in the background
                            session: the agent sends it and starts this program with the answer.
      --budget <seconds>    How long a timer run may take before it hands over (default 20).
      --output <file>       Where the answer is written (default ~/.local/state/stormwatch/latest).
      --launch-unit <unit>  The systemd user unit the agent starts for the answer (a template
                            NAME@.service gets the session as its instance); default: this program
                            with the same options.
      --state-dir <dir>     The download agent's state directory (default: the agent's own).
      --agent <path>        The reachability binary to start when no agent runs (default: on PATH).
      --connections <n>     At most this many connections to the server (httpMaximumConnectionsPerHost,
                            1-16; default 6).
      -h, --help            Show help information.

    Started with REACHABILITY_BACKGROUND_SESSION=isStormy (by the agent), it takes the finished
    download and writes the answer; otherwise it asks. Exit status 0; 1 when the answer could not
    be read; 64 for a usage error.
    """)
    exit(0)
}
var options = Options()
var index = 0
while index < arguments.count {
    let argument = arguments[index]
    index += 1
    guard index < arguments.count else { fail("Missing value for '\(argument)'", 64) }
    let value = arguments[index]
    index += 1
    switch argument {
    case "--url":
        guard let url = URL(string: value), ["http", "https"].contains(url.scheme?.lowercased() ?? "") else {
            fail("The value '\(value)' is invalid for '--url': expected an http or https URL", 64)
        }
        options.url = url
    case "--budget":
        guard let seconds = Double(value), seconds > 0, seconds <= 3600 else {
            fail("The value '\(value)' is invalid for '--budget': expected seconds between 0 and 3600", 64)
        }
        options.budget = seconds
    case "--output": options.output = URL(fileURLWithPath: value)
    case "--photo": options.photo = URL(fileURLWithPath: value)
    case "--upload-url":
        guard let url = URL(string: value), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
            fail("The value '\(value)' is invalid for '--upload-url': expected an http or https URL", 64)
        }
        options.uploadURL = url
    case "--launch-unit": options.launchUnit = value
    case "--state-dir": options.stateDirectory = URL(fileURLWithPath: value, isDirectory: true)
    case "--agent": options.agent = URL(fileURLWithPath: value)
    case "--connections":
        guard let count = Int(value), (1...16).contains(count) else {
            fail("The value '\(value)' is invalid for '--connections': expected a number from 1 to 16", 64)
        }
        options.connections = count
    default: fail("Unknown option '\(argument)'", 64)
    }
}
if (options.photo == nil) != (options.uploadURL == nil) { fail("--photo and --upload-url go together", 64) }
let launchedForEvents = ProcessInfo.processInfo.environment["REACHABILITY_BACKGROUND_SESSION"] == "isStormy"
guard let forecastURL = options.url ?? (launchedForEvents ? URL(string: "http://localhost/") : nil) else {
    fail("Missing expected option '--url <url>'", 64)
}
let output = options.output ?? URL(fileURLWithPath: NSHomeDirectory()).appendingPathComponent(".local/state/stormwatch/latest")

// MARK: the answer

/// "stormy: yes (fetched ...)", from the forecast's JSON in a file.
func record(_ file: URL, how: String) -> Bool {
    record(data: (try? Data(contentsOf: file)) ?? Data(), how: how)
}

/// "stormy: yes (fetched ...)", from the forecast's JSON.
func record(data: Data, how: String) -> Bool {
    guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
          let stormy = object["stormy"] as? Bool else {
        say("the forecast could not be read")
        return false
    }
    let line = "stormy: \(stormy ? "yes" : "no") (\(how) at \(ISO8601DateFormatter().string(from: Date())))"
    try? FileManager.default.createDirectory(at: output.deletingLastPathComponent(), withIntermediateDirectories: true)
    try? Data((line + "\n").utf8).write(to: output, options: .atomic)
    say(line)
    return true
}

// MARK: the background session ("isStormy")

/// Where a launched run writes the photo upload's outcome (beside the answer).
let photoOutput = output.deletingLastPathComponent().appendingPathComponent(output.lastPathComponent + "-photo")

/// iOS: `.backgroundTask(.urlSession("isStormy")) { ... }`: the finished download's file, and
/// the photo upload's answer.
final class StormDelegate: ResumableURLSessionDownloadDelegate, ResumableURLSessionDataDelegate {
    func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didFinishDownloadingTo location: URL) {
        _ = record(location, how: "downloaded in the background")
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDownloadTask, didCompleteWithError error: (any Error)?) {
        if let error = error as? URLError, error.code != .cancelled { say("the background download failed: \(error.localizedDescription)") }
    }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let line = "photo upload: HTTP \(status) (sent in the background, told at \(ISO8601DateFormatter().string(from: Date())))"
        try? FileManager.default.createDirectory(at: photoOutput.deletingLastPathComponent(), withIntermediateDirectories: true)
        try? Data((line + "\n").utf8).write(to: photoOutput, options: .atomic)
        say(line)
        completionHandler(.allow)
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?) {
        if let error { say("the background photo upload failed: \(error.localizedDescription)") }
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: ResumableURLSession) {
        exit(0)   // everything that waited for this launch is handled
    }

    func urlSession(_ session: ResumableURLSession, didBecomeInvalidWithError error: (any Error)?) {
        if let error { fail("background session: \(error.localizedDescription)", 1) }
    }
}

var configuration = ResumableURLSession.Configuration.background(withIdentifier: "isStormy")
configuration.sessionSendsLaunchEvents = true
configuration.agentExecutable = options.agent
if let directory = options.stateDirectory { configuration.stateDirectory = directory }
if let connections = options.connections { configuration.httpMaximumConnectionsPerHost = connections }
if let unit = options.launchUnit {
    configuration.launchUnit = unit
} else {
    // This program again, with the same options (a path that does not depend on the working directory).
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    configuration.launchCommand = [executable] + arguments
}
let session = ResumableURLSession(configuration: configuration, delegate: StormDelegate())

if launchedForEvents {
    // Started by the agent: the delegate gets the file, then urlSessionDidFinishEvents.
    Task {
        try? await Task.sleep(for: .seconds(options.budget))
        say("no events arrived within the budget")
        exit(0)
    }
    dispatchMain()
}

// MARK: the app refresh (a timer run)

/// iOS: `URLSession.shared`, which asks in this process. Every session has a state directory;
/// this one keeps nothing (a data task stores no bytes), beside the answer.
let sharedSession = ResumableURLSession(configuration: ResumableURLSession.Configuration(
    stateDirectory: output.deletingLastPathComponent().appendingPathComponent(".stormwatch-session", isDirectory: true)))

/// iOS: the body of `.backgroundTask(.appRefresh("myapprefresh"))`.
func isStormy() async throws -> Bool {
    let request = URLRequest(url: forecastURL)
    let (data, _) = try await withTaskCancellationHandler {
        try await sharedSession.data(for: request)
    } onCancel: {
        // The refresh is over: the background session asks again and starts this program for
        // the answer.
        let task = session.downloadTask(with: request)
        task.resume()
    }
    return record(data: data, how: "fetched in the refresh")
}

/// Stormy's upload: the photo of the sky, after the forecast, as an upload task of the
/// background session (as Apple's sample does): the agent owns it once it is resumed, sends it
/// after this run exits (following the path, from the server's offset after a drop where the
/// server can resume), and starts the program again with the server's answer.
let photoUpload = options.photo.flatMap { photo in options.uploadURL.map { (photo: photo, url: $0) } }

func uploadPhoto() -> Bool {
    guard let (photo, uploadURL) = photoUpload else { return true }
    var request = URLRequest(url: uploadURL)
    request.httpMethod = "PUT"
    request.setValue("image/jpeg", forHTTPHeaderField: "Content-Type")
    let task = session.uploadTask(with: request, fromFile: photo)
    task.resume()
    if task.state == .completed, let error = task.error {
        say("photo upload failed: \(error.localizedDescription)")
        return false
    }
    // resume() has handed the task (and the open photo) to the agent: this run may go.
    say("photo upload: handed to the background session")
    return true
}

let refresh = Task {
    do {
        let answered = try await isStormy()
        let uploaded = uploadPhoto()
        exit(answered && uploaded ? 0 : 1)
    } catch let error as URLError where error.code == .cancelled {
        say("the refresh budget (\(options.budget) s) ran out: the background session finishes the download")
        // The download task's messages are on their way to the agent before this line; the
        // program may go (the agent owns the task).
        exit(0)
    } catch {
        fail("\(error.localizedDescription)", 1)
    }
}
Task {
    try? await Task.sleep(for: .seconds(options.budget))
    refresh.cancel()   // iOS: the system ends the refresh
}
dispatchMain()
