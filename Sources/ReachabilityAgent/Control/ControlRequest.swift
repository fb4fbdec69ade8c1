import FoundationEssentials
import ReachabilityBase
import ReachabilityEvents
import ResumableDownloads

/// A request's `id`, echoed in its reply: a number or a string, as the client chose.
package enum ControlRequestID: Codable, Sendable, Hashable {
    /// `"id": 7`
    case number(Int)
    /// `"id": "abc"`
    case text(String)

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int.self) {
            self = .number(number)
        } else {
            self = .text(try container.decode(String.self))
        }
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .number(let number): try container.encode(number)
        case .text(let text): try container.encode(text)
        }
    }
}

/// The commands of the protocol, as spelled on the wire.
package enum ControlCommandName: String, Codable, Sendable, CaseIterable {
    case add, list, pause, resume, cancel, status, metrics
    /// Replace a job's URL and keep its bytes (issue 34; ControlCommand+SetURL.swift).
    case setURL
    /// The agent's one bandwidth limit (`agent limit RATE|none`, issue 32).
    case limit
    /// Background sessions (issue 17): attach a session to this connection, then work with its tasks.
    case attach, createTask, updateTask, taskAction, acknowledge, invalidate
    /// An upload job (`queue add --upload`; ControlRequest+Upload.swift).
    case addUpload
}

/// One request line as it travels.
package struct ControlRequest: Codable, Sendable, Equatable {
    package var version: Int
    package var id: ControlRequestID?
    package var command: ControlCommandName
    package var url: String?
    package var output: String?
    package var sha256: String?
    /// `add`: replace an existing file at the destination (otherwise the request is refused).
    package var replace: Bool?
    /// `add`: the client's own name for this job; an add repeated with the same key (a retry
    /// after a reset) is answered with the first job instead of making a second one.
    package var clientKey: String?
    /// `add`: the most connections the job opens (1-16; absent: the agent's bound).
    package var connections: Int?
    /// `add`: false keeps the job off constrained paths (absent: allowed).
    package var constrained: Bool?
    /// `add`: true makes the job wait for AC power (absent: it runs on battery too).
    package var notOnBattery: Bool?
    /// `add`: foreground, high, normal or low (absent: normal).
    package var priority: String?
    /// `add`: seconds from now until the job must be done (absent: no deadline).
    package var deadline: Double?
    /// `add`: seconds the job may go without a byte after a transient error (absent: none of its own).
    package var noProgressTimeout: Double?
    /// `add`: the program (argv) to run when the job ends (absent: none).
    package var onComplete: [String]?
    /// `add`: other http(s) sources of the same file (absent: none).
    package var mirrors: [String]?
    /// `add`: SHA-256 hashes of the file's pieces (a Metalink's; absent: none).
    package var pieces: PieceHashes?
    /// `add`: the job's own proxy URL, "" for a direct connection (absent: the agent's setting).
    package var proxy: String?
    package var download: String?
    /// For `metrics`: `openmetrics` (default) or `prometheus`; checked in `ControlCodec`.
    package var format: String?
    /// Background sessions: the session's identifier (every background command).
    package var session: String?
    /// `attach`: the session's settings.
    package var settings: BackgroundSessionSettings?
    /// `createTask`.
    package var task: BackgroundTaskSpec?
    /// `updateTask`, `taskAction`.
    package var taskIdentifier: Int?
    /// `updateTask`.
    package var changes: BackgroundTaskChanges?
    /// `taskAction`: resume, suspend, cancel, cancelProducingResumeData.
    package var action: String?
    /// `acknowledge`: the event handled.
    package var sequence: UInt64?
    /// `addUpload`: the file and how to send it (the open file travels with the line, SCM_RIGHTS).
    package var upload: UploadJobRequest?
    /// `limit`: bytes per second in decimal digits, or `none`.
    package var limit: String?
    /// `list`: at most this many unfinished and this many finished downloads (absent: every one).
    package var rows: Int?

    package init(id: ControlRequestID?, command: ControlCommand) {
        version = ControlProtocol.version
        self.id = id
        self.command = command.name
        switch command {
        case .add(let url, let output, let sha256, let replace, let clientKey, let job):
            self.url = url.absoluteString
            self.output = output
            self.sha256 = sha256
            self.replace = replace ? true : nil
            self.clientKey = clientKey
            // Defaults stay off the wire: an older agent reads the request as before.
            connections = job.connections
            constrained = job.allowsConstrained ? nil : false
            notOnBattery = job.waitsForACPower ? true : nil
            priority = job.priority == .normal ? nil : job.priority.rawValue
            deadline = job.deadline.map(\.timeInterval)
            noProgressTimeout = job.noProgressTimeout.map(\.timeInterval)
            onComplete = job.onComplete
            mirrors = job.mirrors.isEmpty ? nil : job.mirrors.map(\.absoluteString)
            pieces = job.pieceHashes
            proxy = job.proxy
        case .pause(let download), .resume(let download), .cancel(let download):
            self.download = download
        case .setURL(let download, let url):
            self.download = download
            self.url = url.absoluteString
        case .metrics(let format):
            self.format = format.rawValue
        case .list(let rows):
            self.rows = rows
        case .status:
            break
        case .limit(let bytesPerSecond):
            limit = bytesPerSecond.map { String($0) } ?? "none"
        case .attach(let session, let settings):
            self.session = session
            self.settings = settings
        case .createTask(let session, let task):
            self.session = session
            self.task = task
        case .updateTask(let session, let taskIdentifier, let changes):
            self.session = session
            self.taskIdentifier = taskIdentifier
            self.changes = changes
        case .taskAction(let session, let taskIdentifier, let action):
            self.session = session
            self.taskIdentifier = taskIdentifier
            self.action = action.rawValue
        case .acknowledge(let session, let sequence):
            self.session = session
            self.sequence = sequence
        case .invalidate(let session):
            self.session = session
        case .addUpload(let url, let upload):
            self.url = url.absoluteString
            self.upload = upload
        }
    }

    private enum CodingKeys: String, CodingKey {
        case version, id, command, url, output, sha256, replace, clientKey, connections, constrained, notOnBattery, priority, download, format
        case deadline, noProgressTimeout, onComplete, mirrors, pieces, proxy
        case session, settings, task, taskIdentifier, changes, action, sequence, upload, limit, rows
    }

    /// Decodes like the synthesized init, except that an unknown command name is reported as
    /// `unknownCommand` (with the id) rather than as a malformed request.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decode(Int.self, forKey: .version)
        id = try container.decodeIfPresent(ControlRequestID.self, forKey: .id)
        let name = try container.decode(String.self, forKey: .command)
        guard let command = ControlCommandName(rawValue: name) else {
            throw ControlRejection(id: id, error: .unknownCommand(name))
        }
        self.command = command
        url = try container.decodeIfPresent(String.self, forKey: .url)
        output = try container.decodeIfPresent(String.self, forKey: .output)
        sha256 = try container.decodeIfPresent(String.self, forKey: .sha256)
        replace = try container.decodeIfPresent(Bool.self, forKey: .replace)
        clientKey = try container.decodeIfPresent(String.self, forKey: .clientKey)
        connections = try container.decodeIfPresent(Int.self, forKey: .connections)
        constrained = try container.decodeIfPresent(Bool.self, forKey: .constrained)
        notOnBattery = try container.decodeIfPresent(Bool.self, forKey: .notOnBattery)
        priority = try container.decodeIfPresent(String.self, forKey: .priority)
        deadline = try container.decodeIfPresent(Double.self, forKey: .deadline)
        noProgressTimeout = try container.decodeIfPresent(Double.self, forKey: .noProgressTimeout)
        onComplete = try container.decodeIfPresent([String].self, forKey: .onComplete)
        mirrors = try container.decodeIfPresent([String].self, forKey: .mirrors)
        pieces = try container.decodeIfPresent(PieceHashes.self, forKey: .pieces)
        proxy = try container.decodeIfPresent(String.self, forKey: .proxy)
        download = try container.decodeIfPresent(String.self, forKey: .download)
        format = try container.decodeIfPresent(String.self, forKey: .format)
        session = try container.decodeIfPresent(String.self, forKey: .session)
        settings = try container.decodeIfPresent(BackgroundSessionSettings.self, forKey: .settings)
        task = try container.decodeIfPresent(BackgroundTaskSpec.self, forKey: .task)
        taskIdentifier = try container.decodeIfPresent(Int.self, forKey: .taskIdentifier)
        changes = try container.decodeIfPresent(BackgroundTaskChanges.self, forKey: .changes)
        action = try container.decodeIfPresent(String.self, forKey: .action)
        sequence = try container.decodeIfPresent(UInt64.self, forKey: .sequence)
        upload = try container.decodeIfPresent(UploadJobRequest.self, forKey: .upload)
        limit = try container.decodeIfPresent(String.self, forKey: .limit)
        rows = try container.decodeIfPresent(Int.self, forKey: .rows)
    }
}

/// A queued job's own transfer choices (`queue add --connections --no-constrained --priority`).
package struct QueueJobOptions: Sendable, Hashable {
    /// The most connections (1...`DownloadAgent.maximumConnectionsPerHostLimit`, and never more
    /// than the agent's per-server bound); nil takes that bound.
    package var connections: Int?
    /// Whether constrained paths (`Metered=yes`) may carry it.
    package var allowsConstrained: Bool
    /// Its class in the line for transfer slots.
    package var priority: DownloadPriority
    /// Whether it waits for AC power (`--not-on-battery`).
    package var waitsForACPower: Bool
    /// How long from the add until it must be done (`--deadline`); nil: no deadline.
    package var deadline: Duration?
    /// How long it may go without a byte after a transient error (`--no-progress-timeout`).
    package var noProgressTimeout: Duration?
    /// The program (argv, no shell) to run when it ends (`--on-complete`).
    package var onComplete: [String]? = nil
    /// Other sources of the same file (`--mirror`, a Metalink's URLs), in order.
    package var mirrors: [URL] = []
    /// The file's piece hashes (a Metalink's).
    package var pieceHashes: PieceHashes? = nil
    /// Its own proxy (`--proxy`, a `ProxyURL`'s text; "" for none: `--no-proxy`); nil for the agent's.
    package var proxy: String? = nil

    package init(connections: Int? = nil, allowsConstrained: Bool = true, priority: DownloadPriority = .normal,
                 waitsForACPower: Bool = false, deadline: Duration? = nil, noProgressTimeout: Duration? = nil) {
        self.connections = connections
        self.allowsConstrained = allowsConstrained
        self.priority = priority
        self.waitsForACPower = waitsForACPower
        self.deadline = deadline
        self.noProgressTimeout = noProgressTimeout
    }
}

/// What a valid request asks for.
package enum ControlCommand: Sendable, Equatable {
    /// Queue a download; `output` is an absolute path inside the agent's download directories,
    /// or nil for the agent's files directory; `replace` allows replacing an existing file;
    /// `clientKey` makes a repeated add (a retry after a reset) answer with the first job;
    /// `job` holds its connections, constrained-path rule and priority class.
    case add(url: URL, output: String?, sha256: String?, replace: Bool = false, clientKey: String? = nil,
             job: QueueJobOptions = QueueJobOptions())
    /// The downloads the agent knows: every one, or (`rows`) at most that many not finished
    /// (the first in line) and that many finished (the latest), as aria2's `tellWaiting` and
    /// `tellStopped` page theirs: 10,000 finished jobs are 2.6 MB a `queue list` would send.
    case list(rows: Int? = nil)
    /// Pause the download with this ID (or unique ID prefix).
    case pause(String)
    /// Resume it.
    case resume(String)
    /// Cancel it (deletes the partial file).
    case cancel(String)
    /// Fetch the download with this ID (or unique ID prefix) from `url` from now on, keeping
    /// its bytes (an expired link replaced).
    case setURL(String, url: URL)
    /// The agent itself: path, limits, counts.
    case status
    /// The agent's metrics as text in this format.
    case metrics(MetricsFormat)
    /// Sets the agent's one bandwidth limit (bytes per second; nil: none) until the next one or
    /// a reload; the reply is the status with the limit in force.
    case limit(Int64?)
    /// Attach background session `session` (this connection then receives its events).
    case attach(session: String, settings: BackgroundSessionSettings)
    /// Create a task in the attached session.
    case createTask(session: String, BackgroundTaskSpec)
    /// Change a task's description, date, expected size or priority.
    case updateTask(session: String, taskIdentifier: Int, BackgroundTaskChanges)
    /// Resume, suspend or cancel a task.
    case taskAction(session: String, taskIdentifier: Int, BackgroundTaskAction)
    /// The event `sequence` was handled.
    case acknowledge(session: String, sequence: UInt64)
    /// `invalidateAndCancel()`.
    case invalidate(session: String)
    /// Upload a file to `url` as a job of the agent; the request carries the open file.
    case addUpload(url: URL, UploadJobRequest)

    /// The name on the wire.
    package var name: ControlCommandName {
        switch self {
        case .add: .add
        case .list: .list
        case .pause: .pause
        case .resume: .resume
        case .cancel: .cancel
        case .setURL: .setURL
        case .status: .status
        case .metrics: .metrics
        case .limit: .limit
        case .attach: .attach
        case .createTask: .createTask
        case .updateTask: .updateTask
        case .taskAction: .taskAction
        case .acknowledge: .acknowledge
        case .invalidate: .invalidate
        case .addUpload: .addUpload
        }
    }
}
