import FoundationEssentials
import Glibc
import LinuxReachability
import ReachabilityEvents
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// `reachability upload FILE URL`: send a file, stopping the moment the path goes and continuing
/// from the server's offset when it is back (IETF resumable-upload draft or tus), or one plain
/// `PUT`/`POST` for servers without resumption.
struct UploadCommand: Command, OptionTable {
    static let name = "upload"
    static let abstract = "Upload a file, resuming from the server's offset after network outages."
    static let table: [OptionRow<Self>] = [
        .custom(.value("protocol", valueName: "name", help: "auto (ask the server: tus when it answers Tus-Resumable, else the IETF resumable-upload draft, which a plain server takes as one POST), ietf, tus or put (one plain PUT, no resumption). Default: auto."),
                into: \.uploadOptions.protocolChoice) { try protocolChoice($0, $1) ?? .auto },
        .reading(.value("method", short: "X", valueName: "method", help: "The method of the creation request (IETF draft) or of the plain upload. Default: POST, or PUT with --protocol put.")) {
            arguments, option, command in
            command.uploadOptions.method = try method(arguments, option) ?? (command.uploadOptions.protocolChoice == .put ? .put : .post)
        },
        .custom(.repeating("header", short: "H", valueName: "name: value", help: "Send this header with the creation or plain request (repeatable), e.g. 'Content-Type: image/jpeg'."),
                into: \.uploadOptions.headerFields) { try $0.headerLines($1, reserved: ExchangeRequest.reservedHeaderNames) },
        .flag("restart-plain", help: "With a plain PUT, send the file again from the start after a failure (a POST is never sent twice).",
              sets: \.uploadOptions.allowsPlainRetry),
        .custom(.value("idle-timeout", valueName: "seconds", help: "End an attempt when nothing was sent or received for this long, and resume it (a server that stopped answering). Default: 5."),
                into: \.uploadOptions.idleTimeout) { try $0.value($1, as: idleTimeoutValue) ?? UploadOptions().idleTimeout },
    ] + EventOutputOptions.rows(at: \.events) + MonitorOptions.rows(at: \.monitor) + [
        .then { arguments, command in
            command.path = arguments.positional(file)[0]
            command.target = try DownloadCommand.parseURL(arguments.positional(url)[0])
        },
    ]
    static let file = Positional(name: "file", help: "The regular file to upload.")
    static let url = Positional(name: "url", help: "The http or https URL to upload to.")
    static let positionals = [file, url]
    static let discussion: String? = """
        The file is read as it is sent; if it changes meanwhile (size, modification time or \
        inode) the upload stops before its last byte, so the server never completes a mix of two \
        versions. After an outage only what the server did not acknowledge is sent again. A \
        server that reports an impossible offset (past the bytes sent, beyond the file, or less \
        than it acknowledged) ends the upload with an error. A progress line is drawn on stderr \
        when it is a terminal.
        """ + "\n\n" + """
        Exit status: 0 the server has the whole file; 1 the upload failed for good (HTTP error, \
        lying server, file changed, or a plain upload lost with its connection); 64 usage error; \
        66 the file cannot be read or is not a regular file; 75 gave up for now (the server kept \
        failing): run the same command again; 130 interrupted by SIGINT, 143 by SIGTERM.
        """ + "\n\n" + MonitorOptions.discussion

    static let idleTimeoutValue = Seconds(.milliseconds(100)...Duration.seconds(3600))

    var path = ""
    /// Replaced by the positional URL before the command runs.
    var target = URL(fileURLWithPath: "/")
    var uploadOptions = UploadOptions()
    var events = EventOutputOptions()
    var isJSON: Bool { events.isJSON }
    var isQuiet: Bool { events.isQuiet }
    var monitor = MonitorOptions()

    /// `--protocol` of `upload` and `queue add --upload`; nil when not given.
    static func protocolChoice(_ arguments: ParsedArguments, _ option: Option) throws -> UploadProtocol? {
        guard let name = arguments.value(option) else { return nil }
        guard let choice = UploadProtocol(rawValue: name.lowercased()) else {
            throw UsageError.invalidValue(name, for: option, "expected auto, ietf, tus or put")
        }
        return choice
    }

    /// `-X, --method` of `upload` and `queue add --upload`; nil when not given.
    static func method(_ arguments: ParsedArguments, _ option: Option) throws -> HTTPMethod? {
        guard let text = arguments.value(option) else { return nil }
        guard let method = HTTPMethod(text) else {
            throw UsageError.invalidValue(text, for: option, "expected an HTTP method such as POST or PUT")
        }
        return method
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        let path = path.hasPrefix("/") ? path : context.currentDirectory + "/" + path
        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        // Uploads keep no state on disk; the agent opens its state directory only for downloads.
        // The route to the server gates the upload, as it gates a download: a server reached by
        // a route of its own is uploaded to on a machine without a default route.
        let agent: DownloadAgent
        let errorOutput = context.errorOutput
        // --verbose also traces each attempt of the upload (what it sent, what ended it, what it waited for).
        let logger = monitor.isVerbose
            ? Logger(label: "reachability.upload", minimumLevel: .debug, sink: { errorOutput.line(TerminalText.escaped($0)) })
            : .silent
        do {
            agent = try DownloadAgent(configuration: .init(stateDirectory: URL(fileURLWithPath: "/nonexistent/reachability-upload"),
                                                           initialBackoff: .milliseconds(100), maximumBackoff: .seconds(1),
                                                           logger: logger),
                                      paths: source.paths, hostPaths: { source.paths(to: $0) })
        } catch {
            throw CommandFailure(message: "cannot start the upload engine: \(error)", exitCode: .failure)
        }
        let reporter = UploadReporter(context: context, isJSON: isJSON, isQuiet: isQuiet,
                                      drawsProgress: !isJSON && !isQuiet && context.isTerminal(2))
        let upload = Task { [uploadOptions, target] () async -> Result<UploadResult, UploadFailure> in
            do throws(UploadFailure) {
                return .success(try await agent.upload(fileAt: path, to: target, options: uploadOptions, handlers: reporter.handlers))
            } catch {
                return .failure(error)
            }
        }
        let signal = Atomic<Int32>(0)
        let stopWatching = await context.onSignals([SIGINT, SIGTERM]) { number in
            signal.store(number, ordering: .relaxed)
            upload.cancel()
        }
        let outcome = await upload.value
        stopWatching()
        await agent.shutdown()
        switch outcome {
        case .success(let result):
            reporter.completed(result)
            return .success
        case .failure(let failure):
            let number = signal.load(ordering: .relaxed)
            if number != 0 {
                reporter.failed(failure, exitCode: 128 + number)
                return ExitCode(rawValue: 128 + number)
            }
            let code = Self.exitCode(for: failure)
            reporter.failed(failure, exitCode: code.rawValue)
            return code
        }
    }

    static func exitCode(for failure: UploadFailure) -> ExitCode {
        let text = failure.error.description
        if text.hasPrefix("cannot open") || text.contains("only regular files can be uploaded") || text.hasPrefix("cannot examine") {
            return ExitCode(rawValue: 66)
        }
        // A file that changed (or could not be read) mid-upload cannot be continued: the server's
        // part is of another version, so a later run must start again (not "try again later").
        if failure.error == .fileSystem { return .failure }
        if failure.resumeState != nil { return .temporaryFailure }
        return .failure
    }
}

/// Prints an upload's events: text lines on stderr, NDJSON on stdout, a progress line on a TTY.
final class UploadReporter: Sendable {
    let context: CommandContext
    let isJSON: Bool
    let isQuiet: Bool
    let drawsProgress: Bool
    private let lastDrawn = Mutex<ContinuousClock.Instant?>(nil)

    init(context: CommandContext, isJSON: Bool, isQuiet: Bool, drawsProgress: Bool) {
        self.context = context
        self.isJSON = isJSON
        self.isQuiet = isQuiet
        self.drawsProgress = drawsProgress
    }

    var handlers: UploadHandlers {
        UploadHandlers(progress: { [self] sent, length in progress(sent, length) }, event: { [self] event in report(event) })
    }

    private func progress(_ sent: Int64, _ length: Int64) {
        guard drawsProgress || (isJSON && !isQuiet) else { return }
        let now = ContinuousClock.now
        let due = lastDrawn.withLock { last -> Bool in
            guard last.map({ now - $0 >= .milliseconds(isJSON ? 500 : 200) }) ?? true else { return false }
            last = now
            return true
        }
        guard due else { return }
        if isJSON {
            emit([("event", .string("progress")), ("sent", .integer(Int(sent))), ("length", .integer(Int(length)))], text: "")
            return
        }
        let percent = length > 0 ? sent * 100 / length : 100
        context.errorOutput.write("\r\(UploadCommand.commandPath): \(sent)/\(length) bytes sent (\(percent)%)   ")
    }

    private func report(_ event: UploadEvent) {
        guard !isQuiet else { return }
        let fields: [(String, JSONValue)]
        let text: String
        switch event {
        case .protocolChosen(let chosen):
            fields = [("event", .string("protocol")), ("protocol", .string(chosen.rawValue))]
            text = "protocol: \(chosen.rawValue)"
        case .created(let url):
            fields = [("event", .string("created")), ("upload_url", .string(URLRedaction.redacted(url)))]
            text = "the server holds the upload at \(URLRedaction.redacted(url))"
        case .interrupted(let error):
            fields = [("event", .string("interrupted")), ("code", .integer(error.errorCode)), ("message", .string(error.description))]
            text = "interrupted: \(error.description)"
        case .resumed(let offset):
            fields = [("event", .string("resumed")), ("offset", .integer(Int(offset)))]
            text = "resuming from byte \(offset), which the server acknowledged"
        case .waitingForConnectivity:
            fields = [("event", .string("waiting"))]
            text = "waiting for a usable network path"
        }
        emit(fields, text: text)
    }

    func completed(_ result: UploadResult) {
        if drawsProgress { context.errorOutput.write("\n") }
        guard !isQuiet else { return }
        emit([("event", .string("completed")), ("status", .integer(result.response.statusCode)),
              ("protocol", .string(result.protocolUsed.rawValue)), ("length", .integer(Int(result.length))),
              ("bytes_sent", .integer(Int(result.bytesSent))), ("bytes_resent", .integer(Int(result.bytesResent)))],
             text: "uploaded \(result.length) bytes (HTTP \(result.response.statusCode), \(result.protocolUsed.rawValue)); \(result.bytesResent) bytes sent twice")
    }

    func failed(_ failure: UploadFailure, exitCode: Int32) {
        if drawsProgress { context.errorOutput.write("\n") }
        let kept = failure.resumeState != nil ? " (the server keeps what it received; running the same command again starts over)" : ""
        if isJSON {
            emit([("event", .string("failed")), ("code", .integer(failure.error.errorCode)),
                  ("message", .string(failure.error.description)), ("exit", .integer(Int(exitCode)))], text: "")
        }
        context.errorOutput.line("\(UploadCommand.commandPath): \(failure.error.description)\(kept)")
    }

    private func emit(_ fields: [(String, JSONValue)], text: String) {
        if isJSON {
            context.output.line(JSONValue.object(fields.map { JSONValue.Member(key: $0.0, value: $0.1) }).serialized)
        } else if !text.isEmpty {
            context.errorOutput.line("\(UploadCommand.commandPath): \(text)")
        }
    }
}
