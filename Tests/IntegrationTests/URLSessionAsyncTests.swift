import Foundation
import FoundationNetworking
import ResumableDownloads
import Synchronization
import Testing
@testable import ResumableURLSession
import TestSupport

/// The Swift-concurrency and URLRequest forms (issue 17) on a default session, against a
/// scripted server on loopback: download(from:)/download(for:)/download(resumeFrom:), the
/// WWDC cancellation pattern, request headers and methods, completion handlers.
@Suite("ResumableURLSession: async and URLRequest forms")
struct URLSessionAsyncTests: DownloadScenarios {
    static let content = F.randomData(count: 2 << 20, seed: 1717)
    static let etag = "\"v1\""

    final class Fixture: Sendable {
        let server: DownloadTestHTTPServer
        let directory: F.Directory
        let client: LoopbackSession

        /// `slowAfter`: the first answer stalls after that many bytes (a download to cancel).
        init(slowAfter: Int? = nil) throws {
            server = try DownloadTestHTTPServer { request, index in
                var reply = DownloadTestHTTPServer.Reply.honest(request, content: URLSessionAsyncTests.content, etag: URLSessionAsyncTests.etag)
                if let slowAfter, index == 0 {
                    // Half, a pause (the engine reports progress when bytes arrive, at most every
                    // 100 ms), the other half, then silence: a download to cancel midway.
                    reply.pauseAfter = slowAfter / 2
                    reply.pause = .milliseconds(200)
                    reply.stallAfter = slowAfter
                }
                return reply
            }
            directory = try F.Directory("urlasync")
            client = LoopbackSession(state: directory.file("state"), finished: directory.file("finished"))
        }

        deinit { server.stop() }
    }

    @Test func downloadFromReturnsAFileThatIsTheCallers() async throws {
        let fixture = try Fixture()
        let (file, response) = try await fixture.client.session.download(from: fixture.server.url("song.mp3"))
        defer { try? FileManager.default.removeItem(at: file) }
        #expect(F.sha256(fileAt: file) == F.sha256(Self.content))
        #expect(file.path.hasPrefix(FileManager.default.temporaryDirectory.path), "moved out of the session's directory: \(file.path)")
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200 && http.url == fixture.server.url("song.mp3"))
        #expect(http.value(forHTTPHeaderField: "Content-Length") == "\(Self.content.count)")
        #expect(fixture.client.delegate.calls.isEmpty, "the delegate is not told of an awaited download: \(fixture.client.delegate.transcript)")
        await fixture.client.shutDown()
    }

    @Test func downloadForSendsTheRequestsHeadersAndRefusesOtherMethods() async throws {
        let fixture = try Fixture()
        var request = URLRequest(url: fixture.server.url("api/file"))
        request.setValue("Bearer token-1", forHTTPHeaderField: "Authorization")
        request.timeoutInterval = 30
        _ = try await fixture.client.session.download(for: request)
        #expect(fixture.server.requests.first?.headers["authorization"] == "Bearer token-1")
        var post = URLRequest(url: fixture.server.url("api/file"))
        post.httpMethod = "POST"
        await #expect(throws: URLError.self) { _ = try await fixture.client.session.download(for: post) }
        do {
            _ = try await fixture.client.session.download(for: post)
        } catch let error as URLError {
            #expect(error.code == .unsupportedURL && error.localizedDescription.contains("POST"))
        }
        var ranged = URLRequest(url: fixture.server.url("api/file"))
        ranged.setValue("bytes=0-10", forHTTPHeaderField: "Range")
        do {
            _ = try await fixture.client.session.download(for: ranged)
            Issue.record("a Range header was accepted")
        } catch let error as URLError {
            #expect(error.localizedDescription.contains("Range"))
        }
        #expect(fixture.server.requests.count == 1, "refused requests never reach the server")
        await fixture.client.shutDown()
    }

    /// The WWDC pattern: cancel the awaiting task, get URLError.cancelled with resume data, and
    /// finish the file from it.
    @Test func cancellingTheSwiftTaskThrowsCancelledWithResumeData() async throws {
        let fixture = try Fixture(slowAfter: 1 << 20)
        let session = fixture.client.session
        let url = fixture.server.url("big.iso")
        let work = Task { try await session.download(from: url) }
        _ = await F.wait(timeout: .seconds(20)) {
            let tasks = await session.allTasks
            return (tasks.first?.countOfBytesReceived ?? 0) >= 512 << 10
        }
        work.cancel()
        let error: URLError
        do {
            _ = try await work.value
            Issue.record("finished despite the cancel")
            return
        } catch let thrown as URLError {
            error = thrown
        }
        #expect(error.code == .cancelled)
        let resumeData = try #require(error.downloadTaskResumeData, "resume data in userInfo")
        let (file, _) = try await session.download(resumeFrom: resumeData)
        defer { try? FileManager.default.removeItem(at: file) }
        #expect(F.sha256(fileAt: file) == F.sha256(Self.content))
        #expect((fixture.server.requests.last?.rangeStart ?? 0) > 0, "continued from the stored bytes: \(fixture.server.requests.map(\.rangeStart))")
        await fixture.client.shutDown()
    }

    @Test func aCancelBeforeTheTaskExistsStillCancels() async throws {
        let fixture = try Fixture(slowAfter: 1 << 20)
        let session = fixture.client.session
        let url = fixture.server.url("big.iso")
        let work = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await session.download(from: url)
        }
        do {
            _ = try await work.value
            Issue.record("finished despite the cancel")
        } catch let error as URLError {
            #expect(error.code == .cancelled)
        }
        await fixture.client.shutDown()
    }

    @Test func completionHandlersGetTheFileInsteadOfTheDelegate() async throws {
        let fixture = try Fixture()
        let outcome = Mutex<(sha: String?, status: Int?, existedAfter: URL?)?>(nil)
        let task = fixture.client.session.downloadTask(with: fixture.server.url("song.mp3")) { location, response, error in
            #expect(error == nil)
            outcome.withLock { $0 = (location.flatMap(F.sha256(fileAt:)), (response as? HTTPURLResponse)?.statusCode, location) }
        }
        task.resume()
        #expect(await F.wait(timeout: .seconds(20)) { outcome.withLock { $0 } != nil })
        let result = try #require(outcome.withLock { $0 })
        #expect(result.sha == F.sha256(Self.content) && result.status == 200)
        #expect(await F.wait(timeout: .seconds(5)) { !FileManager.default.fileExists(atPath: result.existedAfter?.path ?? "/") },
                "deleted once the handler returned, as on Apple platforms")
        #expect(fixture.client.delegate.calls.isEmpty, "\(fixture.client.delegate.transcript)")
        // A failure goes to the handler too.
        let failed = Mutex<URLError?>(nil)
        var bad = URLRequest(url: fixture.server.url("x"))
        bad.httpMethod = "DELETE"
        fixture.client.session.downloadTask(with: bad) { _, _, error in failed.withLock { $0 = error as? URLError } }.resume()
        #expect(await F.wait(timeout: .seconds(10)) { failed.withLock { $0 } != nil })
        #expect(failed.withLock { $0 }?.code == .unsupportedURL)
        await fixture.client.shutDown()
    }

    @Test func tasksCarryTheirRequestAndPriority() async throws {
        let fixture = try Fixture()
        var request = URLRequest(url: fixture.server.url("a"))
        request.setValue("1", forHTTPHeaderField: "X-Test")
        let task = fixture.client.session.downloadTask(with: request)
        #expect(task.originalRequest?.value(forHTTPHeaderField: "X-Test") == "1")
        #expect(task.priority == ResumableDownloadTask.defaultPriority)
        task.priority = 7
        #expect(task.priority == 1, "held to 0...1")
        #expect(task.countOfBytesClientExpectsToReceive == -1 && task.earliestBeginDate == nil)
        task.cancel()
        await fixture.client.shutDown()
    }
}
