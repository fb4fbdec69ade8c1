import Foundation
import LinuxReachability
import Testing
@testable import ResumableDownloads
import TestSupport

/// Servers that break the rules. Each test ends with a SHA-256 match or a clear error, and never
/// with a corrupt file at the destination.
@Suite("Downloads from a hostile server", .serialized)
struct DownloadHostileServerTests: DownloadScenarios {

    static let content = F.randomData(count: 3 << 20 + 5, seed: 42)
    static let half = content.count / 2
    static let etag = "\"v1\""

    func run(_ server: Server, options: DownloadOptions? = nil,
             edit: (inout DownloadAgent.Configuration) -> Void = { _ in }) async throws -> (Result<URL, DownloadError>, F.EventLog, F.Directory) {
        let directory = try F.Directory()
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state"), edit))
        let download = try await agent.download(from: server.url(), to: directory.file("out.bin"),
                                                options: options ?? .init(expectedSHA256: F.sha256(Self.content)))
        let log = F.EventLog(download)
        let result: Result<URL, DownloadError>
        do { result = .success(try await F.finish(download, log: log)) } catch let error as DownloadError { result = .failure(error) }
        await agent.shutdown()
        return (result, log, directory)
    }

    /// A failed download leaves neither the file nor its partial file.
    func expectNothingLeft(_ directory: F.Directory, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin").path), sourceLocation: sourceLocation)
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin.part").path), sourceLocation: sourceLocation)
    }

    func expectIntact(_ directory: F.Directory) {
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(Self.content))
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin.part").path))
    }

    @Test func shortBodyResumesWithARange() async throws {
        let server = try Server { request, index in
            .honest(request, content: Self.content, etag: Self.etag, closeAfter: index == 0 ? Self.half : nil)
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(server.requests.count == 2)
        // The resume re-fetches the bytes before the offset and compares them with the disk: the
        // group's first connection compares `firstOverlap` (16 KiB; the ETag proves the entity too).
        #expect(server.requests[1].rangeStart == Int64(Self.half) - min(ResumeOverlap.maximum, SegmentPlanner.Configuration(maximumConnections: 1).firstOverlap))
        #expect(server.requests[1].ifRange == Self.etag)
        #expect(server.requests[1].headers["accept-encoding"] == "identity")
        #expect(log.resumedOffsets == [Int64(Self.half)])
        #expect(log.all.contains { if case .retrying(_, let error) = $0 { error == .networkConnectionLost } else { false } })
    }

    @Test func wrongContentRangeRestartsFromZero() async throws {
        let server = try Server { request, index in
            switch index {
            case 0: return .honest(request, content: Self.content, etag: Self.etag, closeAfter: Self.half)
            case 1:
                // Claims to start 100 bytes early: splicing this would corrupt the file.
                let start = Int(request.rangeStart ?? 0) - 100
                return Reply(status: 206, headers: [("ETag", Self.etag),
                                                    ("Content-Range", "bytes \(start)-\(Self.content.count - 1)/\(Self.content.count)")],
                             body: Self.content.subdata(in: start..<Self.content.count))
            default: return .honest(request, content: Self.content, etag: Self.etag)
            }
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.restarts == 1)
        #expect(server.requests.last?.rangeStart == nil)
    }

    @Test func partialResponseWithoutContentRangeRestarts() async throws {
        let server = try Server { request, index in
            switch index {
            case 0: return .honest(request, content: Self.content, etag: Self.etag, closeAfter: Self.half)
            case 1: return Reply(status: 206, headers: [("ETag", Self.etag)],
                                 body: Self.content.subdata(in: Int(request.rangeStart ?? 0)..<Self.content.count))
            default: return .honest(request, content: Self.content, etag: Self.etag)
            }
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.restarts == 1)
    }

    @Test func serverIgnoringRangeRestartsWithTheFullBody() async throws {
        let server = try Server { request, index in
            // Never honours Range: always a full 200.
            Reply(status: 200, headers: [("ETag", Self.etag)], body: Self.content, closeAfter: index == 0 ? Self.half : nil)
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(server.requests.count == 2)
        #expect(log.restarts == 1, "\(log.all)")
    }

    /// A server that cuts `content` at half, then serves version 2 (another ETag, other bytes):
    /// If-Range v1 does not match, so a correct server sends 200 with v2. Returns v2 too.
    static func changingServer() throws -> (Server, Data) {
        let newContent = F.randomData(count: 2 << 20 + 3, seed: 99)
        let server = try Server { request, index in
            if index == 0 { return .honest(request, content: Self.content, etag: Self.etag, closeAfter: Self.half) }
            return .honest(request, content: newContent, etag: "\"v2\"")
        }
        return (server, newContent)
    }

    @Test func changedResourceIsNeverSpliced() async throws {
        let (server, newContent) = try Self.changingServer()
        let (result, log, directory) = try await run(server, options: .init())
        #expect(throws: Never.self) { try result.get() }
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(newContent))
        #expect(log.restarts == 1, "\(log.all)")
    }

    @Test func changedResourceWithExpectedChecksumFailsClearly() async throws {
        let (server, _) = try Self.changingServer()
        let (result, _, directory) = try await run(server)
        #expect(throws: DownloadError.checksumMismatch) { try result.get() }
        expectNothingLeft(directory)
    }

    @Test func bodyLongerThanContentLengthIsCutAtTheAnnouncedLength() async throws {
        let server = try Server { _, _ in
            var reply = Reply(status: 200, headers: [("ETag", Self.etag), ("Content-Length", "\(Self.content.count)")],
                              body: Self.content + Data(repeating: 0xAB, count: 4096))
            reply.sendsContentLength = false
            return reply
        }
        let (result, _, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
    }

    @Test func rangeBodyLongerThanContentRangeFailsClearly() async throws {
        let server = try Server { request, index in
            if index == 0 { return .honest(request, content: Self.content, etag: Self.etag, closeAfter: Self.half) }
            // Close-delimited 206 that keeps going past the announced range end.
            let start = Int(request.rangeStart ?? 0)
            return Reply(status: 206, headers: [("ETag", Self.etag),
                                                ("Content-Range", "bytes \(start)-\(start + 999)/\(Self.content.count)")],
                         body: Self.content.subdata(in: start..<Self.content.count), sendsContentLength: false)
        }
        let (result, _, directory) = try await run(server)
        #expect(throws: DownloadError.badServerResponse) { try result.get() }
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin").path))
    }

    @Test func serviceUnavailableHonoursRetryAfter() async throws {
        let server = try Server { request, index in
            if index < 2 { return Reply(status: 503, headers: [("Retry-After", "0")], body: Data("busy".utf8)) }
            return .honest(request, content: Self.content, etag: Self.etag)
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.all.filter { if case .retrying(_, let error) = $0 { error.httpStatusCode == 503 } else { false } }.count == 2)
    }

    @Test func aResumeAfterTheLastByteCompletes() async throws {
        let server = try Server { request, index in
            // First attempt delivers everything but dies before libcurl sees the end cleanly.
            if index == 0 { return .honest(request, content: Self.content, etag: Self.etag, closeAfter: Self.content.count - 1) }
            return .honest(request, content: Self.content, etag: Self.etag)
        }
        let (result, _, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
    }

    /// `416 bytes */N` at the resume offset while the recorded total was larger: the server
    /// truncated the file (or lies). Never a short "success": restart, then a clear result.
    @Test func a416ShorterThanTheRecordedTotalIsNotCompletion() async throws {
        let server = try Server { request, index in
            if index == 0 { return .honest(request, content: Self.content, etag: Self.etag, closeAfter: Self.half) }
            if let start = request.rangeStart {
                return Reply(status: 416, headers: [("Content-Range", "bytes */\(start + ResumeOverlap.maximum)")])
            }
            return .honest(request, content: Self.content, etag: Self.etag)
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.restarts == 1, "\(log.all)")
    }

    /// Servers that ignore If-Range and answer a resume with a 206 of a changed file: a
    /// different Last-Modified, a changed weak ETag, no ETag after a strong one, no validators at
    /// all. Each is caught (validator or overlap comparison) and the file restarts from zero: the
    /// result is the new version, never a splice.
    @Test(arguments: ["lastModified", "weakETag", "droppedETag", "noValidators"])
    func aServerIgnoringIfRangeNeverSplices(_ kind: String) async throws {
        let newContent = F.randomData(count: Self.content.count, seed: 1234)
        let server = try Server { request, index in
            let old = index == 0
            let body = old ? Self.content : newContent
            var headers: [(String, String)] = [("Date", "Tue, 02 Jan 2024 00:00:00 GMT")]
            switch kind {
            case "lastModified": headers.append(("Last-Modified", old ? "Mon, 01 Jan 2024 00:00:00 GMT" : "Mon, 01 Jan 2024 12:00:00 GMT"))
            case "weakETag": headers.append(("ETag", old ? "W/\"w1\"" : "W/\"w2\""))
            case "droppedETag": if old { headers.append(("ETag", "\"strong\"")) }
            default: break
            }
            if let start = request.rangeStart.map(Int.init) {
                // Ignores If-Range: the range of whatever it has now.
                return Reply(status: 206, headers: headers + [("Content-Range", "bytes \(start)-\(body.count - 1)/\(body.count)")],
                             body: body.subdata(in: start..<body.count))
            }
            return Reply(status: 200, headers: headers, body: body, closeAfter: old ? Self.half : nil)
        }
        let (result, log, directory) = try await run(server, options: .init())
        #expect(throws: Never.self) { try result.get() }
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(newContent), "\(log.all)")
        #expect(log.restarts == 1, "\(log.all)")
    }

    /// Without any validator a resume is still possible: the overlap matches, the rest is appended.
    @Test func aServerWithoutValidatorsResumesAfterTheOverlapMatches() async throws {
        let server = try Server { request, index in
            if let start = request.rangeStart.map(Int.init) {
                return Reply(status: 206, headers: [("Content-Range", "bytes \(start)-\(Self.content.count - 1)/\(Self.content.count)")],
                             body: Self.content.subdata(in: start..<Self.content.count))
            }
            return Reply(status: 200, body: Self.content, closeAfter: index == 0 ? Self.half : nil)
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.restarts == 0, "\(log.all)")
        #expect(log.resumedOffsets == [Int64(Self.half)])
        #expect(server.requests.count == 2)
    }

    @Test(arguments: ["conflictingLength", "gzip"])
    func unrequestedEncodingsAndConflictingLengthsFail(_ kind: String) async throws {
        let server = try Server { _, _ in
            var reply = Reply(status: 200, headers: kind == "gzip" ? [("Content-Encoding", "gzip")]
                                                                   : [("Content-Length", "\(Self.content.count)"), ("Content-Length", "17")],
                              body: Self.content)
            reply.sendsContentLength = kind == "gzip"
            return reply
        }
        let (result, _, directory) = try await run(server)
        #expect(throws: DownloadError.badServerResponse) { try result.get() }
        expectNothingLeft(directory)
    }

    @Test func stalledTransferIsReconnected() async throws {
        let server = try Server { request, index in
            if index == 0 {
                return Reply(status: 200, headers: [("ETag", Self.etag)], body: Self.content, stallAfter: Self.half)
            }
            return .honest(request, content: Self.content, etag: Self.etag)
        }
        let started = ContinuousClock.now
        let (result, log, directory) = try await run(server) { $0.stallTimeout = .seconds(1) }
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        #expect(log.resumedOffsets == [Int64(Self.half)])
        #expect(ContinuousClock.now - started < .seconds(5))   // stall timeout 1 s + watchdog granularity
        server.stop()
    }

    @Test func forbiddenFailsWithoutDebris() async throws {
        let server = try Server { _, _ in Reply(status: 403, body: Data("no".utf8)) }
        let (result, _, directory) = try await run(server)
        #expect(throws: DownloadError.httpStatus) { try result.get() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted() == ["state"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("state").path).isEmpty)
    }

    @Test func followsRedirectsWithinHTTP() async throws {
        let server = try Server { request, _ in
            if request.path == "/file" { return Reply(status: 302, headers: [("Location", "/moved")]) }
            return .honest(request, content: Self.content, etag: Self.etag)
        }
        let (result, _, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
    }

    @Test func refusesRedirectsToOtherSchemes() async throws {
        let server = try Server { _, _ in Reply(status: 302, headers: [("Location", "file:///etc/passwd")]) }
        let (result, _, directory) = try await run(server)
        #expect(throws: DownloadError.unsupportedURL) { try result.get() }
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin").path))
    }

    @Test func redirectLoopsAreBounded() async throws {
        let server = try Server { request, _ in Reply(status: 302, headers: [("Location", request.path + "x")]) }
        let (result, _, _) = try await run(server) { $0.maximumRedirects = 3 }
        #expect(throws: DownloadError.tooManyRedirects) { try result.get() }
        #expect(server.requests.count == 4)
    }

    @Test func refusedConnectionsMapToCannotConnectToHost() async throws {
        let port = try F.freePort()   // nothing listens there
        let directory = try F.Directory()
        // Far more failures than the budget allows: waiting for a server spends none of it, and
        // only the outage limit ends the wait.
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.maximumConsecutiveFailures = 1
            $0.maximumOutageWait = .seconds(2)
        })
        let download = try await agent.download(from: URL(string: "http://127.0.0.1:\(port)/x")!, to: directory.file("x"))
        let log = F.EventLog(download)
        await #expect(throws: DownloadError.connectivityTimeout) { _ = try await F.finish(download, log: log) }
        let waits = log.all.compactMap { if case .waitingForServer(let error) = $0 { error } else { nil } }
        #expect(waits.count == 1, "announced once: \(log.all)")
        let error = try #require(waits.first)
        #expect(error == .cannotConnectToHost)
        #expect(error.osErrorCode == ECONNREFUSED)
        #expect(error.urlError().errorCode == -1004)
        if case .failed(let failure) = download.state {
            #expect(failure.description.contains("server could not be reached for 2 s"), "\(failure)")
            #expect(failure.urlErrorCode == .cannotConnectToHost)
            #expect(failure.isResumable)
        }
        await agent.shutdown()
    }

    @Test func connectionResetMidBodyResumes() async throws {
        let server = try Server { request, index in
            var reply = Reply.honest(request, content: Self.content, etag: Self.etag)
            if index == 0 { reply.resetAfter = Self.half }
            return reply
        }
        let (result, log, directory) = try await run(server)
        #expect(throws: Never.self) { try result.get() }
        expectIntact(directory)
        // An RST discards whatever the client kernel had not delivered yet, so the resume offset
        // can be anything up to half; the point is the classification and an intact result.
        #expect(log.all.contains { if case .retrying(_, let error) = $0 { error == .networkConnectionLost } else { false } })
    }

    @Test func aPathUpdateEndsATransportBackoff() async throws {
        // Two connections die before the first byte (connection lost), so the agent backs off
        // for at least 15 s; then the path moves to another interface and the server is fine.
        let server = try Server { request, index in
            index < 2 ? Reply(status: 200, headers: [("ETag", Self.etag)], body: Self.content, closeAfter: 0)
                      : .honest(request, content: Self.content, etag: Self.etag)
        }
        let directory = try F.Directory()
        let (agent, continuation) = try DownloadFixtures.scriptedAgent(F.configuration(state: directory.file("state")) {
                $0.initialBackoff = .seconds(30)
                $0.maximumBackoff = .seconds(30)
                }, startingAt: DownloadPathTests.wifi)
        let download = try await agent.download(from: server.url(), to: directory.file("out.bin"),
                                                options: .init(expectedSHA256: F.sha256(Self.content)))
        let log = F.EventLog(download)
        #expect(await log.wait { if case .retrying(let after, _) = $0 { after >= .seconds(10) } else { false } },
                "\(log.all)")
        let switched = ContinuousClock.now
        continuation.yield(DownloadPathTests.ethernet)
        _ = try await F.finish(download, log: log, timeout: .seconds(25))
        #expect(ContinuousClock.now - switched < .seconds(10), "the backoff outlived the path change")
        #expect(F.sha256(fileAt: directory.file("out.bin")) == F.sha256(Self.content))
        await agent.shutdown()
    }

    /// Replies libcurl cannot read are reported as what they are (curl's words), once, not as a
    /// lost connection, an unsupported URL or a full machine (issue 21).
    @Test(arguments: [
        ("chunk", "the server sent a malformed chunked body: Illegal or missing hexadecimal sequence in chunked-encoding"),
        ("length", "the server sent an impossible Content-Length (9223372036854775808: more than any file can hold)"),
        ("status", "the server's reply is not HTTP: Unsupported response code in HTTP response"),
        ("garbage", "the server's reply is not HTTP: Received HTTP/0.9 when not allowed"),
        ("huge head", "the server's response headers are too large"),
    ])
    func unreadableRepliesSayWhatIsWrong(_ kind: String, _ message: String) async throws {
        let raw: Data = switch kind {
        case "chunk": Data("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\nzz\r\n".utf8)
        case "length": Data("HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\nabc".utf8)
        case "status": Data("HTTP/1.1 2000 Weird\r\nContent-Length: 3\r\n\r\nabc".utf8)
        case "garbage": Data("\u{1}\u{2}garbage here\r\n\r\nabc".utf8)
        default: Data("HTTP/1.1 200 OK\r\nX-Big: ".utf8) + Data(repeating: 0x61, count: 1 << 20) + Data("\r\nContent-Length: 3\r\n\r\nabc".utf8)
        }
        let server = try Server { _, _ in
            var reply = Reply(status: 200)
            reply.raw = raw
            return reply
        }
        let (result, _, directory) = try await run(server, options: .init())
        #expect(throws: DownloadError.badServerResponse) { try result.get() }
        if case .failure(let error) = result { #expect(error.description.hasPrefix(message), "\(error.description)") }
        #expect(server.requests.count == 1, "not retried: \(server.requests.count)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("out.bin").path))
    }
}
