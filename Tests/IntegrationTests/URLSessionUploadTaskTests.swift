import Foundation
import Glibc
import FoundationNetworking
import LinuxReachability
import Synchronization
import Testing
@testable import ResumableURLSession
import TestSupport

/// Data and upload tasks of a real session (engine, libcurl) against upload_server.py on
/// loopback, with a scripted path.
@Suite("ResumableURLSession data and upload tasks on loopback", .serialized,
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct URLSessionUploadTaskTests {
    /// A session on loopback with a data delegate that records the body's progress.
    struct Fixture {
        let directory: ScratchDirectory
        let session: ResumableURLSession
        let delegate = ProgressDelegate()
        let paths: AsyncStream<NetworkPath>.Continuation

        init() throws {
            directory = try ScratchDirectory("upload-task")
            var configuration = ResumableURLSession.Configuration(stateDirectory: directory.url("state"))
            configuration.timeoutIntervalForRequest = 10
            let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
            continuation.yield(ScriptedPaths.online())
            paths = continuation
            session = ResumableURLSession(configuration: configuration, delegate: delegate, delegateQueue: nil,
                                          pathSource: .stream(stream))
        }

        func shutDown() async {
            session.invalidateAndCancel()
            await session.waitUntilInvalidated()
        }
    }

    final class ProgressDelegate: ResumableURLSessionDataDelegate {
        private let state = Mutex<(sent: [Int64], expected: Set<Int64>, body: Data, done: Set<Int>, errors: [Int: URLError])>(([], [], Data(), [], [:]))

        var sentTotals: [Int64] { state.withLock { $0.sent } }
        var expected: Set<Int64> { state.withLock { $0.expected } }
        var body: Data { state.withLock { $0.body } }
        func error(of task: ResumableDataTask) -> URLError? { state.withLock { $0.errors[task.taskIdentifier] } }

        func waitForCompletion(of task: ResumableDataTask) async -> Bool {
            await Polling.wait(timeout: .seconds(20)) { self.state.withLock { $0.done.contains(task.taskIdentifier) } }
        }

        func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didSendBodyData bytesSent: Int64,
                        totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
            state.withLock {
                $0.sent.append(totalBytesSent)
                $0.expected.insert(totalBytesExpectedToSend)
            }
        }

        func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive data: Data) {
            state.withLock { $0.body.append(data) }
        }

        func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?) {
            state.withLock {
                $0.done.insert(task.taskIdentifier)
                if let error = error as? URLError { $0.errors[task.taskIdentifier] = error }
            }
        }
    }

    static func put(_ url: URL) -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = "PUT"
        return request
    }

    @Test func anUploadFromAFileReportsProgressAndTheServersAnswer() async throws {
        let server = try UploadTestServer()
        defer { server.stop() }
        let fixture = try Fixture()
        let content = DownloadFixtures.randomData(count: 3 << 20, seed: 2801)
        let photo = fixture.directory.url("photo.jpg")
        try content.write(to: photo)
        let task = fixture.session.uploadTask(with: Self.put(server.url("plain/photo.jpg")), fromFile: photo)
        task.resume()
        #expect(await fixture.delegate.waitForCompletion(of: task))
        #expect(fixture.delegate.error(of: task) == nil, "\(String(describing: task.error))")
        #expect((task.response as? HTTPURLResponse)?.statusCode == 201)
        #expect(String(decoding: fixture.delegate.body, as: UTF8.self) == "stored \(content.count) bytes\n")
        #expect(server.stored("photo.jpg") == content, "the server's file is the file")
        let totals = fixture.delegate.sentTotals
        #expect(!totals.isEmpty && zip(totals, totals.dropFirst()).allSatisfy { $0 < $1 } && totals.last == Int64(content.count),
                "didSendBodyData totals: \(totals)")
        #expect(fixture.delegate.expected == [Int64(content.count)])
        #expect(task.countOfBytesSent == Int64(content.count) && task.countOfBytesExpectedToSend == Int64(content.count))
        await fixture.shutDown()
    }

    @Test func theAsyncFormsSendDataAndReturnTheAnswer() async throws {
        let server = try UploadTestServer()
        defer { server.stop() }
        let fixture = try Fixture()
        var request = URLRequest(url: server.url("echo"))
        request.httpMethod = "POST"
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        let (data, response) = try await fixture.session.upload(for: request, from: Data("weather?".utf8))
        let echo = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(echo["method"] as? String == "POST" && echo["length"] as? Int == 8)
        #expect((echo["headers"] as? [String: String])?["content-type"] == "text/plain")
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Echo") == "yes")

        let (missing, notFound) = try await fixture.session.data(from: server.url("nothing"))
        #expect((notFound as? HTTPURLResponse)?.statusCode == 404 && missing.isEmpty, "a 404 is a response")
        await fixture.shutDown()
    }

    @Test func aFileThatCannotBeSentEndsTheTaskWithWhatIsWrong() async throws {
        let server = try UploadTestServer()
        defer { server.stop() }
        let fixture = try Fixture()
        let fifo = fixture.directory.url("fifo")
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let cases: [(URL, URLError.Code)] = [
            (fixture.directory.url("missing.jpg"), .fileDoesNotExist),
            (fixture.directory.url, .fileIsDirectory),
            (fifo, .noPermissionsToReadFile),
        ]
        for (file, code) in cases {
            do {
                _ = try await fixture.session.upload(for: Self.put(server.url("plain/x")), fromFile: file)
                Issue.record("\(file.path) was sent")
            } catch let error as URLError {
                #expect(error.code == code, "\(file.path): \(error.localizedDescription)")
                #expect(error.localizedDescription.contains(file.path), "the message names the file: \(error.localizedDescription)")
            }
        }
        #expect(try server.requestCount() == 0, "nothing reached the server")
        await fixture.shutDown()
    }

    /// Another user's file (root's 0600 file, the program running as nobody): the task ends with
    /// `noPermissionsToReadFile` naming the file, and nothing reaches the server.
    @Test(.needsRoot) func anotherUsersFileEndsTheTaskWithNoPermissions() async throws {
        let server = try UploadTestServer()
        defer { server.stop() }
        let shared = try ScratchDirectory("upload-task-shared", permissions: 0o755)
        let secret = shared.url("secret.jpg")
        try Data("root's".utf8).write(to: secret)
        #expect(chmod(secret.path, 0o600) == 0)
        let mine = try ScratchDirectory("upload-task-nobody", permissions: 0o755)
        #expect(chown(mine.path, 65534, 65534) == 0)
        let probe = try ProbeProcess(["--state-dir", mine.url("state").path, "--url", server.url("ietf/").absoluteString,
                                      "--upload", secret.path], namespace: nil,
                                     prefix: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        defer { probe.kill() }
        let completed = try #require(await probe.waitForCall("completed", task: 1), "\(probe.transcript)")
        #expect(completed.object["code"]?.int == URLError.Code.noPermissionsToReadFile.rawValue, "\(probe.transcript)")
        #expect(try server.requestCount() == 0, "nothing reached the server")
    }

    @Test func aPathLostUnderARequestEndsItAtOnce() async throws {
        let server = try UploadTestServer()
        defer { server.stop() }
        let fixture = try Fixture()
        let task = fixture.session.dataTask(with: server.url("hold"))
        task.resume()
        #expect(await Polling.wait(timeout: .seconds(10)) { (try? server.requestCount()) == 1 })
        let cut = ContinuousClock.now
        fixture.paths.yield(ScriptedPaths.offline)
        #expect(await fixture.delegate.waitForCompletion(of: task))
        let elapsed = ContinuousClock.now - cut
        #expect(fixture.delegate.error(of: task)?.code == .networkConnectionLost)
        #expect(elapsed < .milliseconds(500), "-1005 after \(elapsed)")
        await fixture.shutDown()
    }
}
