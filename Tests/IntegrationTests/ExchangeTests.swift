import Foundation
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization
import Testing
import TestSupport

/// One-shot exchanges (`DownloadAgent.exchange`) against upload_server.py on 127.0.0.1, with the
/// path scripted: methods, headers, bodies from memory and from a file range, upload progress,
/// and the path going mid-request (-1005 at once) or missing at the start (-1009, or a wait).
@Suite("HTTP exchanges on loopback", .serialized,
       .enabled(if: UploadTestServer.isAvailable, "python3 is not installed"))
struct ExchangeTests: DownloadScenarios {

    struct Fixture {
        let server: UploadTestServer
        let state: ScratchDirectory
        let agent: DownloadAgent
        let paths: AsyncStream<NetworkPath>.Continuation

        init(initialPath: NetworkPath = ScriptedPaths.online(), lie: String? = nil, bytesPerSecond: Int? = nil,
             resetAfter: Int? = nil, isBusyAfterReset: Bool = false) throws {
            server = try UploadTestServer(lie: lie, bytesPerSecond: bytesPerSecond, resetAfter: resetAfter,
                                          isBusyAfterReset: isBusyAfterReset)
            state = try ScratchDirectory("exchange")
            let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
            continuation.yield(initialPath)
            paths = continuation
            agent = try DownloadAgent(configuration: F.configuration(state: state.url("state")), paths: stream)
        }
    }

    static func echo(_ response: ExchangeResponse) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: response.body) as? [String: Any] ?? [:]
    }

    @Test func getReturnsHeadAndBody() async throws {
        let fixture = try Fixture()
        let heads = Mutex<[Int]>([])
        let response = try await fixture.agent.exchange(
            ExchangeRequest(url: fixture.server.url("echo?q=storm"), headerFields: ["X-Test: yes"]),
            handlers: ExchangeHandlers(response: { head in heads.withLock { $0.append(head.statusCode) } }))
        #expect(response.head.statusCode == 200)
        #expect(response.head["x-echo"] == "yes")
        #expect(heads.withLock { $0 } == [200])
        let echo = try Self.echo(response)
        #expect(echo["method"] as? String == "GET")
        #expect(echo["path"] as? String == "/echo?q=storm")
        #expect((echo["headers"] as? [String: String])?["x-test"] == "yes")
        await fixture.agent.shutdown()
    }

    @Test(arguments: [HTTPMethod.put, .post, .patch, HTTPMethod("DELETE")!])
    func sendsABodyFromMemory(method: HTTPMethod) async throws {
        let fixture = try Fixture()
        let body = F.randomData(count: 3 << 20, seed: 7)
        let progress = Mutex<[Int64]>([])
        let response = try await fixture.agent.exchange(
            ExchangeRequest(method: method, url: fixture.server.url("echo"), headerFields: ["Content-Type: application/octet-stream"],
                            body: .data(body)),
            handlers: ExchangeHandlers(bytesSent: { sent, expected in
                #expect(expected == Int64(body.count))
                progress.withLock { $0.append(sent) }
            }))
        let echo = try Self.echo(response)
        #expect(echo["method"] as? String == method.rawValue)
        #expect(echo["length"] as? Int == body.count)
        #expect(echo["sha256"] as? String == F.sha256(body))
        #expect(response.bytesSent == Int64(body.count))
        let sent = progress.withLock { $0 }
        #expect(sent.last == Int64(body.count))
        #expect(zip(sent, sent.dropFirst()).allSatisfy { $0 < $1 })
        await fixture.agent.shutdown()
    }

    @Test func sendsAFileRange() async throws {
        let fixture = try Fixture()
        let content = F.randomData(count: 1 << 20, seed: 9)
        let file = fixture.state.url("photo.jpg")
        try content.write(to: file)
        let descriptor = try FileDescriptor.openForReading(file.path)
        defer { descriptor.close() }
        let range = ExchangeFileRange(descriptor: descriptor, offset: 1000, length: 500_000, identity: try descriptor.status())
        let response = try await fixture.agent.exchange(
            ExchangeRequest(method: .post, url: fixture.server.url("echo"), body: .file(range)))
        let echo = try Self.echo(response)
        #expect(echo["length"] as? Int == 500_000)
        #expect(echo["sha256"] as? String == F.sha256(content.subdata(in: 1000..<501_000)))
        await fixture.agent.shutdown()
    }

    @Test func aPostWithoutBodySendsContentLengthZero() async throws {
        let fixture = try Fixture()
        let response = try await fixture.agent.exchange(ExchangeRequest(method: .post, url: fixture.server.url("echo")))
        let echo = try Self.echo(response)
        #expect((echo["headers"] as? [String: String])?["content-length"] == "0")
        #expect(echo["length"] as? Int == 0)
        await fixture.agent.shutdown()
    }

    @Test func theFileChangingBeforeItsLastByteEndsTheExchange() async throws {
        let fixture = try Fixture()
        let file = fixture.state.url("log.txt")
        try F.randomData(count: 256 << 10, seed: 3).write(to: file)
        let descriptor = try FileDescriptor.openForReading(file.path)
        defer { descriptor.close() }
        var identity = try descriptor.status()
        identity.modified -= 1_000_000_000   // as if it was written after the upload began
        let range = ExchangeFileRange(descriptor: descriptor, offset: 0, length: 256 << 10, identity: identity)
        await #expect {
            _ = try await fixture.agent.exchange(ExchangeRequest(method: .put, url: fixture.server.url("plain/log.txt"), body: .file(range)))
        } throws: { error in
            "\(error)".contains("the file changed while it was being sent")
        }
        #expect(fixture.server.stored("log.txt").map { $0.count < 256 << 10 } ?? true, "the server got the whole file")
        await fixture.agent.shutdown()
    }

    @Test func refusesBadHeadersAndURLs() async throws {
        let fixture = try Fixture()
        for (request, words) in [
            (ExchangeRequest(url: URL(string: "ftp://127.0.0.1/x")!), "only http and https"),
            (ExchangeRequest(url: fixture.server.url("echo"), headerFields: ["Bad\r\nHeader: x"]), "request header"),
            (ExchangeRequest(url: fixture.server.url("echo"), headerFields: ["Content-Length: 5"]), "set from the request itself"),
        ] {
            await #expect { _ = try await fixture.agent.exchange(request) } throws: { "\($0)".contains(words) }
        }
        #expect(HTTPMethod("GET /x") == nil)
        #expect(HTTPMethod("") == nil)
        #expect(HTTPMethod("patch") == .patch)
        await fixture.agent.shutdown()
    }

    @Test func thePathGoingEndsTheRequestAtOnce() async throws {
        let fixture = try Fixture()
        let answered = Atomic<Bool>(false)
        let started = ContinuousClock.now
        let cut = Task {
            // The request is in flight once the server has accepted it; then the path goes.
            _ = await F.wait(timeout: .seconds(10)) { (try? fixture.server.requestCount()) ?? 0 > 0 }
            fixture.paths.yield(ScriptedPaths.offline)
            return ContinuousClock.now
        }
        do {
            _ = try await fixture.agent.exchange(ExchangeRequest(url: fixture.server.url("hold")))
            answered.store(true, ordering: .relaxed)
        } catch {
            #expect(error.errorCode == -1005, "\(error)")
            let cutAt = await cut.value
            #expect(ContinuousClock.now - cutAt < .milliseconds(500))
        }
        let wasAnswered = answered.load(ordering: .relaxed)
        #expect(!wasAnswered)
        #expect(ContinuousClock.now - started < .seconds(15))
        await fixture.agent.shutdown()
    }

    /// The agent's first use is an exchange while old paths wait in its stream (offline, then
    /// online, as a session whose task saw them both before the agent read any): the first path
    /// the agent reads is where the exchange starts, not a change that ends it with -1005.
    @Test func anExchangeThatIsTheAgentsFirstUseIsNotEndedByTheFirstPathRead() async throws {
        let fixture = try Fixture(initialPath: ScriptedPaths.offline, bytesPerSecond: 4 << 20)
        fixture.paths.yield(ScriptedPaths.online())
        let body = Data(repeating: 0x5A, count: 1 << 20)
        let response = try await fixture.agent.exchange(
            ExchangeRequest(method: .put, url: fixture.server.url("echo"), body: .data(body)), waitsForConnectivity: true)
        #expect(response.head.statusCode == 200)
        #expect(try Self.echo(response)["length"] as? Int == body.count)
        await fixture.agent.shutdown()
    }

    @Test func aSilentServerEndsTheRequestAfterItsIdleTimeout() async throws {
        let fixture = try Fixture()
        let started = ContinuousClock.now
        await #expect {
            _ = try await fixture.agent.exchange(ExchangeRequest(url: fixture.server.url("hold"), idleTimeout: .milliseconds(300)))
        } throws: { ($0 as? DownloadError)?.errorCode == -1001 && "\($0)".contains("nothing sent or received for 0.3 s") }
        // The deadline is the request's idle timeout, not URLSession's 60 s.
        #expect(ContinuousClock.now - started < .seconds(10))
        await fixture.agent.shutdown()
    }

    @Test func offlineFailsAtOnceOrWaits() async throws {
        let fixture = try Fixture(initialPath: ScriptedPaths.offline)
        _ = await F.wait { await fixture.agent.currentPath?.isSatisfied == false }
        await #expect { _ = try await fixture.agent.exchange(ExchangeRequest(url: fixture.server.url("echo"))) }
            throws: { ($0 as? DownloadError)?.errorCode == -1009 }
        let waited = Atomic<Bool>(false)
        let request = Task {
            try await fixture.agent.exchange(ExchangeRequest(url: fixture.server.url("echo")), waitsForConnectivity: true,
                                             handlers: ExchangeHandlers(waitingForConnectivity: { waited.store(true, ordering: .relaxed) }))
        }
        _ = await F.wait { waited.load(ordering: .relaxed) }
        fixture.paths.yield(ScriptedPaths.online())
        let response = try await request.value
        #expect(response.head.statusCode == 200)
        let didWait = waited.load(ordering: .relaxed)
        #expect(didWait)
        await fixture.agent.shutdown()
    }
}
