import Foundation
import LinuxSystem
import Testing
@testable import ReachabilityCLI
@testable import ResumableDownloads
import TestSupport

/// A local attacker against `reachability download` run as root: links, FIFOs, hard links and
/// files planted in a shared download directory, unsafe or foreign state directories, records
/// planted in the state directory, a file created at the destination during the download, and a
/// second process writing the same destination. Each test asserts a correct file or a clear
/// error with a non-zero exit, and that nothing outside the destination and the state directory
/// changed (the "victim" file keeps its bytes).
@Suite("Local attacker (built binary, root)", .serialized,
       .enabled(if: DownloadFixtures.isRoot, "planting files as another user needs root"))
struct LocalAttackerTests: DownloadScenarios {

    static let content = F.randomData(count: 3 << 20 + 11, seed: 77)
    static let etag = "\"a1\""
    /// The attacker: nobody.
    static let attacker: UInt32 = 65534

    /// A world-writable sticky directory (like /tmp) with a root-owned victim file beside it.
    struct SharedFolder {
        let base: F.Directory
        var shared: URL { base.file("shared") }
        var victim: URL { base.file("victim") }
        var state: URL { base.file("state") }
        init() throws {
            base = try F.Directory("attack")
            try FileManager.default.createDirectory(at: shared, withIntermediateDirectories: false)
            chmod(shared.path, 0o1777)
            try Data("the victim's bytes".utf8).write(to: victim)
        }
        var victimIsIntact: Bool { FileManager.default.contents(atPath: victim.path) == Data("the victim's bytes".utf8) }
        /// Plants `name` in the shared folder as the attacker would (owned by nobody).
        func plantLink(_ name: String, to target: URL) {
            symlink(target.path, shared.appendingPathComponent(name).path)
            lchown(shared.appendingPathComponent(name).path, LocalAttackerTests.attacker, LocalAttackerTests.attacker)
        }
    }

    func honestServer() throws -> Server {
        try Server { request, _ in .honest(request, content: Self.content, etag: Self.etag) }
    }

    func download(_ server: Server, to destination: URL, state: URL, in directory: URL,
                  extra: [String] = [], environment: [String: String] = [:]) async throws -> (Int32?, CLIProcess) {
        let cli = try CLIProcess(["download", "--state-dir", state.path, "-o", destination.path] + extra
                                 + [server.url().absoluteString], directory: directory, environment: environment)
        return (await cli.waitForExit(), cli)
    }

    /// Downloads to out.bin in the shared folder and expects the refusal (exit 73, `saying` on
    /// stderr) with the victim intact. Returns the server, to count what it was asked.
    @discardableResult
    func expectRefusedPart(in folder: SharedFolder, saying message: String,
                           sourceLocation: SourceLocation = #_sourceLocation) async throws -> Server {
        let server = try honestServer()
        let (status, cli) = try await download(server, to: folder.shared.appendingPathComponent("out.bin"), state: folder.state,
                                               in: folder.base.url)
        #expect(status == 73, "\(cli.transcript)", sourceLocation: sourceLocation)
        #expect(cli.standardError.contains(message), "\(cli.transcript)", sourceLocation: sourceLocation)
        #expect(folder.victimIsIntact, sourceLocation: sourceLocation)
        return server
    }

    @Test func aPlantedPartLinkIsNeverFollowed() async throws {
        let folder = try SharedFolder()
        folder.plantLink("out.bin.part", to: folder.victim)
        try await expectRefusedPart(in: folder, saying: "out.bin.part is a symbolic link")
        #expect(!FileManager.default.fileExists(atPath: folder.shared.appendingPathComponent("out.bin").path))
    }

    @Test(arguments: ["fifo", "hardlink", "foreign"])
    func aPartThatIsNotOurRegularFileIsRefused(_ kind: String) async throws {
        let folder = try SharedFolder()
        let part = folder.shared.appendingPathComponent("out.bin.part").path
        switch kind {
        case "fifo": mkfifo(part, 0o666)
        case "hardlink": link(folder.victim.path, part)
        default:
            FileManager.default.createFile(atPath: part, contents: Data("attacker".utf8))
            chown(part, Self.attacker, Self.attacker)
        }
        let server = try await expectRefusedPart(in: folder, saying: "out.bin.part")
        #expect(server.requests.isEmpty, "nothing is fetched for a destination that cannot be written")
    }

    @Test(arguments: ["worldWritable", "foreign", "foreignLink"])
    func anUnsafeStateDirectoryIsRefusedWithTheFix(_ kind: String) async throws {
        let folder = try SharedFolder()
        var state = folder.state
        switch kind {
        case "worldWritable":
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: false)
            chmod(state.path, 0o777)
        case "foreign":
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: false)
            chown(state.path, Self.attacker, Self.attacker)
        default:
            try FileManager.default.createDirectory(at: folder.base.file("real-state"), withIntermediateDirectories: false)
            folder.plantLink("state-link", to: folder.base.file("real-state"))
            state = folder.shared.appendingPathComponent("state-link")
        }
        let server = try honestServer()
        let (status, cli) = try await download(server, to: folder.base.file("out.bin"), state: state, in: folder.base.url)
        #expect(status == 78, "\(cli.transcript)")
        #expect(cli.standardError.contains("unsafe state directory"), "\(cli.transcript)")
        #expect(cli.standardError.contains(kind == "worldWritable" ? "chmod 700" : kind == "foreign" ? "owned by uid" : "symbolic link"),
                "\(cli.transcript)")
        #expect(server.requests.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: folder.base.file("real-state/downloads").path))
        #expect(!FileManager.default.fileExists(atPath: state.appendingPathComponent("downloads").path))
    }

    @Test func theEnvironmentVariableNamesTheStateDirectory() async throws {
        let folder = try SharedFolder()
        let server = try honestServer()
        let cli = try CLIProcess(["download", "-o", folder.base.file("out.bin").path, server.url().absoluteString],
                                 directory: folder.base.url, environment: ["REACHABILITY_STATE_DIR": folder.state.path])
        #expect(await cli.waitForExit() == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: folder.base.file("out.bin")) == F.sha256(Self.content))
        #expect(FileManager.default.fileExists(atPath: folder.state.appendingPathComponent("downloads").path))
    }

    /// Records planted in the job's state directory: one for another destination (the victim),
    /// one that does not parse, one with a negative offset. Only the matching download runs;
    /// the invalid ones are moved aside once.
    @Test func onlyTheMatchingRecordIsActedOnAndBadOnesAreMovedAside() async throws {
        let folder = try SharedFolder()
        let server = try honestServer()
        let destination = folder.base.file("out.bin")
        let job = DownloadCommand.Job(url: server.url(), destination: destination)
        let jobDirectory = DownloadStateDirectory.jobDirectory(for: job, in: folder.state)
        let checked = try CheckedDirectory.open(jobDirectory.path, policy: .privateState, creating: true)
        var planted = ResumeRecord(id: UUID(), url: server.url(), destination: folder.victim, expectedSHA256: nil,
                                   totalLength: nil, allowsExpensive: true)
        try planted.write(to: checked)
        planted = ResumeRecord(id: UUID(), url: server.url(), destination: destination, expectedSHA256: nil,
                               totalLength: nil, allowsExpensive: true)
        planted.verifiedOffset = -5
        try checked.writeAtomically(Array(try ResumeRecord.encoder().encode(planted)), to: ResumeRecord.fileName(for: planted.id))
        try checked.writeAtomically(Array("{not json".utf8), to: "\(UUID().uuidString).json")

        let (status, cli) = try await download(server, to: destination, state: folder.state, in: folder.base.url)
        #expect(status == 0, "\(cli.transcript)")
        #expect(F.sha256(fileAt: destination) == F.sha256(Self.content))
        #expect(folder.victimIsIntact)
        #expect(!FileManager.default.fileExists(atPath: folder.victim.path + ".part"))
        let names = try FileManager.default.contentsOfDirectory(atPath: jobDirectory.path)
        #expect(names.filter { $0.hasSuffix(".json.bad") }.count == 2, "\(names)")
        // (completed.json is this download's completion marker, issue 34.)
        #expect(names.filter { $0.hasSuffix(".json") && $0 != "completed.json" }.count == 1,
                "the other destination's record is left alone: \(names)")
        #expect(server.requests.count == 1)
    }

    @Test func aFileCreatedAtTheDestinationDuringTheDownloadIsNeverReplaced() async throws {
        let folder = try SharedFolder()
        let destination = folder.shared.appendingPathComponent("out.bin")
        let server = try Server { request, index in
            // The attacker (or another program) creates the destination while the body flows.
            if index == 0 { FileManager.default.createFile(atPath: destination.path, contents: Data("was here first".utf8)) }
            return .honest(request, content: Self.content, etag: Self.etag)
        }
        let (status, cli) = try await download(server, to: destination, state: folder.state, in: folder.base.url)
        #expect(status == 73, "\(cli.transcript)")
        #expect(cli.standardError.contains("appeared during the download"), "\(cli.transcript)")
        #expect(FileManager.default.contents(atPath: destination.path) == Data("was here first".utf8))
        // The verified bytes are kept for a rerun once the file is moved away.
        #expect(F.sha256(fileAt: URL(fileURLWithPath: destination.path + ".part")) == F.sha256(Self.content))
        unlink(destination.path)
        let (again, rerun) = try await download(server, to: destination, state: folder.state, in: folder.base.url)
        #expect(again == 0, "\(rerun.transcript)")
        #expect(F.sha256(fileAt: destination) == F.sha256(Self.content))
        // The rerun fetched nothing (every byte was stored and verified) or only the overlap it
        // compares before completing (one connection).
        let rerunRequests = server.requests.dropFirst()
        #expect(rerunRequests.allSatisfy { $0.rangeStart == Int64(Self.content.count) - ResumeOverlap.maximum },
                "\(rerunRequests.map(\.headers))")
    }

    @Test func twoProcessesNeverWriteOneDestination() async throws {
        let folder = try SharedFolder()
        let destination = folder.base.file("out.bin")
        let server = try Server { request, index in
            // The first transfer stalls half way, holding the destination while the second starts.
            var reply = Server.Reply.honest(request, content: Self.content, etag: Self.etag)
            if index == 0 { reply.stallAfter = Self.content.count / 2 }
            return reply
        }
        let environment = ["REACHABILITY_DOWNLOAD_STALL_TIMEOUT": "2"]
        let first = try CLIProcess(["download", "--json", "--state-dir", folder.state.path, "-o", destination.path,
                                    server.url().absoluteString], directory: folder.base.url, environment: environment)
        #expect(await F.wait { server.requests.count >= 1 })
        // Another state directory: only the lock on the destination itself can stop it.
        let (status, second) = try await download(server, to: destination, state: folder.base.file("other-state"),
                                                  in: folder.base.url, environment: environment)
        #expect(status == 75, "\(second.transcript)")
        #expect(second.standardError.contains("another process is writing"), "\(second.transcript)")
        #expect(FileManager.default.fileExists(atPath: destination.path + ".part"), "the refused run leaves the other's file alone")
        #expect(await first.waitForExit() == 0, "\(first.transcript)")
        #expect(F.sha256(fileAt: destination) == F.sha256(Self.content))
    }
}
