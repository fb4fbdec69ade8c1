import Foundation
import Glibc
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization
import Testing
import TestSupport

/// Resumable uploads (`DownloadAgent.upload`) against upload_server.py on 127.0.0.1 (IETF
/// draft-05 and plain), with the path scripted: cut mid-upload, the upload resumes from the
/// server's offset and the stored file is byte-identical; lying servers, plain servers and bad
/// files get clear errors.
@Suite("Resumable uploads on loopback", .serialized,
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct UploadLoopbackTests: DownloadScenarios {
    typealias Fixture = ExchangeTests.Fixture

    /// Records events and the highest progress.
    final class Recorder: Sendable {
        let events = Mutex<[UploadEvent]>([])
        let sent = Atomic<Int64>(0)
        var handlers: UploadHandlers {
            UploadHandlers(progress: { sent, _ in self.sent.store(sent, ordering: .relaxed) },
                           event: { event in self.events.withLock { $0.append(event) } })
        }
        var all: [UploadEvent] { events.withLock { $0 } }
    }

    static func file(_ fixture: Fixture, _ name: String, count: Int, seed: UInt64) throws -> (URL, Data) {
        try fixture.state.randomFile(name, count: count, seed: seed)
    }

    /// Starts `upload`, cuts the path once `sent` bytes went out, restores it after `outage`.
    static func cut(_ fixture: Fixture, _ recorder: Recorder, at sent: Int64, for outage: Duration = .milliseconds(200)) -> Task<Void, Never> {
        Task {
            _ = await F.wait(timeout: .seconds(30)) { recorder.sent.load(ordering: .relaxed) >= sent }
            fixture.paths.yield(ScriptedPaths.offline)
            try? await holdOutage(for: outage)
            fixture.paths.yield(ScriptedPaths.online())
        }
    }

    static func options(_ choice: UploadProtocol, method: HTTPMethod = .post, allowsPlainRetry: Bool = false) -> UploadOptions {
        var options = UploadOptions()
        options.protocolChoice = choice
        options.method = method
        options.allowsPlainRetry = allowsPlainRetry
        return options
    }

    /// Uploads a file of `count` bytes to `path` while the path is cut once `cutAt` bytes went out.
    static func uploadThroughACut(_ fixture: Fixture, count: Int, seed: UInt64, to path: String, options: UploadOptions,
                                  cutAt: Int64 = 2 << 20) async throws -> (UploadResult, Data) {
        let (file, content) = try Self.file(fixture, "upload-\(seed)", count: count, seed: seed)
        let recorder = Recorder()
        let cut = Self.cut(fixture, recorder, at: cutAt)
        defer { cut.cancel() }
        let result = try await fixture.agent.upload(fileAt: file.path, to: fixture.server.url(path), options: options,
                                                    handlers: recorder.handlers)
        return (result, content)
    }

    @Test func draftUploadCompletes() async throws {
        let fixture = try Fixture()
        let (file, content) = try Self.file(fixture, "storm.jpg", count: 4 << 20, seed: 1)
        let recorder = Recorder()
        let result = try await fixture.agent.upload(fileAt: file.path, to: fixture.server.url("ietf/"), handlers: recorder.handlers)
        #expect(result.protocolUsed == .ietf)
        #expect(result.bytesResent == 0)
        let created = recorder.all.compactMap { if case .created(let url) = $0 { url } else { nil } }
        let id = try #require(created.first?.lastPathComponent)
        #expect(fixture.server.stored(id) == content)
        #expect(try fixture.server.bodyBytesRead() == content.count)
        await fixture.agent.shutdown()
    }

    @Test(arguments: [UploadProtocol.auto, .ietf])
    func aCutPathResumesFromTheServersOffset(choice: UploadProtocol) async throws {
        // 8 MiB read at 4 MiB/s, cut once 1 MiB is handed over: loopback's socket buffers hold a
        // few MiB, and the cut must land while the server still has seconds of reading left,
        // also on a loaded machine.
        let fixture = try Fixture(bytesPerSecond: 4 << 20)
        let (file, content) = try Self.file(fixture, "storm.jpg", count: 8 << 20, seed: 2)
        let recorder = Recorder()
        let cut = Self.cut(fixture, recorder, at: 1 << 20)
        let result = try await fixture.agent.upload(fileAt: file.path, to: fixture.server.url("ietf/"), options: Self.options(choice),
                                                    handlers: recorder.handlers)
        await cut.value
        let events = recorder.all
        #expect(events.contains(.interrupted(.networkConnectionLost)) || events.contains { if case .interrupted(let e) = $0 { e.errorCode == -1005 } else { false } },
                "\(events)")
        let resumedFrom = events.compactMap { if case .resumed(let offset) = $0 { offset } else { nil } }
        #expect(!resumedFrom.isEmpty, "\(events)")
        let id = try #require(events.compactMap { if case .created(let url) = $0 { url.lastPathComponent } else { nil } }.first)
        #expect(fixture.server.stored(id) == content, "the server's file differs")
        let read = try fixture.server.bodyBytesRead()
        #expect(read - content.count <= 1 << 20, "bytes read twice: \(read - content.count)")
        #expect(result.bytesResent <= 1 << 20 + 4 << 20, "handed to the socket twice: \(result.bytesResent)")
        await fixture.agent.shutdown()
    }

    @Test func aPlainServerLosesTheUploadWithoutResumeData() async throws {
        let fixture = try Fixture(bytesPerSecond: 8 << 20)
        await #expect {
            _ = try await Self.uploadThroughACut(fixture, count: 8 << 20, seed: 3, to: "plain/upload-3",
                                                 options: Self.options(.put, method: .put))
        } throws: { error in
            guard let failure = error as? UploadFailure else { return false }
            return failure.error.errorCode == -1005 && failure.resumeState == nil
        }
        await fixture.agent.shutdown()
    }

    @Test func aPlainPutIsSentAgainWhenAllowed() async throws {
        let fixture = try Fixture(bytesPerSecond: 8 << 20)
        let (result, content) = try await Self.uploadThroughACut(fixture, count: 6 << 20, seed: 4, to: "plain/upload-4",
                                                                 options: Self.options(.put, method: .put, allowsPlainRetry: true))
        #expect(result.response.statusCode == 201)
        #expect(fixture.server.stored("upload-4") == content)
        await fixture.agent.shutdown()
    }

    @Test(arguments: ["past-end", "backwards", "beyond", "forget"])
    func aLyingServerGetsAClearError(lie: String) async throws {
        let fixture = try Fixture(lie: lie, bytesPerSecond: 8 << 20)
        await #expect {
            _ = try await Self.uploadThroughACut(fixture, count: 6 << 20, seed: 5, to: "ietf/", options: Self.options(.ietf))
        } throws: { error in
            "\(error)".contains("the upload server reported")
        }
        await fixture.agent.shutdown()
    }

    /// A server that stays overloaded after it reset the upload's connection: the upload fails
    /// (the reset, then a 503 to every offset question) exactly as many times in a row as it was
    /// told to bear, then ends with resume data for the upload the server holds.
    @Test func anUploadGivesUpAfterItsFailuresWithResumeData() async throws {
        let fixture = try Fixture(bytesPerSecond: 8 << 20, resetAfter: 1 << 20, isBusyAfterReset: true)
        let (file, _) = try Self.file(fixture, "storm.jpg", count: 4 << 20, seed: 9)
        var options = Self.options(.ietf)
        options.maximumFailuresWithoutProgress = 5
        let recorder = Recorder()
        var failure: UploadFailure?
        do {
            let result = try await fixture.agent.upload(fileAt: file.path, to: fixture.server.url("ietf/"), options: options,
                                                        handlers: recorder.handlers)
            Issue.record("the upload completed against a busy server: \(result.response.statusCode)")
        } catch {
            failure = error
        }
        let ended = try #require(failure)
        #expect("\(ended.error)".contains("failed 5 times in a row"), "\(ended.error)")
        let created = try #require(recorder.all.compactMap { if case .created(let url) = $0 { url } else { nil } }.first)
        let resume = try #require(ended.resumeState, "no resume data")
        #expect(resume.uploadURL == created)
        #expect(resume.protocolInUse == .ietf)
        // One failure was the reset; each of the other four is a 503 the server counted.
        #expect(try fixture.server.busyAnswers() == 4)
        let interruptions = recorder.all.filter { if case .interrupted = $0 { true } else { false } }
        #expect(interruptions.count == 1, "only the reset broke a connection: \(recorder.all)")
        await fixture.agent.shutdown()
    }

    @Test func aFileChangedMidUploadEndsIt() async throws {
        let fixture = try Fixture(bytesPerSecond: 8 << 20)
        let (file, _) = try Self.file(fixture, "growing.log", count: 6 << 20, seed: 6)
        let recorder = Recorder()
        let writer = Task {
            _ = await F.wait(timeout: .seconds(30)) { recorder.sent.load(ordering: .relaxed) >= 1 << 20 }
            let handle = try FileHandle(forWritingTo: file)
            try handle.seekToEnd()
            try handle.write(contentsOf: Data("one more line\n".utf8))
            try handle.close()
        }
        await #expect {
            _ = try await fixture.agent.upload(fileAt: file.path, to: fixture.server.url("ietf/"), options: Self.options(.ietf),
                                               handlers: recorder.handlers)
        } throws: { error in
            "\(error)".contains("the file changed while it was being sent")
        }
        try await writer.value
        await fixture.agent.shutdown()
    }

    @Test func badFilesGetClearErrors() async throws {
        let fixture = try Fixture()
        let fifo = fixture.state.url("pipe").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let unreadable = fixture.state.url("secret")
        try Data("x".utf8).write(to: unreadable)
        chmod(unreadable.path, 0)
        var cases: [(String, String)] = [
            (fixture.state.url("missing").path, "No such file"),
            (fixture.state.url.path, "a directory"),
            (fifo, "a FIFO"),
        ]
        if geteuid() != 0 { cases.append((unreadable.path, "denied")) }   // root reads anything
        for (path, words) in cases {
            await #expect {
                _ = try await fixture.agent.upload(fileAt: path, to: fixture.server.url("ietf/"))
            } throws: { error in
                "\(error)".contains(words)
            }
        }
        await fixture.agent.shutdown()
    }
}
