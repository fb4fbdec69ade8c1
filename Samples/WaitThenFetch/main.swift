// WaitThenFetch: wait with `for await path in monitor.paths` until the network is usable and
// not expensive, then fetch one file with a resumable download, all with async/await.
// Ctrl-C cancels the task: the download is paused (its resume data kept, so running the same
// command again continues where it stopped) and the program exits with 130.

import Dispatch
import Foundation
import LinuxReachability
import ResumableDownloads

let usage = "USAGE: WaitThenFetch <url> [-o <file>] [--sha256 <hex>] [--state-dir <dir>] [--timeout <seconds>]"

func fail(_ message: String, _ status: Int32) -> Never {
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    if status == 64 { FileHandle.standardError.write(Data("\(usage)\nSee 'WaitThenFetch --help'.\n".utf8)) }
    exit(status)
}

struct Options {
    var url: URL
    var output: URL
    var sha256: String?
    var stateDirectory: URL
    var timeout: Double?
}

func parse(_ arguments: [String]) -> Options {
    if arguments.contains("--help") || arguments.contains("-h") {
        print("""
        OVERVIEW: Wait for a usable, non-expensive network path, then download one file (resumable).

        \(usage)

        OPTIONS:
          -o <file>            Where the file goes (default: the URL's file name in the current directory).
          --sha256 <hex>       Expected SHA-256; a mismatch fails the download.
          --state-dir <dir>    Resume records (default: ./.waitthenfetch).
          --timeout <seconds>  Give up waiting for a path after this long (exit 1). Default: wait forever.
          -h, --help           Show help information.

        Ctrl-C cancels: the partial file and its resume record are kept, exit status 130.
        """)
        exit(0)
    }
    var url: URL?, output: String?, sha256: String?, state: String?, timeout: Double?
    var index = 0
    func value(_ name: String) -> String {
        index += 1
        guard index < arguments.count else { fail("Missing value for '\(name)'", 64) }
        return arguments[index]
    }
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "-o": output = value("-o")
        case "--sha256": sha256 = value("--sha256")
        case "--state-dir": state = value("--state-dir")
        case "--timeout":
            let text = value("--timeout")
            guard let seconds = Double(text), seconds >= 0 else { fail("The value '\(text)' is invalid for '--timeout'", 64) }
            timeout = seconds
        default:
            guard !argument.hasPrefix("-"), url == nil else { fail("Unexpected argument '\(argument)'", 64) }
            guard let parsed = URL(string: argument), ["http", "https"].contains(parsed.scheme?.lowercased() ?? "") else {
                fail("The value '\(argument)' is invalid for '<url>': expected an http or https URL", 64)
            }
            url = parsed
        }
        index += 1
    }
    guard let url else { fail("Missing expected argument '<url>'", 64) }
    let name = url.lastPathComponent.isEmpty || url.lastPathComponent == "/" ? "index.html" : url.lastPathComponent
    return Options(url: url, output: URL(fileURLWithPath: output ?? name),
                   sha256: sha256, stateDirectory: URL(fileURLWithPath: state ?? ".waitthenfetch"), timeout: timeout)
}

func log(_ text: String) { FileHandle.standardError.write(Data((text + "\n").utf8)) }

/// Suspends until the monitor reports a satisfied, non-expensive path; nil when cancelled or
/// the monitor stopped.
func waitForGoodPath(_ monitor: PathMonitor) async -> NetworkPath? {
    for await path in monitor.paths {
        if path.isSatisfied && !path.isExpensive { return path }
        log(path.isSatisfied ? "waiting: the path is expensive (\(path.primaryInterface?.name ?? "?"))"
                             : "waiting: \(path.unsatisfiedReason?.rawValue ?? "offline")")
    }
    return nil
}

enum Outcome { case done(URL), waitTimedOut, cancelled, failed(String) }

func fetch(_ options: Options, monitor: PathMonitor) async -> Outcome {
    let path: NetworkPath?
    if let timeout = options.timeout {
        path = await withTaskGroup(of: NetworkPath?.self) { group in
            group.addTask { await waitForGoodPath(monitor) }
            group.addTask { try? await Task.sleep(for: .milliseconds(Int(timeout * 1000))); return nil }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        if path == nil && !Task.isCancelled { return .waitTimedOut }
    } else {
        path = await waitForGoodPath(monitor)
    }
    guard let path, !Task.isCancelled else { return .cancelled }
    log("network usable via \(path.primaryInterface?.name ?? "?"); downloading \(options.url.absoluteString)")

    let agent: DownloadAgent
    do {
        agent = try DownloadAgent(configuration: .init(stateDirectory: options.stateDirectory), monitor: monitor)
    } catch {
        return .failed("\(error)")
    }
    // Resume a download of the same URL left by an earlier, cancelled run.
    let earlier = await agent.restoreDownloads().first { $0.url == options.url && $0.destination == options.output.standardizedFileURL }
    let download: Download
    do {
        if let earlier {
            download = earlier
            log("resuming at \(earlier.progress.bytesReceived) bytes")
        } else {
            download = try await agent.download(from: options.url, to: options.output,
                                                options: DownloadOptions(expectedSHA256: options.sha256, allowsExpensive: false))
        }
    } catch {
        await agent.shutdown()
        return .failed("\(error)")
    }
    // `events` ends when the task is cancelled (AsyncStream is cancellation-aware), unlike
    // `finished()`, which a pause does not end.
    var outcome = Outcome.cancelled
    events: for await event in download.events {
        switch event {
        case .completed(let url): outcome = .done(url); break events
        case .failed(let error): outcome = .failed(error.description); break events
        case .waitingForConnectivity: log("waiting for the network to come back")
        case .waitingForServer(let error): log("waiting for the server: \(error)")
        case .resumed(let offset): log("transferring from byte \(offset)")
        case .retrying(let delay, let error): log("retrying in \(delay): \(error)")
        default: break
        }
    }
    if case .cancelled = outcome { await download.pause() }
    await agent.shutdown()
    return outcome
}

let options = parse(Array(CommandLine.arguments.dropFirst()))
let monitor = PathMonitor()
do {
    try monitor.start()
} catch {
    fail("cannot watch the network: \(error)", 1)
}

let work = Task { await fetch(options, monitor: monitor) }
// SignalHandlers unblocks SIGINT (a parent may pass it blocked) and leaves no window in which it is lost.
let interrupt = SignalHandlers.installBlocking([SIGINT], queue: .main) { _ in work.cancel() }

Task {
    let outcome = await work.value
    monitor.cancel()
    switch outcome {
    case .done(let url):
        print(url.path)
        exit(0)
    case .waitTimedOut:
        log("Error: no usable, non-expensive network path within \(options.timeout ?? 0) s")
        exit(1)
    case .cancelled:
        log("cancelled; run the same command again to resume")
        exit(130)
    case .failed(let message):
        log("Error: \(message)")
        exit(1)
    }
}
dispatchMain()
