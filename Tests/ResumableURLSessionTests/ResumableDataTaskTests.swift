import Foundation
import FoundationNetworking
import LinuxReachability
import Synchronization
import Testing
@testable import ResumableURLSession
import TestSupport

/// Data tasks through a session, with a scripted exchange and scripted paths: what the delegate,
/// the completion handler and the async form see, in what order, without sockets.
@Suite("Data tasks")
struct ResumableDataTaskTests {
    static let url = URL(string: "http://127.0.0.1:9/search?term=storm")!
    static let uplink = NetworkInterface(name: "eth0", index: 2, type: .wired, classificationReason: "test",
                                         isUp: true, hasCarrier: true, addresses: ["10.0.0.2"])
    static let online = NetworkPath(status: .satisfied, unsatisfiedReason: nil, primaryInterface: uplink,
                                    routes: [PathRoute(family: .ipv4, interfaceName: "eth0", interfaceIndex: 2,
                                                       gateway: nil, sourceAddress: "10.0.0.2")],
                                    interfaces: [uplink])
    static let offline = NetworkPath.unsatisfied(.noRoute)

    /// A session whose exchanges the test plays, with a path stream it drives.
    struct Fixture {
        let directory: ScratchDirectory
        let session: ResumableURLSession
        let exchanger = ScriptedExchanger()
        let delegate = RecordingDataDelegate()
        let paths: AsyncStream<NetworkPath>.Continuation

        init(waitsForConnectivity: Bool = false, retries: Bool = false, initialPath: NetworkPath? = ResumableDataTaskTests.online) throws {
            directory = try ScratchDirectory("dt")
            var configuration = ResumableURLSession.Configuration(stateDirectory: directory.url)
            configuration.waitsForConnectivity = waitsForConnectivity
            configuration.retriesIdempotentRequestsAfterPathChange = retries
            let (stream, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
            if let initialPath { continuation.yield(initialPath) }
            paths = continuation
            session = ResumableURLSession(configuration: configuration, delegate: delegate, delegateQueue: nil,
                                          pathSource: .stream(stream), exchanger: exchanger)
        }

        /// Waits until the engine has taken the path in (data tasks see paths as the engine does).
        func waitForPath(_ path: NetworkPath) async -> Bool {
            await Polling.wait(timeout: .seconds(5)) { session.latestPathValue == path }
        }

        func shutDown() async {
            session.invalidateAndCancel()
            await session.waitUntilInvalidated()
        }
    }

    @Test func theDelegateHearsTheResponseThenTheBodyThenTheEnd() async throws {
        let fixture = try Fixture()
        #expect(await fixture.waitForPath(Self.online))
        var request = URLRequest(url: Self.url)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let task = fixture.session.dataTask(with: request)
        #expect(task.state == .suspended)
        task.resume()
        let exchange = try #require(await fixture.exchanger.waitForExchange(1))
        #expect(exchange.request.method == "GET")
        #expect(exchange.request.headers["Accept"] == "application/json")
        exchange.play(.response(.init(statusCode: 200, headers: ["Content-Length": "7"], url: Self.url)))
        exchange.play(.body(Data("{\"a\"".utf8)))
        exchange.play(.body(Data(":1}".utf8)))
        exchange.play(.finished(nil))
        #expect(await fixture.delegate.waitForCompletion(of: task))
        // Bytes that came while the delegate decided arrive in one piece after it allowed them.
        let transcript = fixture.delegate.transcript
        #expect(transcript.first == "response 200" && transcript.last == "complete nil", "\(transcript)")
        let sizes = transcript.dropFirst().dropLast().compactMap { $0.hasPrefix("data ") ? Int($0.dropFirst(5)) : nil }
        #expect(sizes.reduce(0, +) == 7 && sizes.count == transcript.count - 2, "\(transcript)")
        #expect(task.state == .completed)
        #expect(task.countOfBytesReceived == 7)
        #expect(task.countOfBytesExpectedToReceive == 7)
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        await fixture.shutDown()
    }

    @Test func theCompletionHandlerGetsTheWholeBodyAndTheAsyncFormReturnsIt() async throws {
        let fixture = try Fixture()
        #expect(await fixture.waitForPath(Self.online))
        let answer = Task { try await fixture.session.data(from: Self.url) }
        let exchange = try #require(await fixture.exchanger.waitForExchange(1))
        exchange.play(.response(.init(statusCode: 404, headers: [:], url: Self.url)))
        exchange.play(.body(Data("not ".utf8)))
        exchange.play(.body(Data("here".utf8)))
        exchange.play(.finished(nil))
        let (data, response) = try await answer.value
        #expect(data == Data("not here".utf8))
        #expect((response as? HTTPURLResponse)?.statusCode == 404, "a 4xx is a response, as on Apple platforms")
        #expect(fixture.delegate.transcript.isEmpty, "the delegate is not told of an awaited request")
        await fixture.shutDown()
    }

    @Test func aPathLostMidRequestFailsAtOnceWithNetworkConnectionLost() async throws {
        let fixture = try Fixture()
        #expect(await fixture.waitForPath(Self.online))
        let task = fixture.session.dataTask(with: Self.url)
        task.resume()
        let exchange = try #require(await fixture.exchanger.waitForExchange(1))
        exchange.play(.response(.init(statusCode: 200, headers: [:], url: Self.url)))
        exchange.play(.body(Data("part".utf8)))
        #expect(await Polling.wait(timeout: .seconds(5)) { fixture.delegate.transcript.count == 2 })
        fixture.paths.yield(Self.offline)
        #expect(await fixture.delegate.waitForCompletion(of: task))
        #expect(fixture.delegate.transcript == ["response 200", "data 4", "complete -1005"])
        #expect(exchange.isCancelled, "the exchange is stopped, not left to time out")
        await fixture.shutDown()
    }

    @Test func startedOfflineItWaitsForAPathThenRuns() async throws {
        let fixture = try Fixture(waitsForConnectivity: true, initialPath: Self.offline)
        #expect(await fixture.waitForPath(Self.offline))
        let task = fixture.session.dataTask(with: Self.url)
        task.resume()
        #expect(await Polling.wait(timeout: .seconds(5)) { fixture.delegate.transcript == ["waiting"] })
        #expect(fixture.exchanger.count == 0, "no request without a path")
        #expect(task.state == .running)
        fixture.paths.yield(Self.online)
        let exchange = try #require(await fixture.exchanger.waitForExchange(1))
        exchange.play(.response(.init(statusCode: 204, headers: [:], url: Self.url)))
        exchange.play(.finished(nil))
        #expect(await fixture.delegate.waitForCompletion(of: task))
        #expect(fixture.delegate.transcript == ["waiting", "response 204", "complete nil"])
        await fixture.shutDown()
    }

    @Test func anOptedInGetIsRetriedOnTheNextPathAndAPostIsNot() async throws {
        let fixture = try Fixture(retries: true)
        #expect(await fixture.waitForPath(Self.online))
        let get = fixture.session.dataTask(with: Self.url)
        get.resume()
        let first = try #require(await fixture.exchanger.waitForExchange(1))
        fixture.paths.yield(Self.offline)
        #expect(await Polling.wait(timeout: .seconds(5)) { first.isCancelled })
        fixture.paths.yield(Self.online)
        let second = try #require(await fixture.exchanger.waitForExchange(2))
        second.play(.response(.init(statusCode: 200, headers: [:], url: Self.url)))
        second.play(.finished(nil))
        #expect(await fixture.delegate.waitForCompletion(of: get))
        #expect(fixture.delegate.transcript == ["response 200", "complete nil"])

        var post = URLRequest(url: Self.url)
        post.httpMethod = "POST"
        post.httpBody = Data("x=1".utf8)
        let postTask = fixture.session.dataTask(with: post)
        postTask.resume()
        let third = try #require(await fixture.exchanger.waitForExchange(3))
        #expect(third.request.method == "POST")
        fixture.paths.yield(Self.offline)
        #expect(await fixture.delegate.waitForCompletion(of: postTask))
        #expect(fixture.delegate.transcript.last == "complete -1005")
        #expect(fixture.exchanger.count == 3, "a POST is never sent twice")
        await fixture.shutDown()
    }

    @Test func anUploadSendsItsBodyReportsProgressAndHandsOverTheServersAnswer() async throws {
        let fixture = try Fixture()
        #expect(await fixture.waitForPath(Self.online))
        var request = URLRequest(url: Self.url)
        request.httpMethod = "PUT"
        let body = Data(repeating: 7, count: 300)
        let task: ResumableUploadTask = fixture.session.uploadTask(with: request, from: body)
        task.resume()
        let exchange = try #require(await fixture.exchanger.waitForExchange(1))
        guard case .data(let sent)? = exchange.request.body else { Issue.record("no body: \(exchange.request)"); return }
        #expect(sent == body && exchange.request.method == "PUT")
        exchange.play(.sent(bytes: 100, total: 300))
        exchange.play(.sent(bytes: 300, total: 300))
        exchange.play(.response(.init(statusCode: 201, headers: [:], url: Self.url)))
        exchange.play(.body(Data("stored".utf8)))
        exchange.play(.finished(nil))
        #expect(await fixture.delegate.waitForCompletion(of: task))
        #expect(fixture.delegate.transcript == ["sent 100 100/300", "sent 200 300/300", "response 201", "data 6", "complete nil"])
        #expect(task.countOfBytesSent == 300 && task.countOfBytesExpectedToSend == 300)

        let file = fixture.directory.url.appendingPathComponent("photo.jpg")
        let answer = Task { try await fixture.session.upload(for: request, fromFile: file) }
        let second = try #require(await fixture.exchanger.waitForExchange(2))
        guard case .file(let url)? = second.request.body else { Issue.record("no file: \(second.request)"); return }
        #expect(url == file)
        second.play(.response(.init(statusCode: 200, headers: [:], url: Self.url)))
        second.play(.body(Data("ok".utf8)))
        second.play(.finished(nil))
        let (data, response) = try await answer.value
        #expect(data == Data("ok".utf8) && (response as? HTTPURLResponse)?.statusCode == 200)
        await fixture.shutDown()
    }

    @Test func aRefusedResponseCancelsAndAStreamBodyIsRefused() async throws {
        let fixture = try Fixture()
        #expect(await fixture.waitForPath(Self.online))
        fixture.delegate.refusesResponses = true
        let task = fixture.session.dataTask(with: Self.url)
        task.resume()
        let exchange = try #require(await fixture.exchanger.waitForExchange(1))
        exchange.play(.response(.init(statusCode: 200, headers: [:], url: Self.url)))
        exchange.play(.body(Data("held".utf8)))
        #expect(await fixture.delegate.waitForCompletion(of: task))
        #expect(fixture.delegate.transcript == ["response 200", "complete -999"], "nothing delivered after a .cancel")
        #expect(exchange.isCancelled)

        var streamed = URLRequest(url: Self.url)
        streamed.httpMethod = "PUT"
        streamed.httpBodyStream = InputStream(data: Data("x".utf8))
        let refused = fixture.session.dataTask(with: streamed)
        refused.resume()
        #expect(await fixture.delegate.waitForCompletion(of: refused))
        let error = try #require(refused.error as? URLError)
        #expect(error.code == .unsupportedURL)
        #expect(error.localizedDescription.contains("uploadTask(with:fromFile:)"), "it says what to do")
        #expect(fixture.exchanger.count == 1)
        await fixture.shutDown()
    }
}

/// Exchanges the test plays by hand.
final class ScriptedExchanger: DataExchanger {
    final class Exchange: DataExchange {
        let request: DataExchangeRequest
        private let events: @Sendable (DataExchangeEvent) -> Void
        private let cancelled = Atomic<Bool>(false)

        init(request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) {
            self.request = request
            self.events = events
        }

        var isCancelled: Bool { cancelled.load(ordering: .relaxed) }
        func play(_ event: DataExchangeEvent) { events(event) }
        func cancel() {
            cancelled.store(true, ordering: .relaxed)
            events(.finished(.init(code: .cancelled, description: "cancelled")))
        }
    }

    private let exchanges = Mutex<[Exchange]>([])

    var count: Int { exchanges.withLock { $0.count } }

    func start(_ request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange {
        let exchange = Exchange(request: request, events: events)
        exchanges.withLock { $0.append(exchange) }
        return exchange
    }

    /// The `number`th exchange (from 1), once it started.
    func waitForExchange(_ number: Int) async -> Exchange? {
        _ = await Polling.wait(timeout: .seconds(5)) { self.count >= number }
        return exchanges.withLock { $0.count >= number ? $0[number - 1] : nil }
    }
}

/// A data delegate that writes down what it hears, in order.
final class RecordingDataDelegate: ResumableURLSessionDataDelegate {
    private let state = Mutex<(lines: [String], completed: Set<Int>, refuses: Bool)>(([], [], false))

    var transcript: [String] { state.withLock { $0.lines } }
    var refusesResponses: Bool {
        get { state.withLock { $0.refuses } }
        set { state.withLock { $0.refuses = newValue } }
    }

    func waitForCompletion(of task: ResumableDataTask) async -> Bool {
        await Polling.wait(timeout: .seconds(5)) { self.state.withLock { $0.completed.contains(task.taskIdentifier) } }
    }

    private func note(_ line: String) { state.withLock { $0.lines.append(line) } }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        note("response \((response as? HTTPURLResponse)?.statusCode ?? 0)")
        completionHandler(refusesResponses ? .cancel : .allow)
    }

    func urlSession(_ session: ResumableURLSession, dataTask: ResumableDataTask, didReceive data: Data) {
        note("data \(data.count)")
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didCompleteWithError error: (any Error)?) {
        note("complete \((error as? URLError).map { "\($0.code.rawValue)" } ?? "nil")")
        _ = state.withLock { $0.completed.insert(task.taskIdentifier) }
    }

    func urlSession(_ session: ResumableURLSession, taskIsWaitingForConnectivity task: ResumableDataTask) {
        note("waiting")
    }

    func urlSession(_ session: ResumableURLSession, task: ResumableDataTask, didSendBodyData bytesSent: Int64,
                    totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        note("sent \(bytesSent) \(totalBytesSent)/\(totalBytesExpectedToSend)")
    }
}
