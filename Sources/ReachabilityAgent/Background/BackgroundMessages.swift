import FoundationEssentials
import ResumableDownloads

// What a background session and the agent say to each other over the control socket (issue 17):
// the session's settings, a task as the session asks for it, a task as the agent reports it,
// the events the agent pushes, and the resume state that becomes resume data on the client.
// Plain Codable values; every field read from the wire is checked (`validated`) before use.

/// The settings of a background session (`ResumableURLSession.Configuration`), sent at each
/// attach; the latest attach's win.
package struct BackgroundSessionSettings: Codable, Sendable, Hashable {
    /// When a task of the session finishes or fails for good while no process is attached, start
    /// the program (`launchUnit` or `launchCommand`).
    package var sendsLaunchEvents: Bool = true
    /// Tasks wait for a path that is neither expensive nor roaming (the engine's allowsExpensive
    /// and allowsRoaming false).
    package var isDiscretionary: Bool = false
    /// Whether tasks may use expensive (cellular-like or metered) paths at all.
    package var allowsExpensiveNetworkAccess: Bool = true
    /// Whether tasks may use a roaming modem (ModemManager).
    package var allowsRoaming: Bool = true
    /// Whether tasks may use a link the user asked to save data on (NetworkManager `Metered=yes`).
    package var allowsConstrainedNetworkAccess: Bool = true
    /// argv the agent runs (no shell) for launch events.
    package var launchCommand: [String]?
    /// A systemd user unit the agent starts for launch events (`name.service`, or a template
    /// `name@.service` that gets the identifier as its instance).
    package var launchUnit: String?
    /// Seconds a task may take from its first resume before it fails with -1001 (and resume data).
    package var timeoutIntervalForResource: Double = 7 * 24 * 3600
    /// Seconds a transfer may go without data before it is reconnected (the engine keeps trying).
    package var timeoutIntervalForRequest: Double = 60
    /// `httpAdditionalHeaders` as `Name: value` lines, sent with every task's request.
    package var additionalHeaders: [String] = []
    /// `httpMaximumConnectionsPerHost`: the most connections one of its tasks opens to its server
    /// (1 ... `DownloadAgent.maximumConnectionsPerHostLimit`; the agent's own bound holds too).
    package var maximumConnectionsPerHost: Int = DownloadAgent.defaultConnectionsPerHost

    package init() {}

    private enum CodingKeys: String, CodingKey {
        case sendsLaunchEvents, isDiscretionary, allowsExpensiveNetworkAccess, allowsRoaming, allowsConstrainedNetworkAccess
        case launchCommand, launchUnit
        case timeoutIntervalForResource, timeoutIntervalForRequest, additionalHeaders, maximumConnectionsPerHost
    }

    /// Absent fields take their defaults (a client of another version may not send them all).
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = BackgroundSessionSettings()
        sendsLaunchEvents = try container.decodeIfPresent(Bool.self, forKey: .sendsLaunchEvents) ?? defaults.sendsLaunchEvents
        isDiscretionary = try container.decodeIfPresent(Bool.self, forKey: .isDiscretionary) ?? defaults.isDiscretionary
        allowsExpensiveNetworkAccess = try container.decodeIfPresent(Bool.self, forKey: .allowsExpensiveNetworkAccess)
            ?? defaults.allowsExpensiveNetworkAccess
        allowsRoaming = try container.decodeIfPresent(Bool.self, forKey: .allowsRoaming) ?? defaults.allowsRoaming
        allowsConstrainedNetworkAccess = try container.decodeIfPresent(Bool.self, forKey: .allowsConstrainedNetworkAccess)
            ?? defaults.allowsConstrainedNetworkAccess
        launchCommand = try container.decodeIfPresent([String].self, forKey: .launchCommand)
        launchUnit = try container.decodeIfPresent(String.self, forKey: .launchUnit)
        timeoutIntervalForResource = try container.decodeIfPresent(Double.self, forKey: .timeoutIntervalForResource)
            ?? defaults.timeoutIntervalForResource
        timeoutIntervalForRequest = try container.decodeIfPresent(Double.self, forKey: .timeoutIntervalForRequest)
            ?? defaults.timeoutIntervalForRequest
        additionalHeaders = try container.decodeIfPresent([String].self, forKey: .additionalHeaders) ?? []
        maximumConnectionsPerHost = try container.decodeIfPresent(Int.self, forKey: .maximumConnectionsPerHost)
            ?? defaults.maximumConnectionsPerHost
    }

    /// Bounds on what an attach may ask for.
    package static let maximumSeconds: Double = 100 * 365 * 86_400
    package static let maximumArguments = 64
    package static let maximumArgumentLength = 4096
    package static let maximumHeaders = 64
    package static let maximumHeaderLength = 8192

    /// Why these settings cannot be used, or nil.
    package var problem: String? {
        if let launchCommand {
            if launchCommand.isEmpty { return "launchCommand is empty (give the program and its arguments, or nil)" }
            if launchCommand.count > Self.maximumArguments { return "launchCommand has more than \(Self.maximumArguments) arguments" }
            if launchCommand.contains(where: { $0.utf8.count > Self.maximumArgumentLength || $0.utf8.contains(0) }) {
                return "a launchCommand argument is longer than \(Self.maximumArgumentLength) bytes or holds a NUL"
            }
            if launchCommand[0].isEmpty { return "launchCommand's program is empty" }
            // The agent starts it from its own working directory, not the registering
            // program's: a relative path would name another file (issue 29), so it is refused.
            if !launchCommand[0].hasPrefix("/"), launchCommand[0].contains("/") {
                return "launchCommand's program '\(launchCommand[0])' is a relative path; give an absolute path (or a bare name, looked up on the agent's PATH)"
            }
        }
        if let launchUnit, let problem = SystemdUnitName.problem(launchUnit) { return "launchUnit: \(problem)" }
        if !timeoutIntervalForResource.isFinite || timeoutIntervalForResource <= 0 || timeoutIntervalForResource > Self.maximumSeconds {
            return "timeoutIntervalForResource must be a positive number of seconds, at most 100 years"
        }
        if !timeoutIntervalForRequest.isFinite || timeoutIntervalForRequest <= 0 || timeoutIntervalForRequest > Self.maximumSeconds {
            return "timeoutIntervalForRequest must be a positive number of seconds, at most 100 years"
        }
        if !(1...DownloadAgent.maximumConnectionsPerHostLimit).contains(maximumConnectionsPerHost) {
            return "httpMaximumConnectionsPerHost must be from 1 to \(DownloadAgent.maximumConnectionsPerHostLimit)"
        }
        return BackgroundTaskSpec.headerProblem(additionalHeaders, label: "httpAdditionalHeaders")
    }
}

/// A task as a background session creates it.
package struct BackgroundTaskSpec: Codable, Sendable, Hashable {
    /// Chosen by the attached process: unique in the session (the agent refuses a used one).
    package var taskIdentifier: Int
    /// http or https.
    package var url: String
    /// The request's own headers (`URLRequest.allHTTPHeaderFields`), `Name: value`.
    package var headers: [String] = []
    /// `URLRequest.timeoutInterval`, seconds; nil for the session's.
    package var timeout: Double?
    package var taskDescription: String?
    /// Not before this date (`earliestBeginDate`), seconds since 1970.
    package var earliestBeginDate: Double?
    /// `countOfBytesClientExpectsToReceive`; -1 when unknown. Checked against free disk space.
    package var expectedBytes: Int64 = -1
    /// 0...1 (`URLSessionTask.priority`).
    package var priority: Float = 0.5
    /// Continue these stored bytes (a task made from resume data).
    package var resumeState: ResumeState?
    /// Present for an upload task: the file (passed open with the request) and how it goes.
    package var upload: BackgroundUploadSpec?

    package init(taskIdentifier: Int, url: String) {
        self.taskIdentifier = taskIdentifier
        self.url = url
    }

    private enum CodingKeys: String, CodingKey {
        case taskIdentifier, url, headers, timeout, taskDescription, earliestBeginDate, expectedBytes, priority, resumeState, upload
    }

    /// `taskIdentifier` and `url` are required; the rest take their defaults when absent.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        taskIdentifier = try container.decode(Int.self, forKey: .taskIdentifier)
        url = try container.decode(String.self, forKey: .url)
        headers = try container.decodeIfPresent([String].self, forKey: .headers) ?? []
        timeout = try container.decodeIfPresent(Double.self, forKey: .timeout)
        taskDescription = try container.decodeIfPresent(String.self, forKey: .taskDescription)
        earliestBeginDate = try container.decodeIfPresent(Double.self, forKey: .earliestBeginDate)
        expectedBytes = try container.decodeIfPresent(Int64.self, forKey: .expectedBytes) ?? -1
        priority = try container.decodeIfPresent(Float.self, forKey: .priority) ?? 0.5
        resumeState = try container.decodeIfPresent(ResumeState.self, forKey: .resumeState)
        upload = try container.decodeIfPresent(BackgroundUploadSpec.self, forKey: .upload)
    }

    package static let maximumURLLength = 8 << 10
    package static let maximumDescriptionLength = 4096
    /// Task identifiers are below this (sums and the next identifier can never overflow).
    package static let maximumTaskIdentifier = Int(Int32.max)
    /// `countOfBytesClientExpectsToReceive` at most (1 EiB): sums over every task stay far from Int64's end.
    package static let maximumExpectedBytes: Int64 = 1 << 60
    /// `earliestBeginDate` between 1970 and the year 5000.
    package static let latestDate: Double = 95_617_584_000

    /// The URL when it is http or https with a host.
    package var checkedURL: URL? {
        guard url.utf8.count <= Self.maximumURLLength, let parsed = URL(string: url),
              let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https", parsed.host != nil else { return nil }
        return parsed
    }

    /// Why this task cannot be created, or nil.
    package var problem: String? {
        guard taskIdentifier >= 0, taskIdentifier < Self.maximumTaskIdentifier else {
            return "taskIdentifier must be between 0 and \(Self.maximumTaskIdentifier - 1)"
        }
        guard let url = checkedURL else { return "the task's URL must be an http or https URL with a host (at most \(Self.maximumURLLength) bytes)" }
        if let description = taskDescription, description.utf8.count > Self.maximumDescriptionLength {
            return "taskDescription is longer than \(Self.maximumDescriptionLength) bytes"
        }
        if let timeout, !timeout.isFinite || timeout <= 0 || timeout > BackgroundSessionSettings.maximumSeconds {
            return "the request's timeoutInterval must be a positive number of seconds, at most 100 years"
        }
        if let date = earliestBeginDate, !date.isFinite || date < 0 || date > Self.latestDate {
            return "earliestBeginDate must be a date between 1970 and 5000"
        }
        if expectedBytes < -1 || expectedBytes > Self.maximumExpectedBytes {
            return "countOfBytesClientExpectsToReceive must be -1 (unknown) or 0 to \(Self.maximumExpectedBytes)"
        }
        if priority.isNaN || priority < 0 || priority > 1 { return "priority must be between 0 and 1" }
        if let state = resumeState {
            guard state.url.absoluteString == self.url else { return "the resume data is for another URL" }
            guard state.validated != nil else { return "the resume data's state is not valid" }
        }
        if let upload {
            if let problem = upload.problem { return problem }
            if resumeState != nil { return "an upload task cannot continue a download's resume data" }
            if let resume = upload.resume, resume.url.absoluteString != self.url { return "the upload's resume data is for another URL" }
        }
        _ = url
        return Self.headerProblem(headers, label: "the request's headers")
    }

    static func headerProblem(_ headers: [String], label: String) -> String? {
        if headers.count > BackgroundSessionSettings.maximumHeaders { return "\(label): more than \(BackgroundSessionSettings.maximumHeaders)" }
        for line in headers {
            if line.utf8.count > BackgroundSessionSettings.maximumHeaderLength {
                return "\(label): a header is longer than \(BackgroundSessionSettings.maximumHeaderLength) bytes"
            }
            if let problem = HeaderValidation.problem(with: line) { return "\(label): \(line.prefix(while: { $0 != ":" })): \(problem)" }
        }
        return nil
    }
}

/// A task's settable properties as they are now (the session sends all of them on any change).
package struct BackgroundTaskChanges: Codable, Sendable, Hashable {
    package var taskDescription: String?
    package var earliestBeginDate: Double?
    package var expectedBytes: Int64
    package var priority: Float

    package init(taskDescription: String?, earliestBeginDate: Double?, expectedBytes: Int64, priority: Float) {
        self.taskDescription = taskDescription
        self.earliestBeginDate = earliestBeginDate
        self.expectedBytes = expectedBytes
        self.priority = priority
    }
}

/// What a session asks of one task.
package enum BackgroundTaskAction: String, Codable, Sendable, CaseIterable {
    case resume, suspend, cancel
    /// Stop and hand back resume state (`cancel(byProducingResumeData:)`).
    case cancelProducingResumeData
}

/// A task as the agent reports it.
package struct BackgroundTaskSnapshot: Codable, Sendable, Hashable {
    package enum State: String, Codable, Sendable {
        /// Created, not resumed; or suspended.
        case suspended
        /// Resumed: transferring, queued, or waiting (`waitingReason`).
        case running
        /// Finished, failed or cancelled (its event may still be pending).
        case completed
    }

    package var taskIdentifier: Int
    package var url: String
    package var taskDescription: String?
    package var earliestBeginDate: Double?
    package var expectedBytes: Int64
    package var priority: Float
    package var state: State
    package var bytesReceived: Int64
    package var totalBytes: Int64?
    /// Why a resumed task does not transfer yet (not before a date, not enough disk space).
    package var waitingReason: String?
    /// Whether it was made from resume data (its first progress is announced with didResumeAtOffset).
    package var isFromResumeData: Bool
    /// The engine download carrying it (shared by duplicates of one URL).
    package var transfer: UUID
    /// An upload task: `bytesReceived` counts file bytes sent, `totalBytes` is the file's length.
    package var isUpload: Bool? = nil
    /// An upload task's file path (a later process's task object is made from it).
    package var uploadFile: String? = nil
}

/// Why a background task ended without its file, as the delegate hears it.
package struct BackgroundFailure: Codable, Sendable, Hashable {
    /// The URLError code (-1005, -1001, -999 ...).
    package var code: Int
    package var message: String
    package var httpStatus: Int?
    /// Present when the stored bytes can be continued.
    package var resumeState: ResumeState?
    /// An upload task's: where the server holds the upload, when it can be continued
    /// (`URLError.uploadTaskResumeData`).
    package var uploadResume: UploadResumeState?

    package static let cancelled = BackgroundFailure(code: -999, message: "cancelled")

    package init(code: Int, message: String, httpStatus: Int? = nil, resumeState: ResumeState? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.resumeState = resumeState
    }

    /// An engine failure; an outage longer than allowed is -1001 as on Apple platforms.
    package init(_ error: DownloadError, resumeState: ResumeState?) {
        self.init(code: error == .connectivityTimeout ? -1001 : error.errorCode, message: error.description,
                  httpStatus: error.httpStatusCode, resumeState: resumeState)
    }
}

/// What the agent pushes to an attached session (a line `{"version":1,"event":{...}}`).
package struct BackgroundEvent: Codable, Sendable, Hashable {
    package enum Kind: String, Codable, Sendable {
        /// The file is at `location` until acknowledged: didFinishDownloadingTo, then didCompleteWithError(nil).
        case finished
        /// didCompleteWithError(`failure`).
        case failed
        /// didWriteData (live only, never replayed): `bytes` of `total`.
        case progress
        /// The transfer restarted from `bytes` (0: the resource changed), or a task from resume data began.
        case resumed
        /// taskIsWaitingForConnectivity (live only).
        case waitingForConnectivity
        /// Every event pending at the attach has been sent: urlSessionDidFinishEvents once they are handled.
        case finishedEvents
    }

    /// Set on events kept until acknowledged (finished, failed); nil on live-only ones.
    package var sequence: UInt64?
    package var kind: Kind
    package var task: BackgroundTaskSnapshot?
    /// For `finished`: the file, valid until this event is acknowledged.
    package var location: String?
    package var failure: BackgroundFailure?
    package var bytes: Int64?
    package var total: Int64?
    /// For an upload's `finished`: the server's response (didReceive response, didReceive data).
    package var response: BackgroundUploadResponse?

    package init(sequence: UInt64? = nil, kind: Kind, task: BackgroundTaskSnapshot? = nil, location: String? = nil,
                 failure: BackgroundFailure? = nil, bytes: Int64? = nil, total: Int64? = nil, response: BackgroundUploadResponse? = nil) {
        self.response = response
        self.sequence = sequence
        self.kind = kind
        self.task = task
        self.location = location
        self.failure = failure
        self.bytes = bytes
        self.total = total
    }
}

/// The agent's answer to an attach.
package struct BackgroundAttachment: Codable, Sendable, Hashable {
    /// Tasks that have not completed, in identifier order.
    package var tasks: [BackgroundTaskSnapshot]
    /// Identifiers from here on are free.
    package var nextTaskIdentifier: Int
    /// Events waiting for this process (they follow the reply, then a `finishedEvents`).
    package var pendingEvents: Int
    /// Where finished files and partial files live (`STATE/background/downloads`).
    package var downloadsDirectory: String
}
