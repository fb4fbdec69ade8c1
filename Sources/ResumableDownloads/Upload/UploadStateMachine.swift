import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// The decisions of one resumable upload, without sockets: which request to send next (discovery,
/// creation, offset, append, or a plain send), what each answer means, and whether a failure can
/// be resumed. The driver (`DownloadAgent.upload`) sends what it returns and feeds back answers.
///
/// Protocols: draft-ietf-httpbis-resumable-upload-05 (`Upload-Draft-Interop-Version: 6`; creation
/// with the whole body, `104` with `Location`, offset `HEAD`, `PATCH` with
/// `application/partial-upload`) and tus 1.0 (`OPTIONS`, creation `POST` with `Upload-Length` and
/// `Upload-Metadata: filename`, `HEAD`, `PATCH` with `application/offset+octet-stream`).
/// A server's offset is checked against what was sent and acknowledged: an offset past the bytes
/// sent, beyond the file, or below what it acknowledged before ends the upload with an error.
struct UploadStateMachine: Sendable {
    /// One request to send.
    struct Request: Sendable, Equatable {
        var method: HTTPMethod
        var url: URL
        var headerFields: [String]
        /// The file's bytes sent as the body: from `offset` to the end; nil sends no body.
        var bodyOffset: Int64?
        /// How many bytes from `bodyOffset`; nil sends the rest of the file.
        var bodyLength: Int64? = nil
    }

    enum Action: Sendable, Equatable {
        case send(Request)
        /// The server answered with a status worth retrying (5xx, 408, 429): wait for a usable
        /// path and a backoff, then feed `.retry`.
        case waitAndRetry(failures: Int)
        /// The connection failed (reset, refused, timed out, lost): wait for a usable path, then
        /// for the host's next probe turn, the downloads' pace (`ServerProbeScheduler`), then
        /// feed `.retry`.
        case waitForServer(failures: Int)
        /// Done: the server has every byte (the final answer's head).
        case finish(ResponseHead)
        /// Give up; `isResumable` when the resume state can continue it later.
        case fail(DownloadError, isResumable: Bool)
    }

    enum Event: Sendable {
        case start
        /// The final head, with any interim heads before it.
        case answered(ResponseHead, interim: [ResponseHead], bytesSent: Int64)
        /// The exchange failed (transport, path gone, idle timeout) after handing `bytesSent`
        /// body bytes to the connection; `interim` heads that came before (a `104`'s Location).
        case failed(DownloadError, interim: [ResponseHead], bytesSent: Int64)
        case retry
    }

    private enum Step: Sendable, Equatable {
        case discover, create, askOffset, append(from: Int64), plainSend, done
    }

    static let tusVersion = "1.0.0"
    /// tus appends are sent in pieces of this size: a tus server may keep nothing of an append
    /// that breaks off (aiohttp-tus writes a piece only once it has all of it), so a piece is the
    /// most an outage can make us send again.
    static let tusPieceSize: Int64 = 1 << 20
    static let draftInteropVersion = "6"
    /// Failures in a row without new acknowledged bytes that end the upload (keeping its resume
    /// state), unless the caller chose another count: the last of them ends it.
    static let maximumFailuresWithoutProgress = 30
    /// Connection failures in a row without new acknowledged bytes that end it: probes come at
    /// most two a second (`ServerWaitSchedule`), so about a minute of a silent server.
    static let maximumProbesWithoutProgress = 120

    let url: URL
    let fileName: String
    let length: Int64
    let method: HTTPMethod
    let allowsPlainRetry: Bool
    /// Failures in a row (other than connection failures) that end the upload.
    let maximumFailures: Int
    private(set) var protocolInUse: UploadProtocol
    private(set) var uploadURL: URL?
    /// Bytes the server confirmed it holds.
    private(set) var acknowledged: Int64 = 0
    /// The most bytes of the file ever handed to a connection (the server cannot hold more).
    private(set) var sentUpTo: Int64 = 0
    /// Body bytes handed to connections over every attempt.
    private(set) var totalBytesSent: Int64 = 0
    private var step: Step = .discover
    private var failures = 0
    private var conflicts = 0

    /// A new upload of `length` bytes, or one continuing `state` (its URL and offset).
    init(url: URL, fileName: String, length: Int64, method: HTTPMethod, protocol chosen: UploadProtocol,
         allowsPlainRetry: Bool, maximumFailures: Int = UploadStateMachine.maximumFailuresWithoutProgress,
         resuming state: UploadResumeState? = nil) {
        self.url = url
        self.maximumFailures = max(1, maximumFailures)
        self.fileName = fileName
        self.length = length
        self.method = method
        self.allowsPlainRetry = allowsPlainRetry
        protocolInUse = state?.protocolInUse ?? chosen
        if let state {
            uploadURL = state.uploadURL
            acknowledged = state.acknowledgedOffset
            // The server may hold what was sent but not acknowledged before the cut.
            sentUpTo = state.sentUpTo ?? state.length
        }
    }

    /// What a later attempt needs to continue, once the server holds a resumable upload.
    func resumeState(file: UploadFileIdentity, path: String) -> UploadResumeState? {
        guard let uploadURL, protocolInUse == .ietf || protocolInUse == .tus else { return nil }
        return UploadResumeState(url: url, uploadURL: uploadURL, protocolInUse: protocolInUse,
                                 acknowledgedOffset: acknowledged, sentUpTo: sentUpTo, length: length, file: file, filePath: path)
    }

    mutating func event(_ event: Event) -> Action {
        switch event {
        case .start:
            if uploadURL != nil { return ask() }
            switch protocolInUse {
            case .auto:
                step = .discover
                return .send(Request(method: .options, url: url, headerFields: ["Tus-Resumable: \(Self.tusVersion)"], bodyOffset: nil))
            case .tus: return createTus()
            case .ietf: return createDraft()
            case .put: return sendPlain()
            }
        case .retry:
            if uploadURL != nil { return ask() }
            switch step {
            case .discover: return self.event(.start)
            case .plainSend: return sendPlain()
            case .create: return protocolInUse == .tus ? createTus() : createDraft()
            default: return ask()
            }
        case .answered(let head, let interim, let sent):
            note(sent: sent)
            noteLocation(interim)
            return answered(head)
        case .failed(let error, let interim, let sent):
            note(sent: sent)
            noteLocation(interim)
            return failed(error)
        }
    }

    // MARK: requests

    private var draftFields: [String] { ["Upload-Draft-Interop-Version: \(Self.draftInteropVersion)"] }
    private var tusFields: [String] { ["Tus-Resumable: \(Self.tusVersion)"] }

    private mutating func createDraft() -> Action {
        protocolInUse = .ietf
        step = .create
        return .send(Request(method: method, url: url, headerFields: draftFields + ["Upload-Complete: ?1"], bodyOffset: 0))
    }

    private mutating func createTus() -> Action {
        protocolInUse = .tus
        step = .create
        // tus clients send the name base64-encoded in Upload-Metadata; some servers refuse an
        // upload without it.
        let name = Data(fileName.utf8).base64EncodedString()
        return .send(Request(method: .post, url: url,
                             headerFields: tusFields + ["Upload-Length: \(length)", "Upload-Metadata: filename \(name)"],
                             bodyOffset: nil))
    }

    private mutating func sendPlain() -> Action {
        step = .plainSend
        sentUpTo = 0
        return .send(Request(method: protocolInUse == .put ? .put : method, url: url, headerFields: [], bodyOffset: 0))
    }

    private mutating func ask() -> Action {
        step = .askOffset
        guard let uploadURL else { return .fail(DownloadError.badServerResponse, isResumable: false) }
        return .send(Request(method: .head, url: uploadURL, headerFields: protocolInUse == .tus ? tusFields : draftFields,
                             bodyOffset: nil))
    }

    private mutating func append(from offset: Int64) -> Action {
        step = .append(from: offset)
        guard let uploadURL else { return .fail(DownloadError.badServerResponse, isResumable: false) }
        let fields = protocolInUse == .tus
            ? tusFields + ["Upload-Offset: \(offset)", "Content-Type: application/offset+octet-stream"]
            : draftFields + ["Upload-Offset: \(offset)", "Upload-Complete: ?1", "Content-Type: application/partial-upload"]
        let pieceLength = protocolInUse == .tus ? min(length - offset, Self.tusPieceSize) : nil
        return .send(Request(method: .patch, url: uploadURL, headerFields: fields, bodyOffset: offset, bodyLength: pieceLength))
    }

    // MARK: answers

    private mutating func note(sent: Int64) {
        totalBytesSent += sent
        switch step {
        case .create where protocolInUse == .ietf, .plainSend: sentUpTo = max(sentUpTo, min(length, sent))
        case .append(let from): sentUpTo = max(sentUpTo, min(length, from + sent))
        default: break
        }
    }

    /// A `104 Upload Resumption Supported` names the upload's resource.
    private mutating func noteLocation(_ interim: [ResponseHead]) {
        guard uploadURL == nil, step == .create, protocolInUse == .ietf else { return }
        for head in interim where head.statusCode == 104 {
            if let location = head["location"], let resolved = URL(string: location, relativeTo: url)?.absoluteURL {
                uploadURL = resolved
            }
        }
    }

    // Over 60 lines: one case per protocol step, each that step's answer to every status (a table).
    private mutating func answered(_ head: ResponseHead) -> Action {
        let status = head.statusCode
        switch step {
        case .discover:
            if head["tus-resumable"] != nil { return createTus() }
            return createDraft()
        case .create:
            if protocolInUse == .tus {
                guard status == 201, let location = head["location"],
                      let resolved = URL(string: location, relativeTo: url)?.absoluteURL else {
                    return statusFailure(head, "the tus server did not create the upload")
                }
                uploadURL = resolved
                failures = 0
                return append(from: 0)
            }
            guard (200..<300).contains(status) else { return statusFailure(head, "the server refused the upload") }
            if uploadURL != nil, let problem = offsetProblem(head) { return .fail(problem, isResumable: false) }
            if uploadURL != nil, head["upload-complete"] == "?0" { return ask() }
            // No 104: the server took it as a plain upload.
            if uploadURL == nil { protocolInUse = .put }
            step = .done
            return .finish(head)
        case .plainSend:
            guard (200..<300).contains(status) else { return statusFailure(head, "the server refused the upload") }
            step = .done
            return .finish(head)
        case .askOffset:
            if status == 404 || status == 410 {
                return .fail(DownloadError.httpStatus(status).with(description:
                    "the server no longer has the upload (HTTP \(status)); upload the file again"), isResumable: false)
            }
            if status >= 500 || status == 408 || status == 429 { return retryLater() }
            guard (200..<300).contains(status) else { return statusFailure(head, "the server did not say how much it holds") }
            guard head["upload-offset"] != nil else {
                return .fail(DownloadError.badServerResponse.with(description:
                    "the server did not say how much of the upload it holds (no Upload-Offset)"), isResumable: true)
            }
            if let problem = offsetProblem(head) { return .fail(problem, isResumable: false) }
            if acknowledged == length, protocolInUse == .tus || head["upload-complete"] == "?1" {
                step = .done
                return .finish(head)
            }
            return append(from: acknowledged)
        case .append:
            if status == 409 {
                // The offsets disagree: the server says where it stands (checked), or is asked.
                if head["upload-offset"] != nil, let problem = offsetProblem(head) { return .fail(problem, isResumable: false) }
                conflicts += 1
                guard conflicts <= 3 else {
                    return .fail(Self.lie("409 Conflict to every offset it gave (\(acknowledged) bytes)"), isResumable: false)
                }
                return ask()
            }
            if status >= 500 || status == 408 || status == 429 { return retryLater() }
            guard (200..<300).contains(status) else { return statusFailure(head, "the server refused the upload's data") }
            if head["upload-offset"] != nil, let problem = offsetProblem(head) { return .fail(problem, isResumable: false) }
            if protocolInUse == .ietf {
                // draft-05: a 2xx to an append with Upload-Complete: ?1 means the upload is complete.
                acknowledged = length
                step = .done
                return .finish(head)
            }
            if acknowledged == length {
                step = .done
                return .finish(head)
            }
            return append(from: acknowledged)
        case .done:
            return .finish(head)
        }
    }

    private mutating func failed(_ error: DownloadError) -> Action {
        if error == .cancelled || error.code == .fileSystem || error.code == .invalidRequest {
            return .fail(error, isResumable: uploadURL != nil)
        }
        if uploadURL != nil { return retryLater(after: error) }
        if step == .discover { return retryLater(after: error) }
        if step == .create, protocolInUse == .tus { return retryLater(after: error) }
        // No resumable upload exists on the server: Foundation's -1005 with no resume data; a
        // PUT may be sent again from zero where the caller allows it, a POST never.
        if allowsPlainRetry, step == .plainSend || step == .create, (protocolInUse == .put ? HTTPMethod.put : method).isIdempotent {
            if step == .create { protocolInUse = .put }
            step = .plainSend
            return retryLater(after: error)
        }
        return .fail(error, isResumable: false)
    }

    /// `error`: the transport failure, nil after a status answer.
    private mutating func retryLater(after error: DownloadError? = nil) -> Action {
        failures += 1
        let isConnectionLevel = error.map { RetryClass($0.urlCode) == .connectionLevel } ?? false
        guard failures < (isConnectionLevel ? max(Self.maximumProbesWithoutProgress, maximumFailures) : maximumFailures) else {
            return .fail(DownloadError.connectivityTimeout.with(description:
                "the upload failed \(failures) times in a row without progress; its resume data is kept"),
                         isResumable: uploadURL != nil)
        }
        return isConnectionLevel ? .waitForServer(failures: failures) : .waitAndRetry(failures: failures)
    }

    private func statusFailure(_ head: ResponseHead, _ what: String) -> Action {
        .fail(DownloadError.httpStatus(head.statusCode).with(description: "\(what) (HTTP \(head.statusCode))"),
              isResumable: uploadURL != nil && head.statusCode >= 500)
    }

    /// Checks the server's `Upload-Offset` and takes it; the error when it cannot be true.
    private mutating func offsetProblem(_ head: ResponseHead) -> DownloadError? {
        guard let text = head["upload-offset"] else { return nil }
        guard let offset = Self.offsetField.value(from: text.trimmingWhitespace()).map(Int64.init) else {
            return Self.lie("an Upload-Offset that is not a byte count ('\(text.prefix(40))')")
        }
        if offset > length { return Self.lie("an offset of \(offset) bytes, beyond the file's \(length)") }
        if offset > sentUpTo { return Self.lie("an offset of \(offset) bytes, past the \(sentUpTo) bytes sent so far") }
        if offset < acknowledged {
            return Self.lie("an offset of \(offset) bytes after it acknowledged \(acknowledged): it lost bytes it had confirmed")
        }
        if offset > acknowledged { failures = 0 }
        acknowledged = offset
        return nil
    }

    /// An upload offset: decimal digits alone (no sign, no suffix), bounded.
    static let offsetField = Count(0...Int.max, of: "bytes")

    private static func lie(_ what: String) -> DownloadError {
        DownloadError.badServerResponse.with(description:
            "the upload server reported \(what); stopped rather than risk a corrupt upload: upload the file again, or report the server")
    }
}
