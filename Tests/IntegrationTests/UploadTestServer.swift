import Foundation
import ResumableDownloads
import TestSupport

/// Tests/Servers/upload_server.py on 127.0.0.1: the IETF resumable-upload draft-05 under
/// /ietf/, plain PUT/POST under /plain/, an echo of any request under /echo, /hold that never
/// answers, and GET /_stats with every body byte it read.
final class UploadTestServer: Sendable {
    let port: UInt16
    let directory: ScratchDirectory
    private let process: Process

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Servers/upload_server.py")
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") }

    /// Starts the server; `lie` makes it misreport offsets (past-end, backwards, beyond, forget),
    /// `bytesPerSecond` reads bodies at that pace.
    init(lie: String? = nil, bytesPerSecond: Int? = nil) throws {
        directory = try ScratchDirectory("upload-server")
        (process, port) = try Self.launch("/usr/bin/python3", [Self.script.path, "--directory", directory.url.path]
            + (lie.map { ["--lie", $0] } ?? []) + (bytesPerSecond.map { ["--rate", String($0)] } ?? []))
    }

    /// Starts a test server program that prints "port N" as its first line, and reads the port.
    static func launch(_ executable: String, _ arguments: [String]) throws -> (Process, UInt16) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
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

    func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)/\(path)")! }

    /// The server's counters (it rewrites _stats.json after every request).
    func stats() throws -> [String: Any] {
        guard let data = stored("_stats.json") else { return ["body_bytes": 0, "requests": []] }
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    /// Body bytes the server has read, over every request.
    func bodyBytesRead() throws -> Int {
        (try stats()["body_bytes"] as? Int) ?? -1
    }

    /// Requests the server has read (their heads), over every connection.
    func requestCount() throws -> Int {
        (try stats()["requests"] as? [Any])?.count ?? -1
    }

    /// What the server stored for an upload or plain file.
    func stored(_ name: String) -> Data? { try? Data(contentsOf: directory.url(name)) }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)   // the server keeps no state worth a clean exit
        process.waitUntilExit()
    }

    deinit { stop() }
}
