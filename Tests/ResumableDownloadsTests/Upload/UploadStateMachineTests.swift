import Foundation
import Testing
@testable import ResumableDownloads

/// The upload protocols' decisions, without sockets: the requests chosen, the offsets believed,
/// the failures resumed or not.
@Suite("Upload state machine")
struct UploadStateMachineTests {
    static let url = URL(string: "http://uploads.example/files")!
    static let length: Int64 = 10_000

    static func machine(_ chosen: UploadProtocol, method: HTTPMethod = .post, allowsPlainRetry: Bool = false) -> UploadStateMachine {
        UploadStateMachine(url: url, fileName: "storm.jpg", length: length, method: method, protocol: chosen,
                           allowsPlainRetry: allowsPlainRetry)
    }

    static func head(_ status: Int, _ fields: [String: String] = [:]) -> ResponseHead { ResponseHead(statusCode: status, fields: fields) }

    static func request(_ action: UploadStateMachine.Action) -> UploadStateMachine.Request? {
        if case .send(let request) = action { return request }
        return nil
    }

    static func failure(_ action: UploadStateMachine.Action) -> (DownloadError, Bool)? {
        if case .fail(let error, let resumable) = action { return (error, resumable) }
        return nil
    }

    /// An IETF upload whose 104 arrived and whose creation failed after `sent` bytes.
    static func interruptedDraft(sent: Int64) -> UploadStateMachine {
        var machine = machine(.ietf)
        _ = machine.event(.start)
        let interim = head(104, ["Location": "/files/abc", "Upload-Draft-Interop-Version": "6"])
        _ = machine.event(.failed(.networkConnectionLost, interim: [interim], bytesSent: sent))
        return machine
    }

    @Test func autoAsksTheServerAndPicksTus() throws {
        var machine = Self.machine(.auto)
        let options = try #require(Self.request(machine.event(.start)))
        #expect(options.method == .options)
        let create = try #require(Self.request(machine.event(.answered(Self.head(204, ["Tus-Resumable": "1.0.0"]), interim: [], bytesSent: 0))))
        #expect(create.method == .post)
        #expect(create.bodyOffset == nil)
        #expect(create.headerFields.contains("Upload-Length: 10000"))
        #expect(create.headerFields.contains("Upload-Metadata: filename \(Data("storm.jpg".utf8).base64EncodedString())"))
        #expect(machine.protocolInUse == .tus)
        let patch = try #require(Self.request(machine.event(.answered(Self.head(201, ["Location": "/files/t1"]), interim: [], bytesSent: 0))))
        #expect(patch.method == .patch)
        #expect(patch.url.absoluteString == "http://uploads.example/files/t1")
        #expect(patch.bodyOffset == 0)
        #expect(patch.headerFields.contains("Content-Type: application/offset+octet-stream"))
        #expect(patch.headerFields.contains("Upload-Offset: 0"))
        #expect(patch.bodyLength == Self.length)   // under the 1 MiB piece size
        let done = machine.event(.answered(Self.head(204, ["Upload-Offset": "10000"]), interim: [], bytesSent: Self.length))
        #expect(done == .finish(Self.head(204, ["Upload-Offset": "10000"])))
        #expect(machine.totalBytesSent == Self.length)
    }

    /// A connection failure waits for the host's probe turn (the downloads' pace, with its own,
    /// larger budget: about a minute of probes); a status worth retrying backs off.
    @Test func connectionFailuresWaitForTheServerAndStatusesBackOff() throws {
        var machine = Self.interruptedDraft(sent: 4000)
        #expect(Self.request(machine.event(.retry))?.method == .head)
        #expect(machine.event(.answered(Self.head(503), interim: [], bytesSent: 0)) == .waitAndRetry(failures: 2))
        _ = machine.event(.retry)
        for failures in 3..<UploadStateMachine.maximumProbesWithoutProgress {
            #expect(machine.event(.failed(.timedOut, interim: [], bytesSent: 0)) == .waitForServer(failures: failures))
            _ = machine.event(.retry)
        }
        let (error, resumable) = try #require(Self.failure(machine.event(.failed(.cannotConnectToHost, interim: [], bytesSent: 0))))
        #expect(error.code == .connectivityTimeout)
        #expect(resumable)
    }

    @Test func autoFallsBackToTheDraftWithoutTus() throws {
        var machine = Self.machine(.auto)
        _ = machine.event(.start)
        let create = try #require(Self.request(machine.event(.answered(Self.head(405), interim: [], bytesSent: 0))))
        #expect(create.method == .post)
        #expect(create.bodyOffset == 0)
        #expect(create.headerFields.contains("Upload-Draft-Interop-Version: 6"))
        #expect(create.headerFields.contains("Upload-Complete: ?1"))
        #expect(machine.protocolInUse == .ietf)
    }

    @Test func draftResumesFromTheServersOffset() throws {
        var machine = Self.interruptedDraft(sent: 6000)
        #expect(machine.uploadURL?.absoluteString == "http://uploads.example/files/abc")
        #expect(machine.resumeState(file: UploadFileIdentity(size: Self.length), path: "/p")?.uploadURL == machine.uploadURL)
        let ask = try #require(Self.request(machine.event(.retry)))
        #expect(ask.method == .head)
        #expect(ask.url == machine.uploadURL)
        let patch = try #require(Self.request(machine.event(.answered(
            Self.head(204, ["Upload-Offset": "4096", "Upload-Complete": "?0"]), interim: [], bytesSent: 0))))
        #expect(patch.method == .patch)
        #expect(patch.bodyOffset == 4096)
        #expect(patch.headerFields.contains("Upload-Offset: 4096"))
        #expect(patch.headerFields.contains("Content-Type: application/partial-upload"))
        #expect(machine.acknowledged == 4096)
        let done = machine.event(.answered(Self.head(201, ["Upload-Offset": "10000", "Upload-Complete": "?1"]), interim: [],
                                           bytesSent: Self.length - 4096))
        guard case .finish = done else { Issue.record("\(done)"); return }
        #expect(machine.totalBytesSent == 6000 + Self.length - 4096)
    }

    @Test(arguments: [
        ("6001", "past the 6000 bytes sent"),
        ("20000", "beyond the file"),
        ("-1", "not a byte count"),
        ("+5", "not a byte count"),
        ("1e3", "not a byte count"),
    ])
    func aLyingOffsetEndsTheUpload(offset: String, words: String) throws {
        var machine = Self.interruptedDraft(sent: 6000)
        _ = machine.event(.retry)
        let action = machine.event(.answered(Self.head(204, ["Upload-Offset": offset]), interim: [], bytesSent: 0))
        let (error, resumable) = try #require(Self.failure(action))
        #expect(error.description.contains(words), "\(error)")
        #expect(!resumable)
    }

    @Test func anOffsetGoingBackwardsEndsTheUpload() throws {
        var machine = Self.interruptedDraft(sent: 6000)
        _ = machine.event(.retry)
        _ = machine.event(.answered(Self.head(204, ["Upload-Offset": "5000"]), interim: [], bytesSent: 0))
        // The append fails, and the server now claims less than it acknowledged.
        _ = machine.event(.failed(.networkConnectionLost, interim: [], bytesSent: 100))
        _ = machine.event(.retry)
        let action = machine.event(.answered(Self.head(204, ["Upload-Offset": "4000"]), interim: [], bytesSent: 0))
        let (error, _) = try #require(Self.failure(action))
        #expect(error.description.contains("lost bytes it had confirmed"))
    }

    @Test func aConflictAsksAgainAndAConflictingLieEnds() throws {
        var machine = Self.interruptedDraft(sent: 6000)
        _ = machine.event(.retry)
        _ = machine.event(.answered(Self.head(204, ["Upload-Offset": "5000"]), interim: [], bytesSent: 0))
        let ask = try #require(Self.request(machine.event(.answered(Self.head(409), interim: [], bytesSent: 0))))
        #expect(ask.method == .head)
        _ = machine.event(.answered(Self.head(204, ["Upload-Offset": "5000"]), interim: [], bytesSent: 0))
        let action = machine.event(.answered(Self.head(409, ["Upload-Offset": "100"]), interim: [], bytesSent: 0))
        #expect(Self.failure(action) != nil)
    }

    @Test func aPlainServerLosesTheUploadWithoutResumeData() throws {
        var machine = Self.machine(.ietf)
        _ = machine.event(.start)
        let action = machine.event(.failed(.networkConnectionLost, interim: [], bytesSent: 3000))
        let (error, resumable) = try #require(Self.failure(action))
        #expect(error.errorCode == -1005)
        #expect(!resumable)
        #expect(machine.resumeState(file: UploadFileIdentity(size: Self.length), path: "/p") == nil)
    }

    @Test func aPutIsRetriedFromZeroOnlyWhenAllowed() throws {
        var refused = Self.machine(.put, method: .put)
        _ = refused.event(.start)
        #expect(Self.failure(refused.event(.failed(.networkConnectionLost, interim: [], bytesSent: 10))) != nil)

        var allowed = Self.machine(.put, method: .put, allowsPlainRetry: true)
        _ = allowed.event(.start)
        #expect(allowed.event(.failed(.networkConnectionLost, interim: [], bytesSent: 10)) == .waitForServer(failures: 1))
        let again = try #require(Self.request(allowed.event(.retry)))
        #expect(again.method == .put)
        #expect(again.bodyOffset == 0)

        // A POST is never sent twice, even when plain retries are allowed.
        var post = Self.machine(.ietf, method: .post, allowsPlainRetry: true)
        _ = post.event(.start)
        #expect(Self.failure(post.event(.failed(.networkConnectionLost, interim: [], bytesSent: 10))) != nil)
    }

    @Test func aVanishedUploadIsNotResumable() throws {
        var machine = Self.interruptedDraft(sent: 100)
        _ = machine.event(.retry)
        let (error, resumable) = try #require(Self.failure(machine.event(.answered(Self.head(404), interim: [], bytesSent: 0))))
        #expect(error.description.contains("no longer has the upload"))
        #expect(!resumable)
    }

    /// Resume data from a cut after 6000 bytes were sent and 4096 acknowledged: the server may
    /// hold all 6000 (the answer to the append was lost), which is no lie; 6001 is.
    @Test(arguments: [("6000", true), ("5000", true), ("6001", false), ("4000", false)])
    func resumeDataKeepsWhatWasSentUnacknowledged(offset: String, isBelieved: Bool) throws {
        var first = Self.interruptedDraft(sent: 6000)
        _ = first.event(.retry)
        _ = first.event(.answered(Self.head(204, ["Upload-Offset": "4096"]), interim: [], bytesSent: 0))
        let state = try #require(first.resumeState(file: UploadFileIdentity(size: Self.length), path: "/p"))
        #expect(state.acknowledgedOffset == 4096)
        #expect(state.sentUpTo == 6000)
        try state.validate()
        var machine = UploadStateMachine(url: Self.url, fileName: "storm.jpg", length: Self.length, method: .post,
                                         protocol: .auto, allowsPlainRetry: false, resuming: state)
        #expect(Self.request(machine.event(.start))?.method == .head)
        let action = machine.event(.answered(Self.head(204, ["Upload-Offset": offset]), interim: [], bytesSent: 0))
        if isBelieved {
            let patch = try #require(Self.request(action), "\(action)")
            #expect(patch.bodyOffset == Int64(offset))
        } else {
            #expect(Self.failure(action) != nil, "\(action)")
        }
        var older = state
        older.sentUpTo = nil   // resume data from before the field: the file's length bounds it
        try older.validate()
        older.sentUpTo = 4000  // below what was acknowledged
        #expect(throws: DownloadError.self) { try older.validate() }
        older.sentUpTo = Self.length + 1
        #expect(throws: DownloadError.self) { try older.validate() }
    }

    @Test func resumeStateRoundTripsAndIsChecked() throws {
        let state = UploadResumeState(url: Self.url, uploadURL: URL(string: "http://uploads.example/files/abc")!, protocolInUse: .tus,
                                      acknowledgedOffset: 400, length: Self.length, file: UploadFileIdentity(size: Self.length),
                                      filePath: "/tmp/storm.jpg")
        let decoded = try JSONDecoder().decode(UploadResumeState.self, from: JSONEncoder().encode(state))
        #expect(decoded == state)
        try decoded.validate()
        var wrong = state
        wrong.acknowledgedOffset = Self.length + 1
        #expect(throws: DownloadError.self) { try wrong.validate() }
        wrong = state
        wrong.protocolInUse = .put
        #expect(throws: DownloadError.self) { try wrong.validate() }
        wrong = state
        wrong.version = 99
        #expect(throws: DownloadError.self) { try wrong.validate() }

        var machine = UploadStateMachine(url: Self.url, fileName: "storm.jpg", length: Self.length, method: .post,
                                         protocol: .auto, allowsPlainRetry: false, resuming: state)
        let ask = try #require(Self.request(machine.event(.start)))
        #expect(ask.method == .head)
        #expect(ask.headerFields == ["Tus-Resumable: 1.0.0"])
    }
}

extension UploadFileIdentity {
    init(size: Int64) {
        self.init(size: size, modified: 1, device: 1, inode: 1)
    }
}
