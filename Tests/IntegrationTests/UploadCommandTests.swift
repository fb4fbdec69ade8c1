import Foundation
import Glibc
import Testing
import TestSupport

/// `reachability upload` run as a program against upload_server.py on 127.0.0.1: exit codes,
/// NDJSON events, the stored file.
@Suite("reachability upload", .serialized, .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct UploadCommandTests: DownloadScenarios {

    @Test func uploadsOverTheDraftAndPrintsEvents() throws {
        let server = try UploadTestServer()
        let directory = try ScratchDirectory("upload-command")
        let (file, content) = try directory.randomFile("storm.jpg", count: 2 << 20, seed: 11)
        let result = try BuiltProducts.run("reachability", ["upload", "--json", file.path, server.url("ietf/").absoluteString])
        #expect(result.status == 0, "\(result)")
        let events = result.standardOutput.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(events.compactMap { $0["event"] as? String }.filter { $0 != "progress" } == ["protocol", "created", "completed"], "\(result)")
        let created = try #require(events.first { $0["event"] as? String == "created" }?["upload_url"] as? String)
        #expect(server.stored(String(created.split(separator: "/").last ?? "")) == content)
        #expect(events.last?["bytes_resent"] as? Int == 0)
    }

    @Test func aPlainPutStoresTheFile() throws {
        let server = try UploadTestServer()
        let directory = try ScratchDirectory("upload-command")
        let (file, content) = try directory.randomFile("log.tar", count: 1 << 20, seed: 12)
        let result = try BuiltProducts.run("reachability", ["upload", "--protocol", "put", "-q", file.path,
                                                            server.url("plain/log.tar").absoluteString])
        #expect(result.status == 0, "\(result)")
        #expect(result.standardError.isEmpty, "\(result)")
        #expect(server.stored("log.tar") == content)
    }

    @Test func badInputExitsWithAClearMessage() throws {
        let server = try UploadTestServer()
        let directory = try ScratchDirectory("upload-command")
        let url = server.url("ietf/").absoluteString
        for (arguments, status, words) in [
            ([directory.url("missing").path, url], Int32(66), "No such file"),
            ([directory.url.path, url], 66, "a directory"),
            (["--protocol", "gopher", directory.url.path, url], 64, "expected auto, ietf, tus or put"),
            ([directory.url.path, "ftp://127.0.0.1/x"], 64, "only http and https"),
        ] {
            let result = try BuiltProducts.run("reachability", ["upload"] + arguments)
            #expect(result.status == status, "\(arguments): \(result)")
            #expect(result.standardError.contains(words), "\(arguments): \(result)")
        }
    }

    /// A FIFO, and a file the user may not read (root's 0600 file, run as nobody): refused before
    /// anything is sent, exit 66.
    @Test func aFIFOAndAnUnreadableFileExit66() throws {
        let server = try UploadTestServer()
        let directory = try ScratchDirectory("upload-command-bad", permissions: 0o755)
        let url = server.url("ietf/").absoluteString
        let fifo = directory.url("pipe").path
        #expect(mkfifo(fifo, 0o644) == 0)
        var cases: [([String], String)] = [([], "a FIFO")]
        let secret = directory.url("secret.jpg")
        try Data("root's".utf8).write(to: secret)
        #expect(chmod(secret.path, 0o600) == 0)
        if getuid() == 0 { cases.append((["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], "denied")) }
        for (prefix, words) in cases {
            let path = prefix.isEmpty ? fifo : secret.path
            let result = try BuiltProducts.run("reachability", ["upload", "--json", path, url], prefix: ["timeout", "30"] + prefix)
            #expect(result.status == 66, "\(path): \(result)")
            #expect(result.standardError.lowercased().contains(words.lowercased()), "\(path): \(result)")
            #expect(result.standardOutput.contains("\"exit\":66"), "the failed event: \(result)")
        }
        #expect(try server.requestCount() == 0, "nothing reached the server")
    }

    /// A server that lies about its offset once it is asked (its first connection reset at 1 MiB,
    /// the path up): past the end, backwards, beyond the file, or acknowledging bytes it did not
    /// keep. The command stops with the reason, exit 1.
    @Test(arguments: ["past-end", "backwards", "beyond", "forget"])
    func aServerLyingAboutItsOffsetExits1WithTheReason(lie: String) throws {
        let server = try UploadTestServer(lie: lie, bytesPerSecond: 8 << 20, resetAfter: 1 << 20)
        let directory = try ScratchDirectory("upload-command-lie")
        let file = directory.url("storm.jpg")
        try F.randomData(count: 3 << 20, seed: 13).write(to: file)
        let result = try BuiltProducts.run("reachability", ["upload", "--json", "--idle-timeout", "2", file.path,
                                                            server.url("ietf/").absoluteString], prefix: ["timeout", "60"])
        #expect(result.status == 1, "\(lie): \(result)")
        #expect(result.standardError.contains("the upload server reported"), "\(lie): \(result)")
        #expect(result.standardOutput.contains("\"interrupted\""), "the reset was met first: \(result)")
        #expect(!result.standardOutput.contains("\"completed\""), "\(lie): \(result)")
    }

    /// A file appended to while it is sent: exit 1 with "the file changed", before its last byte.
    @Test func aFileChangedMidUploadExits1() async throws {
        let server = try UploadTestServer(bytesPerSecond: 2 << 20)
        let directory = try ScratchDirectory("upload-command-changed")
        let file = directory.url("growing.log")
        try F.randomData(count: 4 << 20, seed: 14).write(to: file)
        let upload = try LineProcess("reachability", ["upload", "--json", file.path, server.url("ietf/").absoluteString])
        defer { upload.kill() }
        let started = await upload.waitForLine(timeout: .seconds(30)) {
            guard $0.contains("\"progress\""), let object = try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            else { return false }
            return (object["sent"] as? Int ?? 0) >= 1 << 20
        }
        #expect(started != nil, "\(upload.transcript)")
        let handle = try FileHandle(forWritingTo: file)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("one more line\n".utf8))
        try handle.close()
        #expect(await upload.waitForExit(timeout: .seconds(30)) == 1, "\(upload.transcript)")
        #expect(upload.transcript.contains("the file changed while it was being sent"), "\(upload.transcript)")
        #expect(!upload.transcript.contains("\"completed\""), "\(upload.transcript)")
    }
}
