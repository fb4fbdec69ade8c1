import Foundation
import Testing
@testable import ReachabilityCLI
@testable import ResumableDownloads

/// `download --mirror/--same-file` (issue 34): the options read once, and the pure failover
/// deciding from a download's events when to leave a source for the next.
@Suite("download mirrors")
struct MirrorFailoverTests {
    static let a = URL(string: "http://a.example/f.iso")!
    static let b = URL(string: "http://b.example/pub/f.iso")!
    static let c = URL(string: "https://c.example/f.iso?t=1")!

    @Test func sameFileMakesOneJobNamedAfterTheFirstURL() throws {
        let command = try DownloadCommandTests.parse(["--same-file", Self.a.absoluteString, Self.b.absoluteString, Self.c.absoluteString])
        let jobs = try command.jobs(workingDirectory: "/w")
        #expect(jobs == [DownloadCommand.Job(url: Self.a, destination: URL(fileURLWithPath: "/w/f.iso"), mirrors: [Self.b, Self.c])])
    }

    @Test func mirrorOptionsFollowTheURLInTheirOrder() throws {
        let command = try DownloadCommandTests.parse(["-o", "x.iso", "--mirror", Self.c.absoluteString, "--mirror", Self.b.absoluteString,
                                                      "--mirror", Self.a.absoluteString, Self.a.absoluteString])
        let jobs = try command.jobs(workingDirectory: "/w")
        #expect(jobs.map(\.mirrors) == [[Self.c, Self.b]], "the URL itself and repeats are dropped")
        #expect(jobs.first?.destination.path == "/w/x.iso")
        let plain = try DownloadCommandTests.parse([Self.a.absoluteString, "http://b.example/g.iso"])
        #expect(try plain.jobs(workingDirectory: "/w").allSatisfy(\.mirrors.isEmpty))
    }

    @Test(arguments: [
        (["--same-file", "http://a.example/f"], "needs two or more URLs"),
        (["--mirror", "http://c.example/f", "http://a.example/f", "http://b.example/g"], "give one URL, or '--same-file'"),
        (["--mirror", "ftp://c.example/f", "http://a.example/f"], "expected an http or https URL"),
    ])
    func refusesWhatIsNotOneFile(arguments: [String], message: String) {
        Self.expectUsageError(arguments, message)
    }

    /// `download` with `arguments` is a usage error whose message contains `message`.
    static func expectUsageError(_ arguments: [String], _ message: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try DownloadCommandTests.parse(arguments)
            Issue.record("accepted \(arguments)", sourceLocation: sourceLocation)
        } catch let error as UsageError {
            #expect(error.message.contains(message), "\(error.message)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func aSourceProblemMovesToTheNextSourceOnceEach() {
        var failover = MirrorFailover(primary: Self.a, mirrors: [Self.b, Self.c])
        #expect(failover.handle(.started) == .stay)
        #expect(failover.handle(.retrying(after: .seconds(1), error: .networkConnectionLost)) == .stay)
        guard case .change(let next, let reason) = failover.handle(.failed(.checksumMismatch)) else {
            Issue.record("stayed after a SHA-256 mismatch"); return
        }
        #expect(next == Self.b && reason.contains("its bytes were discarded"), "\(reason)")
        guard case .change(let last, _) = failover.handle(.waitingForServer(.cannotConnectToHost)) else {
            Issue.record("stayed with a server that does not answer"); return
        }
        #expect(last == Self.c && failover.current == Self.c)
        // The last source keeps the download's own behaviour: wait, or fail for good.
        #expect(failover.handle(.waitingForServer(.cannotConnectToHost)) == .stay)
        #expect(failover.handle(.failed(.httpStatus)) == .stay)
    }

    /// A busy server (5xx, 429) is not waited out while another source may answer; a dropped
    /// connection is retried on the same source.
    @Test func aBusyServerIsLeftAtItsFirstRetry() {
        var failover = MirrorFailover(primary: Self.a, mirrors: [Self.b])
        #expect(failover.handle(.retrying(after: .seconds(1), error: .networkConnectionLost)) == .stay)
        let busy = DownloadError.httpStatus(503)
        #expect(failover.handle(.retrying(after: .seconds(1), error: busy)) == .change(to: Self.b, reason: busy.description))
    }

    @Test(arguments: [DownloadError.diskFull, .fileSystem, .cancelled, .destinationExists, .destinationInUse, .untrustedFile])
    func localFailuresStay(error: DownloadError) {
        var failover = MirrorFailover(primary: Self.a, mirrors: [Self.b])
        #expect(failover.handle(.failed(error)) == .stay)
        #expect(failover.current == Self.a)
    }

    @Test(arguments: [DownloadError.httpStatus, .badServerResponse, .lengthMismatch, .cannotConnectToHost, .secureConnectionFailed,
                      .connectivityTimeout])
    func serverFailuresMoveOn(error: DownloadError) {
        var failover = MirrorFailover(primary: Self.a, mirrors: [Self.b])
        #expect(failover.handle(.failed(error)) == .change(to: Self.b, reason: error.description))
    }
}
