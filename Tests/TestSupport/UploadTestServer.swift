import Foundation
import ResumableDownloads

/// Tests/Servers/upload_server.py on 127.0.0.1: the IETF resumable-upload draft-05 under
/// /ietf/, plain PUT/POST under /plain/, an echo of any request under /echo, /hold that never
/// answers, and GET /_stats with every body byte it read.
public final class UploadTestServer: Sendable {
    /// The port it listens on.
    public let port: UInt16
    /// Where it stores uploads.
    public let directory: ScratchDirectory
    private let process: Process

    /// Tests/Servers/upload_server.py.
    public static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Servers/upload_server.py")
    /// Whether python3 is installed.
    public static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") }

    /// Starts the server; `lie` makes it misreport offsets (past-end, backwards, beyond, forget),
    /// `bytesPerSecond` reads bodies at that pace, `resetAfter` resets the connection reading
    /// past that body byte of an upload (once), `failAfter` answers the creation request reading
    /// past that body byte with 503, keeping what it read (once); `isBusyAfterReset` answers
    /// every request after that reset with 503 (`busyAnswers()` counts them).
    public init(lie: String? = nil, bytesPerSecond: Int? = nil, resetAfter: Int? = nil, failAfter: Int? = nil,
                isBusyAfterReset: Bool = false) throws {
        directory = try ScratchDirectory("upload-server")
        (process, port) = try Self.launch("/usr/bin/python3", [Self.script.path, "--directory", directory.url.path]
            + (lie.map { ["--lie", $0] } ?? []) + (bytesPerSecond.map { ["--rate", String($0)] } ?? [])
            + (resetAfter.map { ["--reset-after", String($0)] } ?? []) + (failAfter.map { ["--fail-after", String($0)] } ?? [])
            + (isBusyAfterReset ? ["--busy-after-reset"] : []))
    }

    /// Starts a test server program that prints "port N" as its first line, and reads the port.
    public static func launch(_ executable: String, _ arguments: [String]) throws -> (Process, UInt16) {
        let output = Pipe()
        let process = try ChildProcess.start(executable, arguments, input: FileHandle.standardInput, output: output)
        var line = Data()
        while !line.contains(10) {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            guard !byte.isEmpty else { break }
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("port "), let port = UInt16(text.dropFirst(5)) else {
            kill(process.processIdentifier, SIGKILL)
            throw POSIXError(.ECONNREFUSED)   // the server did not print its port
        }
        return (process, port)
    }

    /// The URL of `path`.
    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)/\(path)")! }

    /// The server's counters (it rewrites _stats.json after every request).
    public func stats() throws -> [String: Any] {
        guard let data = stored("_stats.json") else { return ["body_bytes": 0, "requests": []] }
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    /// Body bytes the server has read, over every request.
    public func bodyBytesRead() throws -> Int {
        (try stats()["body_bytes"] as? Int) ?? -1
    }

    /// Requests answered 503 by `isBusyAfterReset`.
    public func busyAnswers() throws -> Int {
        (try stats()["busy_answers"] as? Int) ?? -1
    }

    /// Requests the server has read (their heads), over every connection.
    public func requestCount() throws -> Int {
        (try stats()["requests"] as? [Any])?.count ?? -1
    }

    /// What the server stored for an upload or plain file.
    public func stored(_ name: String) -> Data? { try? Data(contentsOf: directory.url(name)) }

    /// Stops the server.
    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)   // the server keeps no state worth a clean exit
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// Tests/Servers/tus_server.py (aiohttp-tus, a real tus 1.0 server) on 127.0.0.1.
public final class TusServer: Sendable {
    /// The port it listens on.
    public let port: UInt16
    /// Where it stores uploads.
    public let directory: ScratchDirectory
    private let process: Process

    /// Starts the server on a free port.
    public init() throws {
        directory = try ScratchDirectory("tus-server")
        // The python3 on PATH, as `hasTus` asked (setup.sh's pip may install beside /usr/bin's).
        let script = UploadTestServer.script.deletingLastPathComponent().appendingPathComponent("tus_server.py")
        (process, port) = try UploadTestServer.launch("/usr/bin/env", ["python3", script.path, "--directory", directory.url.path])
    }

    /// The tus creation URL.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)/uploads")! }

    /// Stops the server.
    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}
