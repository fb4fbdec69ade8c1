import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ResumableURLSession
import TestSupport

/// ResumableURLSession against nginx on 127.0.0.1, with the path scripted (the namespace
/// tests in URLSessionOutageTests cut real links).
@Suite("ResumableURLSession on loopback", .serialized,
       .needsNginx)
struct URLSessionLoopbackTests: DownloadScenarios {

    final class Fixture: Sendable {
        let nginx: DownloadTestNginx
        let directory: F.Directory
        init(slowRate: String = "2m") throws {
            nginx = try DownloadTestNginx(slowRate: slowRate)
            directory = try F.Directory("urlsession")
        }
        var state: URL { directory.file("state") }
        func session(waitsForConnectivity: Bool = false, initialPath: NetworkPath? = ScriptedPaths.online(),
                     delegateQueue: OperationQueue? = nil,
                     edit: (inout ResumableURLSession.Configuration) -> Void = { _ in }) -> LoopbackSession {
            LoopbackSession(state: state, finished: directory.file("finished"), waitsForConnectivity: waitsForConnectivity,
                            initialPath: initialPath, delegateQueue: delegateQueue, edit: edit)
        }
        /// Serves `count` random bytes (from `seed`) at `path` and starts a download task for them
        /// in a new session: the start most of these scenarios share.
        func startDownload(count: Int, seed: UInt64, at path: String = "slow/big.iso", waitsForConnectivity: Bool = false,
                           initialPath: NetworkPath? = ScriptedPaths.online()) throws -> (LoopbackSession, ResumableDownloadTask, Data) {
            let content = F.randomData(count: count, seed: seed)
            try nginx.serve(content, at: path)
            let client = session(waitsForConnectivity: waitsForConnectivity, initialPath: initialPath)
            let task = client.session.downloadTask(with: nginx.url(path))
            task.resume()
            return (client, task, content)
        }
        /// Files left in the session's downloads directory.
        var leftovers: [String] {
            (try? FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("downloads").path)) ?? []
        }
    }

    static func expectMonotonic(_ totals: [Int64], sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(zip(totals, totals.dropFirst()).allSatisfy { $0 < $1 }, "didWriteData totals not increasing: \(totals)",
                sourceLocation: sourceLocation)
    }

    @Test func downloadsAndHandsOverTheFile() async throws {
        let fixture = try Fixture()
        let content = F.randomData(count: 3 << 20, seed: 21)
        try fixture.nginx.serve(content, at: "song.mp3")
        let queue = OperationQueue()
        queue.name = "delegate-queue-under-test"
        queue.maxConcurrentOperationCount = 1
        let client = fixture.session(delegateQueue: queue)
        let task = client.session.downloadTask(with: fixture.nginx.url("song.mp3"))
        #expect(task.state == .suspended)
        #expect(task.originalRequest?.url == fixture.nginx.url("song.mp3"))
        #expect(task.countOfBytesExpectedToReceive == -1)
        task.resume()
        #expect(task.state == .running)
        #expect(await client.delegate.waitForCompletion(of: task), "\(client.delegate.transcript)")
        #expect(client.delegate.error(of: task) == nil, "\(client.delegate.transcript)")
        #expect(client.delegate.finishedSHA256(of: task) == F.sha256(content))
        let totals = client.delegate.totals(of: task)
        Self.expectMonotonic(totals)
        #expect(totals.last == Int64(content.count))
        #expect(client.delegate.resumeOffsets(of: task).isEmpty)
        // Order: writes, then the file, then the completion; all on the delegate queue.
        let calls = client.delegate.all
        #expect(calls.allSatisfy { $0.queueName == "delegate-queue-under-test" }, "\(calls.map(\.queueName))")
        let finishIndex = try #require(calls.firstIndex { if case .finished = $0.call { true } else { false } })
        #expect(calls.prefix(finishIndex).allSatisfy { if case .wrote = $0.call { true } else { false } })
        #expect(finishIndex == calls.count - 2)
        if case .finished(_, _, let existed) = calls[finishIndex].call { #expect(existed) }
        #expect(task.state == .completed)
        #expect(task.countOfBytesReceived == Int64(content.count))
        #expect(task.countOfBytesExpectedToReceive == Int64(content.count))
        #expect(task.progress.fractionCompleted == 1)
        await client.shutDown()
        #expect(fixture.leftovers.isEmpty, "the temporary file is gone after the delegate returns: \(fixture.leftovers)")
        #expect(await client.delegate.wait(timeout: .seconds(5)) { if case .invalidated = $0 { true } else { false } })
        #expect(client.delegate.calls.last.map { if case .invalidated = $0 { true } else { false } } == true)
    }

    @Test func aDroppedPathEndsTheTaskWithResumeDataThatFinishesTheFile() async throws {
        let fixture = try Fixture()
        let (client, task, content) = try fixture.startDownload(count: 8 << 20, seed: 22)
        #expect(await client.delegate.waitForBytes(1 << 20, of: task), "\(client.delegate.transcript)")
        let cut = ContinuousClock.now
        client.paths.yield(ScriptedPaths.offline)
        #expect(await client.delegate.waitForCompletion(of: task, timeout: .seconds(5)))
        let completion = try #require(client.delegate.completion(of: task))
        let error = try #require(client.delegate.error(of: task), "\(client.delegate.transcript)")
        #expect(error.code == .networkConnectionLost)
        #expect(completion.time - cut < .seconds(1), "-1005 after \(completion.time - cut)")
        let resumeData = try #require(error.downloadTaskResumeData)
        // The seed's spelling works too.
        let nsError = error as NSError
        #expect(nsError.code == NSURLErrorNetworkConnectionLost)
        #expect(nsError.userInfo[NSURLSessionDownloadTaskResumeData] as? Data == resumeData)
        #expect((error.userInfo[NSURLErrorFailingURLErrorKey] as? URL) == fixture.nginx.url("slow/big.iso"))

        client.paths.yield(ScriptedPaths.online())
        let resumed = client.session.downloadTask(withResumeData: resumeData)
        #expect(resumed.originalRequest?.url == fixture.nginx.url("slow/big.iso"))
        resumed.resume()
        #expect(await client.delegate.waitForCompletion(of: resumed), "\(client.delegate.transcript)")
        #expect(client.delegate.error(of: resumed) == nil, "\(client.delegate.transcript)")
        #expect(client.delegate.finishedSHA256(of: resumed) == F.sha256(content))
        let offsets = client.delegate.resumeOffsets(of: resumed)
        #expect(offsets.count == 1 && offsets[0] >= 1 << 20, "didResumeAtOffset: \(offsets)")
        let totals = client.delegate.totals(of: resumed)
        Self.expectMonotonic(totals)
        #expect(totals.first.map { $0 > offsets[0] } == true)
        await client.shutDown()
        #expect(fixture.leftovers.isEmpty, "\(fixture.leftovers)")
    }

    @Test func resumeDataWorksInANewSessionOnTheSameStateDirectory() async throws {
        let fixture = try Fixture()
        let (first, task, content) = try fixture.startDownload(count: 6 << 20, seed: 23)
        #expect(await first.delegate.waitForBytes(1 << 20, of: task))
        let resumeData = try #require(await task.cancelByProducingResumeData())
        #expect(await first.delegate.waitForCompletion(of: task))
        let cancelled = try #require(first.delegate.error(of: task))
        #expect(cancelled.code == .cancelled)
        #expect(cancelled.downloadTaskResumeData == resumeData)
        #expect(task.state == .completed)
        await first.shutDown()

        let second = fixture.session()
        let resumed = second.session.downloadTask(withResumeData: resumeData)
        resumed.resume()
        #expect(await second.delegate.waitForCompletion(of: resumed), "\(second.delegate.transcript)")
        #expect(second.delegate.error(of: resumed) == nil, "\(second.delegate.transcript)")
        #expect(second.delegate.finishedSHA256(of: resumed) == F.sha256(content))
        #expect(second.delegate.resumeOffsets(of: resumed).first.map { $0 >= 1 << 20 } == true)
        await second.shutDown()
    }

    @Test func cancelByProducingResumeDataCallsTheHandlerOnTheDelegateQueue() async throws {
        let fixture = try Fixture()
        let (client, task, _) = try fixture.startDownload(count: 6 << 20, seed: 24)
        #expect(await client.delegate.waitForBytes(512 << 10, of: task))
        let answer = Mutex<(Data?, String?)?>(nil)
        task.cancel { data in answer.withLock { $0 = (data, OperationQueue.current?.name) } }
        #expect(task.state == .canceling)
        #expect(await F.wait { answer.withLock { $0 } != nil })
        let (data, queue) = try #require(answer.withLock { $0 })
        #expect(data != nil)
        #expect(queue == client.session.delegateQueue.name)
        // Nothing is deleted: the data's partial file stays for a later resume.
        #expect(fixture.leftovers.contains { $0.hasSuffix(".download.part") }, "\(fixture.leftovers)")
        await client.shutDown()
    }

    @Test func cancelDeletesEverything() async throws {
        let fixture = try Fixture()
        let (client, task, _) = try fixture.startDownload(count: 6 << 20, seed: 25)
        #expect(await client.delegate.waitForBytes(256 << 10, of: task))
        task.cancel()
        #expect(await client.delegate.waitForCompletion(of: task))
        let error = try #require(client.delegate.error(of: task))
        #expect(error.code == .cancelled && error.downloadTaskResumeData == nil)
        await client.shutDown()
        #expect(fixture.leftovers.isEmpty, "\(fixture.leftovers)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.state.appendingPathComponent("records").path).isEmpty)
    }

    @Test func suspendThenResumeContinues() async throws {
        let fixture = try Fixture()
        let (client, task, content) = try fixture.startDownload(count: 4 << 20, seed: 26)
        #expect(await client.delegate.waitForBytes(512 << 10, of: task))
        task.suspend()
        #expect(task.state == .suspended)
        let during = task.countOfBytesReceived
        task.resume()
        #expect(await client.delegate.waitForCompletion(of: task), "\(client.delegate.transcript)")
        #expect(client.delegate.finishedSHA256(of: task) == F.sha256(content))
        #expect(client.delegate.resumeOffsets(of: task).isEmpty, "suspend/resume is not a resume-data resume")
        Self.expectMonotonic(client.delegate.totals(of: task))
        #expect(during > 0)
        await client.shutDown()
    }

    @Test func noPathFailsAtOnceWithNotConnectedToInternet() async throws {
        let fixture = try Fixture()
        let (client, task, _) = try fixture.startDownload(count: 1 << 20, seed: 27, at: "f.bin", initialPath: ScriptedPaths.offline)
        #expect(await client.delegate.waitForCompletion(of: task, timeout: .seconds(5)))
        let error = try #require(client.delegate.error(of: task))
        #expect(error.code == .notConnectedToInternet)
        #expect(error.downloadTaskResumeData == nil)
        await client.shutDown()
        #expect(fixture.leftovers.isEmpty, "\(fixture.leftovers)")
    }

    @Test func expensivePathsRefusedWhenNotAllowed() async throws {
        let fixture = try Fixture()
        try fixture.nginx.serve(F.randomData(count: 1 << 20, seed: 28), at: "f.bin")
        let client = fixture.session(initialPath: ScriptedPaths.online(via: ScriptedPaths.cellularUplink)) {
            $0.allowsExpensiveNetworkAccess = false
        }
        let task = client.session.downloadTask(with: fixture.nginx.url("f.bin"))
        task.resume()
        #expect(await client.delegate.waitForCompletion(of: task, timeout: .seconds(5)))
        let error = try #require(client.delegate.error(of: task))
        #expect(error.code == .notConnectedToInternet)
        #expect(error.networkUnavailableReason == .expensive)
        await client.shutDown()
    }

    @Test("isDiscretionary keeps tasks off a wifi NetworkManager reports metered, allowsRoaming off a roaming modem, allowsConstrainedNetworkAccess off a connection marked metered")
    func discretionaryAndRoaming() async throws {
        let fixture = try Fixture()
        try fixture.nginx.serve(F.randomData(count: 1 << 20, seed: 30), at: "f.bin")
        let hotspot = NetworkInterface(name: "wlan0", index: 4, type: .wifi, classificationReason: "test", isUp: true,
                                       hasCarrier: true, addresses: ["10.0.0.2"], isExpensive: true,
                                       costReason: "NetworkManager: Metered=guess-yes", metered: .guessYes)
        let marked = NetworkInterface(name: "wlan0", index: 4, type: .wifi, classificationReason: "test", isUp: true,
                                      hasCarrier: true, addresses: ["10.0.0.2"], isExpensive: true,
                                      costReason: "NetworkManager: Metered=yes (set on the connection)", metered: .yes)
        let roaming = NetworkInterface(name: "wwan0", index: 3, type: .cellular, classificationReason: "test", isUp: true,
                                       hasCarrier: true, addresses: ["10.0.0.2"],
                                       cellular: CellularStatus(isRoaming: true, registration: "roaming", accessTechnologies: ["lte"]))
        for (path, edit, reason) in [
            (ScriptedPaths.online(via: hotspot), { (c: inout ResumableURLSession.Configuration) in c.isDiscretionary = true },
             URLError.NetworkUnavailableReason.expensive),
            (ScriptedPaths.online(via: roaming), { (c: inout ResumableURLSession.Configuration) in c.allowsRoaming = false },
             .cellular),
            (ScriptedPaths.online(via: marked),
             { (c: inout ResumableURLSession.Configuration) in c.allowsConstrainedNetworkAccess = false },
             .constrained),
        ] {
            let client = fixture.session(initialPath: path, edit: edit)
            let task = client.session.downloadTask(with: fixture.nginx.url("f.bin"))
            task.resume()
            #expect(await client.delegate.waitForCompletion(of: task, timeout: .seconds(5)))
            let error = try #require(client.delegate.error(of: task))
            #expect(error.code == .notConnectedToInternet)
            #expect(error.networkUnavailableReason == reason)
            await client.shutDown()
        }
        // The same paths are fine by default, as on Apple platforms.
        let client = fixture.session(initialPath: ScriptedPaths.online(via: hotspot))
        let task = client.session.downloadTask(with: fixture.nginx.url("f.bin"))
        task.resume()
        #expect(await client.delegate.waitForCompletion(of: task), "\(client.delegate.transcript)")
        #expect(client.delegate.error(of: task) == nil)
        await client.shutDown()
    }

    @Test func waitsForConnectivityWaitsForAPath() async throws {
        let fixture = try Fixture()
        let (client, task, content) = try fixture.startDownload(count: 1 << 20, seed: 29, at: "f.bin", waitsForConnectivity: true, initialPath: ScriptedPaths.offline)
        #expect(await client.delegate.wait { if case .waiting = $0 { true } else { false } })
        #expect(task.state == .running)
        client.paths.yield(ScriptedPaths.online())
        #expect(await client.delegate.waitForCompletion(of: task), "\(client.delegate.transcript)")
        #expect(client.delegate.error(of: task) == nil)
        #expect(client.delegate.finishedSHA256(of: task) == F.sha256(content))
        await client.shutDown()
    }

    @Test func httpErrorsAreErrors() async throws {
        let fixture = try Fixture()
        let client = fixture.session()
        let task = client.session.downloadTask(with: fixture.nginx.url("missing.bin"))
        task.resume()
        #expect(await client.delegate.waitForCompletion(of: task))
        let error = try #require(client.delegate.error(of: task))
        #expect(error.code == .fileDoesNotExist)
        #expect((error.userInfo[NSUnderlyingErrorKey] as? DownloadError)?.httpStatusCode == 404)
        #expect(client.delegate.finishedSHA256(of: task) == nil)
        await client.shutDown()
        #expect(fixture.leftovers.isEmpty, "\(fixture.leftovers)")
    }

    @Test func additionalHeadersAreSentAndResumeHeadersRefused() async throws {
        let directory = try F.Directory("urlsession-headers")
        let content = F.randomData(count: 64 << 10, seed: 32)
        let server = try DownloadTestHTTPServer { request, _ in .honest(request, content: content, etag: "\"h1\"") }
        defer { server.stop() }
        let client = LoopbackSession(state: directory.file("state"), finished: directory.file("finished")) {
            $0.httpAdditionalHeaders = ["Authorization": "Bearer t0ken", "X-Client": "porting-test"]
        }
        let task = client.session.downloadTask(with: server.url())
        task.resume()
        #expect(await client.delegate.waitForCompletion(of: task))
        #expect(client.delegate.finishedSHA256(of: task) == F.sha256(content))
        let headers = try #require(server.requests.first?.headers)
        #expect(headers["authorization"] == "Bearer t0ken" && headers["x-client"] == "porting-test")
        await client.shutDown()
        // Credentials are not kept on disk.
        let files = try FileManager.default.subpathsOfDirectory(atPath: directory.file("state").path)
        for file in files {
            let text = (try? String(contentsOfFile: directory.file("state/" + file).path, encoding: .isoLatin1)) ?? ""
            #expect(!text.contains("t0ken"), "\(file)")
        }

        for headers in [["Range": "bytes=0-"], ["X-Evil": "a\r\nHost: b"]] {
            let refused = LoopbackSession(state: directory.file("state"), finished: directory.file("finished")) {
                $0.httpAdditionalHeaders = headers
            }
            let task = refused.session.downloadTask(with: server.url())
            task.resume()
            #expect(await refused.delegate.waitForCompletion(of: task))
            #expect(refused.delegate.error(of: task)?.localizedDescription.contains("httpAdditionalHeaders") == true,
                    "\(refused.delegate.transcript)")
            await refused.shutDown()
        }
        #expect(server.requests.count == 1, "refused configurations send nothing")
    }

    @Test(.enabled(if: DownloadTestNginx.isTLSAvailable, "openssl is not installed"))
    func privateCertificateAuthority() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 256 << 10, seed: 33, at: "f.bin", tls: true, label: "urlsession-tls")
        let untrusting = LoopbackSession(state: directory.file("state"), finished: directory.file("finished"))
        let refused = untrusting.session.downloadTask(with: nginx.tlsURL("f.bin"))
        refused.resume()
        #expect(await untrusting.delegate.waitForCompletion(of: refused))
        #expect(untrusting.delegate.error(of: refused)?.code == .serverCertificateUntrusted, "\(untrusting.delegate.transcript)")
        await untrusting.shutDown()

        let trusting = LoopbackSession(state: directory.file("state"), finished: directory.file("finished")) {
            $0.certificateAuthorityFile = nginx.certificate
        }
        let task = trusting.session.downloadTask(with: nginx.tlsURL("f.bin"))
        task.resume()
        #expect(await trusting.delegate.waitForCompletion(of: task))
        #expect(trusting.delegate.finishedSHA256(of: task) == F.sha256(content), "\(trusting.delegate.transcript)")
        await trusting.shutDown()
    }

    @Test func anInvalidatedSessionStartsNoTask() async throws {
        let fixture = try Fixture()
        try fixture.nginx.serve(F.randomData(count: 1 << 20, seed: 31), at: "f.bin")
        let client = fixture.session()
        let task = client.session.downloadTask(with: fixture.nginx.url("f.bin"))
        client.session.finishTasksAndInvalidate()
        await client.session.waitUntilInvalidated()
        // The delegate hears of it on its queue, right after.
        #expect(await client.delegate.wait(timeout: .seconds(5)) { if case .invalidated = $0 { true } else { false } })
        task.resume()
        // The delegate is released with the invalidation: the task's own error tells.
        #expect(await F.wait(timeout: .seconds(5)) { task.state == .completed })
        #expect((task.error as? URLError)?.code == .cancelled)
    }

    @Test func delegateCallsOnADispatchQueue() async throws {
        let fixture = try Fixture()
        try fixture.nginx.serve(F.randomData(count: 1 << 20, seed: 30), at: "f.bin")
        let queue = DispatchQueue(label: "urlsession-dispatch-under-test")
        let marker = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: marker, value: true)
        let onQueue = Mutex<[Bool]>([])
        let delegate = RecordingDelegate(finishedDirectory: fixture.directory.file("finished"))
        delegate.onCall.withLock { $0 = { _ in
            let isOnQueue = DispatchQueue.getSpecific(key: marker) == true
            onQueue.withLock { $0.append(isOnQueue) }
        } }
        var configuration = ResumableURLSession.Configuration(stateDirectory: fixture.state)
        configuration.timeoutIntervalForRequest = 5
        let (paths, continuation) = AsyncStream.makeStream(of: NetworkPath.self)
        continuation.yield(ScriptedPaths.online())
        let operationQueue = OperationQueue()
        operationQueue.underlyingQueue = queue
        operationQueue.maxConcurrentOperationCount = 1
        let session = ResumableURLSession(configuration: configuration, delegate: delegate, delegateQueue: operationQueue,
                                          pathSource: .stream(paths))
        let task = session.downloadTask(with: fixture.nginx.url("f.bin"))
        task.resume()
        #expect(await delegate.waitForCompletion(of: task))
        #expect(!onQueue.withLock { $0 }.isEmpty && onQueue.withLock { $0 }.allSatisfy { $0 })
        session.invalidateAndCancel()
        await session.waitUntilInvalidated()
    }
}
