import Foundation
import LinuxReachability
import ResumableDownloads
import Synchronization
import Testing
@testable import ResumableURLSession
import TestSupport

/// Resume data as hostile input, end to end: forged, foreign, stale, reused, planted files.
@Suite("ResumableURLSession resume data as input", .serialized,
       .needsNginx)
struct URLSessionResumeDataTests: DownloadScenarios {
    typealias Fixture = URLSessionLoopbackTests.Fixture

    /// A download stopped by `cancel(byProducingResumeData:)` after `bytes`: the fixture, its
    /// content and the resume data (the session is shut down).
    static func stoppedDownload(seed: UInt64, bytes: Int64 = 1 << 20) async throws -> (Fixture, Data, Data) {
        let fixture = try Fixture()
        let content = F.randomData(count: 6 << 20, seed: seed)
        try fixture.nginx.serve(content, at: "slow/big.iso")
        let client = fixture.session()
        let task = client.session.downloadTask(with: fixture.nginx.url("slow/big.iso"))
        task.resume()
        #expect(await client.delegate.waitForBytes(bytes, of: task))
        let resumeData = try #require(await task.cancelByProducingResumeData())
        await client.shutDown()
        return (fixture, content, resumeData)
    }

    /// Resumes `data` in a new session and waits for the completion; returns the delegate.
    /// Resumes `data` in a new session and expects the task to start over at byte 0
    /// (didResumeAtOffset(0)) and finish with `content`.
    static func expectStartsOver(_ data: Data, in fixture: Fixture, finishing content: Data,
                                 sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let (delegate, task) = try await resume(data, in: fixture)
        #expect(delegate.error(of: task) == nil, "\(delegate.transcript)", sourceLocation: sourceLocation)
        #expect(delegate.finishedSHA256(of: task) == F.sha256(content), sourceLocation: sourceLocation)
        #expect(delegate.resumeOffsets(of: task) == [0], "didResumeAtOffset(0): the bytes start over\n\(delegate.transcript)",
                sourceLocation: sourceLocation)
        URLSessionLoopbackTests.expectMonotonic(delegate.totals(of: task), sourceLocation: sourceLocation)
    }

    static func resume(_ data: Data, in fixture: Fixture) async throws -> (RecordingDelegate, ResumableDownloadTask) {
        let client = fixture.session()
        let task = client.session.downloadTask(withResumeData: data)
        task.resume()
        #expect(await client.delegate.waitForCompletion(of: task), "\(client.delegate.transcript)")
        await client.shutDown()
        return (client.delegate, task)
    }

    static func rejection(_ delegate: RecordingDelegate, _ task: ResumableDownloadTask,
                          sourceLocation: SourceLocation = #_sourceLocation) -> ResumeDataError? {
        guard let error = delegate.error(of: task) else {
            Issue.record("the task succeeded: \(delegate.transcript)", sourceLocation: sourceLocation)
            return nil
        }
        #expect(error.code == .cannotWriteToFile, "\(error)", sourceLocation: sourceLocation)
        #expect(delegate.finishedSHA256(of: task) == nil, sourceLocation: sourceLocation)
        return error.userInfo[NSUnderlyingErrorKey] as? ResumeDataError
    }

    @Test func aForgedBlobIsRejectedAndTouchesNothing() async throws {
        let (fixture, content, data) = try await Self.stoppedDownload(seed: 41)
        let before = try Self.snapshot(fixture)
        var forged = data
        forged[forged.count / 2] ^= 0x20
        let (delegate, task) = try await Self.resume(forged, in: fixture)
        #expect(Self.rejection(delegate, task) == .notAuthentic)
        #expect(task.originalRequest == nil)
        #expect(try Self.snapshot(fixture) == before, "a rejected blob changes no file")
        // The genuine data still works afterwards.
        let (good, goodTask) = try await Self.resume(data, in: fixture)
        #expect(good.finishedSHA256(of: goodTask) == F.sha256(content), "\(good.transcript)")
    }

    @Test func garbageAndForeignDataAreRejected() async throws {
        let (fixture, _, data) = try await Self.stoppedDownload(seed: 42)
        for blob in [Data(), Data("hello".utf8), Data("bplist00 NSURLSessionDownloadURL".utf8), data.prefix(40)] {
            let (delegate, task) = try await Self.resume(blob, in: fixture)
            #expect(Self.rejection(delegate, task) == .malformed)
        }
        // Made with another state directory (another key).
        let other = try F.Directory("urlsession-other")
        let foreign = LoopbackSession(state: other.file("state"), finished: other.file("finished"))
        let task = foreign.session.downloadTask(withResumeData: data)
        task.resume()
        #expect(await foreign.delegate.waitForCompletion(of: task))
        #expect(Self.rejection(foreign.delegate, task) == .notAuthentic)
        await foreign.shutDown()
    }

    @Test func aPartialFileThatIsGoneRestartsCleanly() async throws {
        let (fixture, content, data) = try await Self.stoppedDownload(seed: 43)
        let downloads = fixture.state.appendingPathComponent("downloads")
        for name in try FileManager.default.contentsOfDirectory(atPath: downloads.path) where name.hasSuffix(".part") {
            try FileManager.default.removeItem(at: downloads.appendingPathComponent(name))
        }
        try await Self.expectStartsOver(data, in: fixture, finishing: content)
    }

    @Test func aReplacedOrShortenedPartialFileMakesTheDataStale() async throws {
        let (fixture, content, data) = try await Self.stoppedDownload(seed: 44)
        let downloads = fixture.state.appendingPathComponent("downloads")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: downloads.path).first { $0.hasSuffix(".part") })
        let partial = downloads.appendingPathComponent(name)
        let stored = try Data(contentsOf: partial)

        // Same bytes, another file (another inode): not what the data vouched for.
        try FileManager.default.removeItem(at: partial)
        try stored.write(to: partial)
        let (replaced, replacedTask) = try await Self.resume(data, in: fixture)
        #expect(Self.rejection(replaced, replacedTask) == .stale)
        #expect(try Data(contentsOf: partial) == stored, "left alone")

        // The original inode again, but cut short.
        let (fresh, freshData) = try await Self.stoppedDownloadIn(fixture, content: content)
        _ = fresh
        let newName = try #require(try FileManager.default.contentsOfDirectory(atPath: downloads.path)
            .first { $0.hasSuffix(".part") && $0 != name })
        let newPartial = downloads.appendingPathComponent(newName).path
        var before = stat()
        #expect(stat(newPartial, &before) == 0)
        let modified = before.st_mtim
        #expect(truncate(newPartial, 1000) == 0)
        let (written, writtenTask) = try await Self.resume(freshData, in: fixture)
        #expect(Self.rejection(written, writtenTask) == .stale, "written since the data was made")
        // Even with the timestamp put back, fewer bytes than promised is stale.
        var times = [before.st_atim, modified]
        #expect(utimensat(AT_FDCWD, newPartial, &times, 0) == 0)
        #expect(try Self.modificationTime(newPartial).tv_nsec == modified.tv_nsec)
        let (short, shortTask) = try await Self.resume(freshData, in: fixture)
        let rejection = Self.rejection(short, shortTask)
        #expect(rejection == .stale)
        #expect(rejection?.description.contains("holds 1000 bytes") == true, "\(String(describing: rejection))")
    }

    @Test func plantedLinksAreNeverWrittenThrough() async throws {
        let (fixture, _, data) = try await Self.stoppedDownload(seed: 45)
        let downloads = fixture.state.appendingPathComponent("downloads")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: downloads.path).first { $0.hasSuffix(".part") })
        let partial = downloads.appendingPathComponent(name)
        let victim = fixture.directory.file("victim.txt")
        try Data("do not touch".utf8).write(to: victim)
        // A symlink in place of the partial file.
        try FileManager.default.removeItem(at: partial)
        try FileManager.default.createSymbolicLink(at: partial, withDestinationURL: victim)
        let (symlinked, symlinkedTask) = try await Self.resume(data, in: fixture)
        #expect(Self.rejection(symlinked, symlinkedTask) == .unsafeFile)
        // A hard link in its place.
        try FileManager.default.removeItem(at: partial)
        #expect(link(victim.path, partial.path) == 0)
        let (hardLinked, hardLinkedTask) = try await Self.resume(data, in: fixture)
        #expect(Self.rejection(hardLinked, hardLinkedTask) == .unsafeFile)
        #expect(try String(contentsOf: victim, encoding: .utf8) == "do not touch")
    }

    @Test func theSameDataTwiceAtOnceRunsOnlyOnce() async throws {
        let (fixture, content, data) = try await Self.stoppedDownload(seed: 46)
        let client = fixture.session()
        let tasks = [client.session.downloadTask(withResumeData: data), client.session.downloadTask(withResumeData: data)]
        // Both start together: whichever locks the download first runs it, the other is refused.
        for task in tasks { task.resume() }
        for task in tasks { #expect(await client.delegate.waitForCompletion(of: task), "\(client.delegate.transcript)") }
        let refused = tasks.filter { client.delegate.error(of: $0) != nil }
        let finished = tasks.filter { client.delegate.error(of: $0) == nil }
        #expect(refused.count == 1 && finished.count == 1, "\(client.delegate.transcript)")
        if let task = refused.first { #expect(Self.rejection(client.delegate, task) == .inUse) }
        if let task = finished.first { #expect(client.delegate.finishedSHA256(of: task) == F.sha256(content)) }
        await client.shutDown()
    }

    @Test func aResourceThatChangedStartsOverAtZero() async throws {
        let (fixture, _, data) = try await Self.stoppedDownload(seed: 47)
        // Another length, so nginx's ETag changes even within the same second.
        let replacement = F.randomData(count: (6 << 20) + 4096, seed: 470)
        try fixture.nginx.serve(replacement, at: "slow/big.iso")
        try await Self.expectStartsOver(data, in: fixture, finishing: replacement)
    }

    @Test func cancellingBeforeResumeHandsBackTheSameData() async throws {
        let (fixture, _, data) = try await Self.stoppedDownload(seed: 48)
        let client = fixture.session()
        let task = client.session.downloadTask(withResumeData: data)
        #expect(await task.cancelByProducingResumeData() == data)
        await client.shutDown()
    }

    @Test func aServerWithoutValidatorsGivesNoResumeData() async throws {
        let directory = try F.Directory("urlsession-novalidator")
        let content = F.randomData(count: 4 << 20, seed: 49)
        let server = try DownloadTestHTTPServer { _, _ in
            // No ETag, no Last-Modified: a resume could splice two versions, so none is offered.
            .init(status: 200, body: content, stallAfter: 1 << 20)
        }
        defer { server.stop() }
        let client = LoopbackSession(state: directory.file("state"), finished: directory.file("finished"))
        let task = client.session.downloadTask(with: server.url())
        task.resume()
        // Bytes on disk (progress is throttled, and a burst followed by a stall reports none).
        let downloads = directory.file("state/downloads").path
        #expect(F.waitSync {
            ((try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? []).contains { name in
                name.hasSuffix(".part") && ((try? FileManager.default.attributesOfItem(atPath: downloads + "/" + name))?[.size] as? Int ?? 0) > 0
            }
        })
        #expect(await task.cancelByProducingResumeData() == nil)
        await client.shutDown()
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.file("state/downloads").path)
        #expect(left.isEmpty, "nothing can resume it, so nothing is kept: \(left)")
    }

    // MARK: helpers

    /// Another stopped download of `content` in the same fixture.
    static func stoppedDownloadIn(_ fixture: Fixture, content: Data) async throws -> (RecordingDelegate, Data) {
        let client = fixture.session()
        let task = client.session.downloadTask(with: fixture.nginx.url("slow/big.iso"))
        task.resume()
        #expect(await client.delegate.waitForBytes(1 << 20, of: task))
        let data = try #require(await task.cancelByProducingResumeData())
        await client.shutDown()
        return (client.delegate, data)
    }

    static func modificationTime(_ path: String) throws -> timespec {
        var info = stat()
        guard stat(path, &info) == 0 else { throw POSIXError(.ENOENT) }
        return info.st_mtim
    }

    /// Names, sizes and inodes of every file under the state directory.
    static func snapshot(_ fixture: Fixture) throws -> [String: [Int]] {
        var result: [String: [Int]] = [:]
        let root = fixture.state
        for sub in ["downloads", "records"] {
            for name in try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(sub).path) {
                var info = stat()
                _ = lstat(root.appendingPathComponent(sub).appendingPathComponent(name).path, &info)
                result[sub + "/" + name] = [Int(info.st_size), Int(info.st_ino), Int(info.st_mtim.tv_nsec)]
            }
        }
        return result
    }
}
