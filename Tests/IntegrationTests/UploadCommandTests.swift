import Foundation
import Testing
import TestSupport

/// `reachability upload` run as a program against upload_server.py on 127.0.0.1: exit codes,
/// NDJSON events, the stored file.
@Suite("reachability upload", .serialized, .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct UploadCommandTests: DownloadScenarios {

    @Test func uploadsOverTheDraftAndPrintsEvents() throws {
        let server = try UploadTestServer()
        let directory = try ScratchDirectory("upload-command")
        let content = F.randomData(count: 2 << 20, seed: 11)
        let file = directory.url("storm.jpg")
        try content.write(to: file)
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
        let content = F.randomData(count: 1 << 20, seed: 12)
        let file = directory.url("log.tar")
        try content.write(to: file)
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
}
