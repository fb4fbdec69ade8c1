import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// What `reachability download` says and leaves behind when something local is odd (issue 21):
/// a file name too long for `NAME.part`, `-o` naming a directory, a FIFO at the destination,
/// a password in the URL, `-o -`, a rerun refused with 73, a state directory that cannot be made.
@Suite("reachability download: messages that say what happened", .serialized)
struct DownloadMessageTests: DownloadScenarios {

    static let content = F.randomData(count: 200 << 10, seed: 2131)

    static func server() throws -> DownloadTestHTTPServer {
        try DownloadTestHTTPServer { request, _ in
            request.path.hasSuffix("missing.bin") ? .init(status: 404, body: Data("no".utf8))
                : .honest(request, content: content, etag: "\"m1\"")
        }
    }

    static func url(_ server: DownloadTestHTTPServer, _ path: String = "file.bin") -> String {
        "http://127.0.0.1:\(server.port)/\(path)"
    }

    static func jobDirectories(_ directory: F.Directory) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory.file("state/downloads").path)) ?? []
    }

    /// 251-255 bytes is a legal file name, but `NAME.part` is not: the partial is shortened and
    /// the file keeps its name.
    @Test(arguments: [251, 255])
    func aLongLegalFileNameIsKept(_ length: Int) async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        let name = String(repeating: "n", count: length - 4) + ".bin"
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", name, Self.url(server)],
                                 directory: directory.url)
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: directory.file(name)) == F.sha256(Self.content))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted() == [name, "state"].sorted())
    }

    @Test func anExistingDirectoryIsNamedAsOne() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        try FileManager.default.createDirectory(at: directory.file("out"), withIntermediateDirectories: false)
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", "out", Self.url(server)],
                                 directory: directory.url)
        #expect(await cli.waitForExit() == 73, "\(cli.transcript)")
        #expect(cli.standardError.contains("is a directory; to download into it use -d"), "\(cli.transcript)")
        #expect(server.requests.isEmpty)
        #expect(Self.jobDirectories(directory).isEmpty, "a refused run leaves no lock behind: \(Self.jobDirectories(directory))")
    }

    /// A FIFO at the destination with --sha256: nothing opens it blocking (no writer ever comes);
    /// refused at once, named as a FIFO, nothing left behind.
    @Test func aFIFOAtTheDestinationIsRefusedAtOnce() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        #expect(mkfifo(directory.file("x.bin").path, 0o644) == 0)
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", "x.bin",
                                  "--sha256", F.sha256(Self.content), Self.url(server)], directory: directory.url)
        let status = await cli.waitForExit(timeout: .seconds(20))
        if status == nil { cli.kill() }
        #expect(status == 73, "\(cli.transcript)")
        #expect(cli.standardError.contains("is a FIFO"), "\(cli.transcript)")
        #expect(Self.jobDirectories(directory).isEmpty, "\(Self.jobDirectories(directory))")
    }

    /// Hashing a large existing file (to see whether it already is the wanted one) answers the
    /// first SIGINT, like every other wait of the command.
    @Test func hashingAnExistingFileAnswersTheFirstInterrupt() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        // Sparse: 64 GiB to hash (tens of seconds), no disk used.
        let big = directory.file("big.bin")
        #expect(FileManager.default.createFile(atPath: big.path, contents: nil))
        #expect(truncate(big.path, 64 << 30) == 0)
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", "big.bin",
                                  "--sha256", F.sha256(Self.content), Self.url(server)], directory: directory.url)
        // The hash runs once the job opens; interrupt it then.
        #expect(F.waitSync(timeout: .seconds(20)) { !Self.jobDirectories(directory).isEmpty })
        let sent = ContinuousClock.now
        cli.signal(SIGINT)
        let status = await cli.waitForExit(timeout: .seconds(10))
        if status == nil { cli.kill() }
        #expect(status == 130, "\(cli.transcript)")
        #expect(ContinuousClock.now - sent < .seconds(5), "answered after \(ContinuousClock.now - sent)")
        #expect(server.requests.isEmpty)
    }

    /// A password in the URL is masked in the error line, the events and the verbose log.
    @Test func aPasswordInTheURLIsNeverPrinted() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        let secret = "http://alice:S3CRETPW@127.0.0.1:\(server.port)/missing.bin"
        let json = try CLIProcess(["download", "--json", "--verbose", "--state-dir", directory.file("state").path, secret],
                                  directory: directory.url)
        #expect(await json.waitForExit() == 1, "\(json.transcript)")
        #expect(!json.transcript.contains("S3CRETPW"), "\(json.transcript)")
        #expect(json.transcript.contains("alice:***@127.0.0.1"), "\(json.transcript)")
        let text = try CLIProcess(["download", "--state-dir", directory.file("state").path, secret], directory: directory.url)
        #expect(await text.waitForExit() == 1, "\(text.transcript)")
        #expect(!text.transcript.contains("S3CRETPW") && text.standardError.contains("Error: http://alice:***@"), "\(text.transcript)")
        // The request still carried the credentials.
        #expect(server.requests.first?.headers["authorization"] == "Basic " + Data("alice:S3CRETPW".utf8).base64EncodedString())
    }

    /// `-o -`: the completed line does not name the staging file, which is deleted right after.
    @Test func standardOutputSaysWhereTheFileWent() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        let cli = try CLIProcess(["download", "--state-dir", directory.file("state").path, "-o", "-", Self.url(server)],
                                 directory: directory.url)
        #expect(await cli.waitForExit() == 0, "\(cli.standardError)")
        #expect(cli.standardError.contains("completed and verified; writing it to stdout"), "\(cli.standardError)")
        #expect(!cli.standardError.contains(directory.file("state").path), "\(cli.standardError)")
    }

    /// A rerun refused with 73 (a file no run of ours completed is there) leaves no lock file or
    /// job directory behind. (A file an earlier run completed is checked with the server instead:
    /// DownloadCommandTests.)
    @Test func aRefusedRerunLeavesNothingBehind() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let directory = try F.Directory()
        try Data("someone else's".utf8).write(to: directory.file("x.bin"))
        let arguments = ["download", "--state-dir", directory.file("state").path, "-o", "x.bin", Self.url(server)]
        let second = try CLIProcess(arguments, directory: directory.url)
        #expect(await second.waitForExit() == 73, "\(second.transcript)")
        #expect(second.standardError.contains("already exists; delete it to download again"), "\(second.transcript)")
        #expect(Self.jobDirectories(directory).isEmpty, "\(Self.jobDirectories(directory))")
    }

    /// No usable home and no state directory given: the error says how to name one.
    @Test(.enabled(if: F.isRoot, "needs root to run as nobody"))
    func noUsableHomeSaysHowToNameAStateDirectory() throws {
        let result = try BuiltProducts.run("reachability", ["download", "-o", "/tmp/never.bin", "http://127.0.0.1:9/x"],
                                           prefix: ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"],
                                           environment: ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent"])
        #expect(result.status == 73, "\(result)")
        #expect(result.standardError.contains("--state-dir") && result.standardError.contains("REACHABILITY_STATE_DIR"), "\(result)")
    }
}
