import Foundation
import ResumableURLSession

/// The NDJSON lines the probes (`urlsession-probe`, `background-probe`) print for delegate
/// calls, in one spelling: the integration tests and the benchmarks parse them.
public enum ProbeLines {
    /// The line as bytes, with the monotonic time in ms and µs (`systemUptime`, the clock
    /// Python's `time.monotonic()` reads) and the process id.
    public static func encoded(_ object: [String: Any]) -> Data {
        var line = object
        let uptime = ProcessInfo.processInfo.systemUptime
        line["ms"] = Int(uptime * 1000)
        line["us"] = Int(uptime * 1_000_000)
        line["pid"] = Int(ProcessInfo.processInfo.processIdentifier)
        return ((try? JSONSerialization.data(withJSONObject: line, options: [.sortedKeys])) ?? Data("{}".utf8)) + Data("\n".utf8)
    }

    public static func wrote(_ task: ResumableDownloadTask, _ bytes: Int64, total: Int64, expected: Int64) -> [String: Any] {
        ["call": "wrote", "task": task.taskIdentifier, "bytes": bytes, "total": total, "expected": expected]
    }

    public static func resumed(_ task: ResumableDownloadTask, offset: Int64, expected: Int64) -> [String: Any] {
        ["call": "resumed", "task": task.taskIdentifier, "offset": offset, "expected": expected]
    }

    public static func waiting(_ task: ResumableDownloadTask) -> [String: Any] {
        ["call": "waiting", "task": task.taskIdentifier]
    }

    /// `completed`, with the URLError's code, message, underlying error, unavailable reason and
    /// the size of its resume data.
    public static func completed(_ task: ResumableDownloadTask, _ error: (any Error)?) -> [String: Any] {
        var line: [String: Any] = ["call": "completed", "task": task.taskIdentifier]
        if let error = error as? URLError {
            line["code"] = error.code.rawValue
            line["message"] = error.localizedDescription
            if let underlying = error.userInfo[NSUnderlyingErrorKey] { line["underlying"] = "\(underlying)" }
            if let reason = error.networkUnavailableReason { line["reason"] = "\(reason)" }
            if let data = error.downloadTaskResumeData { line["resumeData"] = data.count }
        }
        return line
    }
}

/// A probe's download delegate whose progress calls (`wrote`, `resumed`, `waiting`) print
/// `ProbeLines` through `printLine`: both probes' delegates conform and keep only the calls in
/// which they differ (what a finished file or a completion prints).
public protocol ProbeProgressLines: ResumableURLSessionDownloadDelegate {
    /// Prints one line where the probe prints (standard output, or a file the test names).
    func printLine(_ object: [String: Any])
}

extension ProbeProgressLines {
    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didWriteData bytesWritten: Int64,
                           totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        printLine(ProbeLines.wrote(downloadTask, bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite))
    }

    public func urlSession(_ session: ResumableURLSession, downloadTask: ResumableDownloadTask, didResumeAtOffset fileOffset: Int64,
                           expectedTotalBytes: Int64) {
        printLine(ProbeLines.resumed(downloadTask, offset: fileOffset, expected: expectedTotalBytes))
    }

    public func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDownloadTask) {
        printLine(ProbeLines.waiting(task))
    }
}

/// Reads a probe's arguments in order: `each` gets a flag and a way to take the value after it.
/// A missing value ends the probe with a usage error (exit 64), as an unknown flag does.
public func readProbeArguments(_ arguments: [String], _ each: (_ flag: String, _ value: () -> String) -> Void) {
    var rest = arguments[...]
    while let argument = rest.popFirst() {
        each(argument) {
            guard let value = rest.popFirst() else {
                FileHandle.standardError.write(Data("Error: missing value for \(argument)\n".utf8))
                exit(64)
            }
            return value
        }
    }
}
