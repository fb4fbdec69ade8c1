import FoundationEssentials
import LinuxSystem
import ReachabilityAgent
import ReachabilityBase
import ResumableDownloads

/// `--state-dir` shared by the control commands, and the request round trip they all make.
struct ControlOptions: OptionTable {
    static let table: [OptionRow<Self>] = [
        .custom(.stateDirectory(holding: "socket, lock, log, resume records"), into: \.stateDirectoryArgument) { $0.value($1) },
    ]

    var stateDirectoryArgument: String?

    /// Sends `command` to the agent and returns its successful reply; a failure is an
    /// `AgentClientError` (77 when the agent belongs to another user, 1 otherwise).
    func send(_ command: ControlCommand, passing descriptor: FileDescriptor? = nil, in context: CommandContext) async throws -> ControlResponse {
        let directory = try AgentStateDirectory.resolve(stateDirectoryArgument, environment: context.environment,
                                                        system: .current(context))
        return try await AgentClient(stateDirectory: directory).request(command, passing: descriptor)
    }

    static let discussion = """
        The command talks to the agent over STATE_DIR/agent.sock. Exit status: 0 on success; 1 when \
        no agent is running or the agent reports an error; 77 when the agent belongs to another user.
        """
}

/// One download as a text line: `1f2e3d4c  running  12.0 MiB / 48.0 MiB  https://... -> /path`.
enum DownloadLine {
    static func text(_ download: AgentDownload) -> String {
        if download.direction == "upload" { return QueueAddUpload.line(download) }
        let size = download.totalBytes.map { "\(mebibytes(download.bytesReceived)) / \(mebibytes($0))" }
            ?? mebibytes(download.bytesReceived)
        var line = "\(download.id.prefix(8))  \(TextFormat.leftAligned(String(download.state.rawValue.prefix(22)), width: 22)) \(size)  \(download.url) -> \(download.destination)"
        if let session = download.session {
            let tasks = (download.taskIdentifiers ?? []).map(String.init).joined(separator: ",")
            line += "  [background session '\(TerminalText.escapedName(session))'\(tasks.isEmpty ? "" : ", task \(tasks)")]"
        }
        // The job's own choices, when they are not the defaults (`--json` always has the class).
        var choices: [String] = []
        if let priority = download.priority, priority != DownloadPriority.normal.rawValue { choices.append("priority \(priority)") }
        if let connections = download.connections { choices.append("at most \(connections) connection\(connections == 1 ? "" : "s")") }
        if download.allowsConstrained == false { choices.append("no constrained paths") }
        if download.waitsForACPower == true { choices.append("not on battery") }
        if !choices.isEmpty { line += "  [\(choices.joined(separator: ", "))]" }
        if let reason = download.waitingReason { line += "  (waiting: \(reason))" }
        if let error = download.error { line += "  (\(error))" }
        return TerminalText.escaped(line)
    }

    static func mebibytes(_ bytes: Int64) -> String {
        "\(TextFormat.decimal(Double(bytes) / 1_048_576, fractionDigits: 1)) MiB"
    }

    static func json(_ download: AgentDownload) -> String {
        String(decoding: ControlCodec.encode(download), as: UTF8.self)
    }
}

/// `reachability queue add URL [-o FILE] [--sha256 HEX] [--connections N] [--no-constrained] [--priority CLASS]`.
struct QueueAddCommand: Command, OptionTable {
    static let name = "queue add"
    static let abstract = "Queue a download in the running agent."
    // One row per option, in help order; `--upload` and its options are read first
    // (`QueueAddUpload`), the URL (or the Metalink) last.
    static let table: [OptionRow<Self>] = [
        .then { arguments, command in command.upload = try QueueAddUpload(arguments: arguments) },
        .path("output", short: "o", valueName: "file", expected: "a file path", help: "Where the finished file goes (relative to the current directory); it must be in STATE_DIR/files or a download-dir= of agent.conf. Default: STATE_DIR/files/NAME.",
              into: \.outputPath),
        .custom(.value("sha256", valueName: "hex", help: "Expected SHA-256 of the file; a mismatch fails the download."),
                into: \.expectedSHA256) { try $0.sha256Digest($1) },
        .flag("replace", help: "Replace a file that exists at the destination (otherwise the request is refused).", sets: \.replacesExistingFile),
        .value("connections", valueName: "n", help: "Open this many connections for this job (1-\(DownloadAgent.maximumConnectionsPerHostLimit)), all once the server has answered a range; the agent's own per-server bound (--connections of 'reachability agent') still applies. Default: up to that bound, added while each helps.",
               as: DownloadAgent.connectionsPerHostValue, into: \.job.connections),
        .flag("no-constrained", help: "Keep this job off constrained paths (a connection the user asked to save data on, NetworkManager Metered=yes): it waits for another path.",
              clears: \.job.allowsConstrained),
        .flag("not-on-battery", help: "Wait for AC power: while the machine runs on battery (UPower) the job stays queued, and a transfer is checkpointed when the battery takes over.",
              sets: \.job.waitsForACPower),
        .custom(.value("priority", valueName: "class", help: "The job's class for the agent's transfer slots: foreground, high, normal (default) or low, as BITS has them. Higher classes start first; within one, first come first served. A foreground job starts at once, taking a slot from the latest started job of the lowest class (which is checkpointed and queued again, nothing lost)."),
                into: \.job.priority) { try $0.value($1, as: Choice<DownloadPriority>()) ?? .normal },
    ] + timeLimitRows + [
        .custom(.repeating("mirror", valueName: "url", help: "Another http(s) source of the same file (repeatable): ranges are fetched from every source at once while they are proven the same file (--sha256, the Metalink's hashes, or each range carrying the first source's validator and length); a mirror whose bytes prove wrong is dropped."),
                into: \.job.mirrors) { arguments, option in
            let mirrors = try arguments.urls(option)
            guard mirrors.count <= DownloadAgent.maximumMirrors else {
                throw UsageError("'\(option.synopsis)' was given \(mirrors.count) times; at most \(DownloadAgent.maximumMirrors) mirrors")
            }
            return mirrors
        },
        // Read with the URL by the last row.
        .listed(.flag("metalink", help: "The argument is a local Metalink 4 file (.meta4) of one file: its URLs become the source and mirrors, its SHA-256 and piece hashes the checks.")),
    ] + TransportOptions.proxyRows(into: \.job.proxy) + QueueAddUpload.options.map(OptionRow.listed) + ControlOptions.rows(at: \.control) + [
        .then { arguments, command in try command.readURL(arguments.positional(positionals[0])[0], arguments: arguments) },
    ]
    static let positionals = [Positional(name: "url", help: "An http or https URL (with --upload: where the file goes).")]
    static let discussion: String? = """
        Prints the new download's line (its ID first).

        Request headers (-H) are not taken: the agent keeps what it needs to resume a download \
        after a restart in its records, and headers usually carry credentials or short-lived tokens \
        that must not sit on disk (and would have expired by the time a restored download asks \
        again). Use 'reachability download -H ...' for such a file: it keeps headers in memory only. \
        --limit-rate and --cacert are the agent's settings for all its downloads: give them to \
        'reachability agent'. --proxy URL (or --no-proxy) is this job's own, over the agent's proxy \
        (its --proxy, agent.conf's proxy=, its environment). The job's proxy, mirrors and piece \
        hashes are kept in its resume record: a job restored after an agent restart keeps them. --insecure is not offered for queued downloads: give the agent \
        --cacert with the server's certificate instead.
        """ + "\n\n" + ControlOptions.discussion
    static let refusedOptions = [
        RefusedOption(option: DownloadCommand.option("header"),
                      reason: "headers usually carry credentials or tokens, and the agent would have to keep them on disk to resume the download after a restart; use 'reachability download -H ...', which keeps them in memory only"),
        RefusedOption(option: TransportOptions.option("limit-rate"),
                      reason: "it is the agent's setting for all its downloads: start the agent with 'reachability agent --limit-rate SPEED'"),
        RefusedOption(option: TransportOptions.option("cacert"),
                      reason: "it is the agent's setting for all its downloads: start the agent with 'reachability agent --cacert FILE'"),
        RefusedOption(option: DownloadCommand.option("insecure"),
                      reason: "queued downloads always check the server's certificate; start the agent with '--cacert FILE' holding the server's certificate instead"),
    ]

    /// Replaced by the positional URL before the command runs.
    var url = URL(fileURLWithPath: "/")
    /// `--metalink FILE`: read at run time, its sources and hashes replace `url`'s.
    var metalinkFile: String?
    var outputPath: String?
    var expectedSHA256: String?
    var replacesExistingFile = false
    var job = QueueJobOptions()
    var control = ControlOptions()
    /// `--upload FILE`: an upload job instead of a download (QueueAddUpload.swift).
    var upload: QueueAddUpload?

    init() {}

    /// The positional argument: the URL, or with `--metalink` the Metalink file; checked against
    /// `--mirror`, `--upload` and the proxy options.
    private mutating func readURL(_ positional: String, arguments: ParsedArguments) throws {
        let (metalink, mirror) = (Self.option("metalink"), Self.option("mirror"))
        if arguments.isSet(metalink) {
            guard upload == nil, job.mirrors.isEmpty else {
                throw UsageError("'\(metalink.synopsis)' takes the sources from the Metalink; '\(mirror.synopsis)' and '--upload' cannot be added")
            }
            guard !positional.isEmpty, DownloadCommand.metalinkURL(positional) == nil else {
                throw UsageError.invalidValue(URLRedaction.redacted(positional), for: metalink, "expected a local Metalink file (fetch one by URL with 'reachability download --metalink URL')")
            }
            metalinkFile = positional
            url = URL(string: "http://metalink.invalid/")!   // replaced at run time
        } else {
            if upload != nil, !job.mirrors.isEmpty {
                throw UsageError("'\(mirror.synopsis)' is for downloads, not '--upload'")
            }
            if upload != nil, job.proxy != nil {
                throw UsageError("'\(TransportOptions.option("proxy").synopsis)' and '\(TransportOptions.option("no-proxy").synopsis)' are for downloads, not '--upload'")
            }
            url = try DownloadCommand.parseURL(positional)
        }
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        if let upload { return try await upload.run(to: url, control: control, in: context) }
        var url = url, job = job, expectedSHA256 = expectedSHA256
        if let metalinkFile {
            let document = try DownloadCommand.metalinkDocument(metalinkFile, in: context)
            DownloadCommand.reportNotes(of: document, from: metalinkFile, in: context)
            if let given = expectedSHA256, let listed = document.sha256, given != listed {
                throw CommandFailure(message: "\(metalinkFile): its SHA-256 differs from --sha256; give one of them", exitCode: .dataError)
            }
            expectedSHA256 = expectedSHA256 ?? document.sha256
            url = document.sources[0].url
            job.mirrors = document.sources.dropFirst().map(\.url)
            if let pieces = document.pieces, let size = document.size {
                job.pieceHashes = PieceHashes(length: pieces.length, sha256: pieces.sha256, fileLength: size)
            }
        }
        // The agent has its own working directory: send an absolute path.
        let output = outputPath.map { path in
            path.hasPrefix("/") ? path
                : URL(fileURLWithPath: context.currentDirectory).appendingPathComponent(path).standardizedFileURL.path
        }
        let response = try await control.send(.add(url: url, output: output, sha256: expectedSHA256, replace: replacesExistingFile,
                                                   job: job),
                                              in: context)
        if let download = response.download { context.output.line(DownloadLine.text(download)) }
        return .success
    }
}

/// `reachability queue list [--json]`.
struct QueueListCommand: Command, OptionTable {
    static let name = "queue list"
    static let abstract = "List the agent's downloads."
    static let table: [OptionRow<Self>] = [
        .flag("json", help: "Print one JSON object per download (NDJSON).", sets: \.isJSON),
        .flag("all", help: "List every download, not only the first \(rows) unfinished and the latest \(rows) finished.", sets: \.isAll),
    ] + ControlOptions.rows(at: \.control)
    static let discussion: String? = """
        Text columns: short ID (any unique prefix works for pause/resume/cancel), state, bytes, URL -> file, \
        then the job's own choices in brackets when it has any ([priority low, at most 2 connections, no constrained paths]). \
        A last line shows the agent's bandwidth limit when one is in force (limit 2 MiB/s (09:00-17:00 mon,tue,wed,thu,fri)). \
        Without --all, a queue of thousands shows its first \(rows) unfinished and latest \(rows) finished downloads, \
        and a line on stderr says how many more there are.
        """ + "\n\n" + ControlOptions.discussion
    /// Rows of each kind without `--all` (aria2c's `tellStopped` pages the same way).
    static let rows = 100

    var isJSON = false
    var isAll = false
    var control = ControlOptions()

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(.list(rows: isAll ? nil : Self.rows), in: context)
        for download in response.downloads ?? [] {
            context.output.line(isJSON ? DownloadLine.json(download) : DownloadLine.text(download))
        }
        if let omitted = response.omittedDownloads, omitted > 0 {
            context.errorOutput.line("\(omitted) more downloads not shown; 'queue list --all' lists every one")
        }
        if !isJSON, let limit = await AgentLimitCommand.limitInForce(control, in: context) { context.output.line(limit) }
        return .success
    }
}

/// `queue pause|resume|cancel ID`: one command, its verb a type parameter (the command list
/// names types), so the three share everything but the row of `QueueVerb` they read.
struct QueueControlCommand<Verb: QueueVerbName>: Command, OptionTable {
    static var name: String { "queue \(Verb.verb.rawValue)" }
    static var abstract: String { Verb.verb.abstract }
    static var table: [OptionRow<Self>] {
        ControlOptions.rows(at: \.control) + [.then { arguments, command in command.id = arguments.positional(positionals[0])[0] }]
    }
    static var positionals: [Positional] { [Positional(name: "id", help: "A download ID or a unique prefix of one (see 'queue list').")] }
    static var discussion: String? { ControlOptions.discussion }

    var id = ""
    var control = ControlOptions()

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(Verb.verb.command(id), in: context)
        if let download = response.download { context.output.line(DownloadLine.text(download)) }
        return .success
    }
}

/// The verbs of `queue pause|resume|cancel ID`: each one's abstract and the request it sends.
enum QueueVerb: String, Sendable {
    case pause, resume, cancel

    var abstract: String {
        switch self {
        case .pause: "Pause a download; its resume data is kept, also across agent restarts."
        case .resume: "Resume a paused (or resumably failed) download."
        case .cancel: "Cancel a download and delete its partial file."
        }
    }

    func command(_ id: String) -> ControlCommand {
        switch self {
        case .pause: .pause(id)
        case .resume: .resume(id)
        case .cancel: .cancel(id)
        }
    }
}

/// A type naming one `QueueVerb`, so that `QueueControlCommand` can be one command per verb.
protocol QueueVerbName: Sendable { static var verb: QueueVerb { get } }
/// `reachability queue pause ID`.
enum QueuePause: QueueVerbName { static let verb = QueueVerb.pause }
/// `reachability queue resume ID`.
enum QueueResume: QueueVerbName { static let verb = QueueVerb.resume }
/// `reachability queue cancel ID`.
enum QueueCancel: QueueVerbName { static let verb = QueueVerb.cancel }
typealias QueuePauseCommand = QueueControlCommand<QueuePause>
typealias QueueResumeCommand = QueueControlCommand<QueueResume>
typealias QueueCancelCommand = QueueControlCommand<QueueCancel>

/// `reachability agent status [--json]`.
struct AgentStatusCommand: Command, OptionTable {
    static let name = "agent status"
    static let abstract = "Show the running agent's path, limits and download counts."
    static let table: [OptionRow<Self>] = [
        .flag("json", help: "Print the status as one JSON object.", sets: \.isJSON),
    ] + ControlOptions.rows(at: \.control)
    static let discussion: String? = ControlOptions.discussion

    var isJSON = false
    var control = ControlOptions()

    func run(in context: CommandContext) async throws -> ExitCode {
        let response = try await control.send(.status, in: context)
        guard let status = response.status else {
            throw CommandFailure(message: "the agent sent no status", exitCode: .failure)
        }
        if isJSON {
            context.output.line(String(decoding: ControlCodec.encode(status), as: UTF8.self))
            return .success
        }
        let path: String
        if let pathStatus = status.pathStatus {
            path = pathStatus == "satisfied"
                ? "reachable via \(status.connection ?? "?")\(status.interface.map { " (\($0))" } ?? "")\(status.isExpensive == true ? " expensive" : "")"
                : "unreachable"
        } else {
            path = "unknown (no path yet)"
        }
        context.output.line(TerminalText.escaped("agent \(status.pid) on \(status.stateDirectory), up since \(status.startedAt)"))
        context.output.line(TerminalText.escaped("path: \(path)"))
        if let power = status.power { context.output.line(TerminalText.escaped("power: \(power)")) }
        context.output.line("downloads: \(status.summary) (max \(status.maximumConcurrentDownloads) at once\(status.allowsExpensive ? "" : ", no expensive paths")\(status.allowsRoaming == false ? ", no roaming" : ""))")
        if let classes = status.priorities, !classes.isEmpty {
            let parts = DownloadPriority.allCases.compactMap { priority in classes[priority.rawValue].map { "\($0) \(priority.rawValue)" } }
            context.output.line("priorities: \(parts.joined(separator: ", "))")
        }
        // The agent's one bandwidth limit, when one is set (a plain `no limit` says nothing new).
        if let limit = status.limit, limit != "no limit" { context.output.line(limit) }
        for session in status.backgroundSessions ?? [] {
            context.output.line(TerminalText.escaped(Self.describe(session)))
        }
        return .success
    }

    /// `background session 'ID' (uid 1000): 3 tasks, 1 event pending, attached by pid 42; launcher command /usr/bin/app failing (3 in a row: ...), next at T`.
    static func describe(_ session: BackgroundSessionStatus) -> String {
        var line = "background session '\(TerminalText.escapedName(session.identifier))' (uid \(session.uid)): \(session.tasks) task\(session.tasks == 1 ? "" : "s")"
        line += ", \(session.pendingEvents) event\(session.pendingEvents == 1 ? "" : "s") pending"
        line += session.attachedPID.map { ", attached by pid \($0)" } ?? ", not attached"
        if let launcher = session.launcher {
            line += "; launcher \(launcher)"
            if session.consecutiveLaunchFailures > 0 {
                line += " failing (\(session.consecutiveLaunchFailures) in a row: \(session.lastLaunchFailure ?? "?"))"
            }
            if let next = session.nextLaunch { line += ", next launch at \(next)" }
        }
        return line
    }
}
