import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ResumableDownloads
import Synchronization

/// `reachability download`: fetch URLs with resume data, pausing while the network is unusable
/// and continuing from the stored offset when it comes back (or when the command is run again).
struct DownloadCommand: Command {
    static let name = "download"
    static let abstract = "Download URLs, waiting out network outages and resuming where they stopped."
    static let output = Option.value(
        "output", short: "o", valueName: "file",
        help: "Write the file here (one URL only); '-' writes it to stdout once it is complete and verified. Default: the URL's last path component.")
    static let directory = Option.value(
        "directory", short: "d", valueName: "dir",
        help: "Put downloaded files in this directory (default: the current directory).")
    /// `--netns` for download: the transfers run in the namespace too, not only the path monitor.
    static let networkNamespace = Option.value(
        "netns", valueName: "name",
        help: "Download inside the named network namespace (see 'ip netns'), watching its path. Needs root and iproute2.")
    static let sha256 = Option.value(
        "sha256", valueName: "hex",
        help: "The SHA-256 (64 hex digits) the file must have; with several URLs it applies to each.")
    static let noExpensive = Option.flag(
        "no-expensive", help: "Never use an expensive (cellular-like) path; wait for another one.")
    static let connections = Option.value(
        "connections", valueName: "n",
        help: "Open at most this many connections to one server at once (1-\(DownloadAgent.maximumConnectionsPerHostLimit), default \(DownloadAgent.defaultConnectionsPerHost), as a web browser). More than one only when the server answers ranges with a validator (or --sha256 is given), and only while each added connection makes the download faster.")
    static let interface = Option.repeating(
        "interface", valueName: "name",
        help: "Download over this interface only (repeatable: the connections are spread over all those named). Default: every usable uplink when there are several, else the routing table's choice.")
    static let expensiveAsFallback = Option.flag(
        "expensive-as-fallback",
        help: "Use an expensive path only while no other path is usable (by default it is also used beside them, while it adds throughput).")
    static let stateDirectory = Option.value(
        "state-dir", valueName: "dir",
        help: "Where resume data is kept (default $REACHABILITY_STATE_DIR, else $XDG_STATE_HOME/reachability, else /var/lib/reachability as root, else ~/.local/state/reachability).")
    static let maximumOutage = Option.value(
        "max-outage", valueName: "seconds",
        help: "Give up (keeping the resume data, exit 75) after waiting this long for a usable path, a server that does not answer, or one that keeps answering 5xx. Default: wait forever.")
    static let json = Option.flag(
        "json", help: "Print one JSON object per event on stdout (NDJSON, docs/events.md) instead of text lines on stderr.")
    static let quiet = Option.flag(
        "quiet", short: "q", help: "Print no events and no progress bars; errors are still printed.")
    static let header = Option.repeating(
        "header", short: "H", valueName: "name: value",
        help: "Send this request header (repeatable). Range, If-Range and Accept-Encoding are the downloader's own.")
    static let limitRate = TransportOptions.limitRate
    static let certificateAuthorities = TransportOptions.certificateAuthorities
    static let insecure = Option.flag(
        "insecure", short: "k",
        help: "Do not check the server's certificate (anyone on the path can then change the file; use --sha256).")
    static let proxy = TransportOptions.proxy
    static let urls = Positional(name: "url", help: "http or https URLs to download.", isRepeating: true)
    static let options = [output, directory, sha256, noExpensive, connections, interface, expensiveAsFallback, stateDirectory,
                          maximumOutage, json, quiet, header, limitRate, certificateAuthorities, insecure, proxy]
        + MonitorOptions.all.map { $0.name == MonitorOptions.networkNamespace.name ? networkNamespace : $0 }
    static let positionals = [urls]
    static let discussion: String? = """
        Each file is written to NAME.part and moved to NAME only once it is complete (and matches \
        --sha256). A destination that already exists is never overwritten: delete it first; if it \
        matches --sha256, or an interrupted run of the same command completed it, it counts as \
        complete and nothing is downloaded. \
        Interrupting (Ctrl-C, SIGTERM) pauses and keeps the resume data; running the same command \
        again (same URL and destination) continues from the stored offset, if the server's ETag or \
        Last-Modified still match; a second Ctrl-C quits without waiting for the checkpoint. \
        A progress bar per download is drawn on stderr when it is a \
        terminal; otherwise events are printed one per line.
        """ + "\n\n" + """
        Proxies: libcurl's environment variables are honoured as by curl (http_proxy, https_proxy, \
        all_proxy, no_proxy); --proxy overrides them. A proxy that cannot be reached is named in the error.
        """ + "\n\n" + """
        Exit status: 0 every file complete and verified; 1 a download failed for good (HTTP error, \
        checksum mismatch, untrusted certificate, bad reply; nothing is kept); 64 usage error; \
        73 a destination already exists (also one that appears meanwhile: it is never replaced), \
        cannot be created or written, or its NAME.part is not a regular file of yours; 74 the disk is full or \
        failed; 75 gave up for now (--max-outage, or the server kept failing): run the same command \
        again; 77 --netns without privilege; 66 no such network namespace; 78 bad classify.conf or an \
        unsafe state directory (the message says the fix); \
        130 interrupted by SIGINT, 143 by SIGTERM. Only failures that say "resume data kept" keep it.
        """ + "\n\n" + MonitorOptions.discussion

    /// One URL and where it goes.
    struct Job: Sendable, Equatable {
        var url: URL
        var destination: URL
        /// `-o -`: the destination is a file in the state directory, written to stdout when done.
        var isStandardOutput = false
    }

    /// Downloads transferring at once (the agent's default); further URLs wait for a slot.
    static let maximumConcurrentDownloads = 4

    var urls: [URL]
    var explicitOutput: String?
    var directory: String?
    var expectedSHA256: String?
    var allowsExpensive: Bool
    /// `--connections`: nil keeps the agent's default.
    var maximumConnections: Int?
    /// `--interface`, in the order given.
    var interfaces: [String]
    var usesExpensivePathsOnlyAsFallback: Bool
    var stateDirectoryOverride: String?
    var maximumOutageWait: Duration?
    var isJSON: Bool
    var isQuiet: Bool
    var headers: [String]
    var maximumBytesPerSecond: Int64?
    var certificateAuthorityFile: String?
    var verifiesCertificates: Bool
    var proxyURL: String?
    var monitor: MonitorOptions

    /// `-o -`.
    var writesToStandardOutput: Bool { explicitOutput == "-" }

    init(arguments: ParsedArguments) throws {
        urls = try arguments.positional(Self.urls).map(Self.parseURL)
        explicitOutput = arguments.value(Self.output)
        directory = arguments.value(Self.directory)
        if let explicitOutput {
            if urls.count > 1 {
                throw UsageError("'\(Self.output.synopsis)' names one file but \(urls.count) URLs were given; use '\(Self.directory.synopsis)' instead")
            }
            if directory != nil {
                throw UsageError("'\(Self.output.synopsis)' and '\(Self.directory.synopsis)' cannot be used together")
            }
            if explicitOutput.isEmpty || (explicitOutput.hasSuffix("/") && explicitOutput != "-") {
                throw UsageError.invalidValue(explicitOutput, for: Self.output, "expected a file name")
            }
        }
        if let directory, directory.isEmpty {
            throw UsageError.invalidValue(directory, for: Self.directory, "expected a directory")
        }
        if let hex = arguments.value(Self.sha256) {
            guard hex.count == 64, hex.allSatisfy(\.isHexDigit) else {
                throw UsageError.invalidValue(hex, for: Self.sha256, "expected 64 hexadecimal digits")
            }
            expectedSHA256 = hex.lowercased()
        }
        allowsExpensive = !arguments.isSet(Self.noExpensive)
        if let text = arguments.value(Self.connections) {
            let limit = DownloadAgent.maximumConnectionsPerHostLimit
            guard text.utf8.allSatisfy({ (48...57).contains($0) }), let count = Int(text), (1...limit).contains(count) else {
                throw UsageError.invalidValue(text, for: Self.connections, "expected a whole number from 1 to \(limit)")
            }
            maximumConnections = count
        }
        interfaces = try arguments.values(Self.interface).map { name in
            // IFNAMSIZ is 16 with the terminating NUL; the kernel refuses '/', whitespace and ':' aliases.
            guard (1...15).contains(name.utf8.count), name != ".", name != "..",
                  name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: ":") }) else {
                throw UsageError.invalidValue(name, for: Self.interface, "expected an interface name (1-15 visible characters, no '/' or ':')")
            }
            return name
        }
        usesExpensivePathsOnlyAsFallback = arguments.isSet(Self.expensiveAsFallback)
        if usesExpensivePathsOnlyAsFallback && !allowsExpensive {
            throw UsageError("'\(Self.expensiveAsFallback.synopsis)' and '\(Self.noExpensive.synopsis)' contradict each other; use one")
        }
        stateDirectoryOverride = arguments.value(Self.stateDirectory)
        if let stateDirectoryOverride, stateDirectoryOverride.isEmpty {
            throw UsageError.invalidValue(stateDirectoryOverride, for: Self.stateDirectory, "expected a directory")
        }
        if let text = arguments.value(Self.maximumOutage) {
            guard let seconds = Double(text), seconds.isFinite, seconds >= 0 else {
                throw UsageError.invalidValue(text, for: Self.maximumOutage, "expected a number of seconds")
            }
            maximumOutageWait = .milliseconds(Int64(seconds * 1000))
        }
        isJSON = arguments.isSet(Self.json)
        isQuiet = arguments.isSet(Self.quiet)
        headers = try arguments.values(Self.header).map { line in
            if let problem = HeaderValidation.problem(with: line) {
                throw UsageError.invalidValue(line, for: Self.header, problem)
            }
            return line
        }
        let transport = try TransportOptions(arguments: arguments)
        maximumBytesPerSecond = transport.maximumBytesPerSecond
        certificateAuthorityFile = transport.certificateAuthorityFile
        verifiesCertificates = !arguments.isSet(Self.insecure)
        proxyURL = transport.proxy
        monitor = try MonitorOptions(arguments: arguments)
        if writesToStandardOutput && isJSON {
            throw UsageError("'\(Self.output.synopsis)' '-' and '\(Self.json.synopsis)' both write to stdout; use one")
        }
        if explicitOutput == nil || explicitOutput == "-" {
            for url in urls where explicitOutput == nil && Self.defaultFileName(for: url) == nil {
                throw UsageError("Cannot name a file after '\(URLRedaction.redacted(url))' (no file name in its path); use '\(Self.output.synopsis)'")
            }
        }
    }

    /// Only absolute http/https URLs with a host; anything else is a usage error.
    static func parseURL(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
              let host = url.host, !host.isEmpty else {
            throw UsageError("The value '\(URLRedaction.redacted(text))' is invalid for '<url>': expected an http or https URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw UsageError("The value '\(URLRedaction.redacted(text))' is invalid for '<url>': only http and https URLs are supported, not '\(scheme)'")
        }
        return url
    }

    /// The URL's last path component, as curl -O and wget name files; nil when there is none.
    /// Control characters stay percent-encoded (`%0D%0A`), as wget's default
    /// `--restrict-file-names=unix` keeps them: a file name with CR, LF or ESC in it would
    /// garble every listing and terminal that shows it.
    static func defaultFileName(for url: URL) -> String? {
        // Foundation has already percent-decoded it once (`a%2541` is `a%41`, not `aA`).
        let decoded = url.lastPathComponent
        var name = ""
        for scalar in decoded.unicodeScalars {
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                name += String(scalar).utf8.map { "%" + String($0, radix: 16, uppercase: true).leftPadded(to: 2) }.joined()
            } else {
                name.unicodeScalars.append(scalar)
            }
        }
        guard !name.isEmpty, name != "/", name != ".", name != "..", !name.contains("/") else { return nil }
        return name
    }

    /// `500k`, `2m`, `1g`, `12345` (bytes per second; k = 1024, as curl).
    static func parseRate(_ text: String) -> Int64? { TransportOptions.parseRate(text) }

    /// Where each URL goes, relative paths resolved against `workingDirectory`; `-o -` downloads
    /// into `stateRoot/stdout/` first.
    func jobs(workingDirectory: String, stateRoot: URL? = nil) throws -> [Job] {
        let base = URL(fileURLWithPath: workingDirectory, isDirectory: true)
        let jobs = urls.map { url -> Job in
            let destination: URL
            if writesToStandardOutput {
                let root = stateRoot ?? base
                let name = Self.defaultFileName(for: url) ?? "download"
                let key = DownloadStateDirectory.jobDirectory(for: Job(url: url, destination: URL(fileURLWithPath: "/dev/stdout")),
                                                              in: root).lastPathComponent
                return Job(url: url, destination: root.appendingPathComponent("stdout/\(key)/\(name)").standardizedFileURL,
                           isStandardOutput: true)
            } else if let explicitOutput {
                destination = URL(fileURLWithPath: explicitOutput, relativeTo: base)
            } else {
                let folder = directory.map { URL(fileURLWithPath: $0, isDirectory: true, relativeTo: base) } ?? base
                destination = folder.appendingPathComponent(Self.defaultFileName(for: url)!)
            }
            return Job(url: url, destination: destination.standardizedFileURL)
        }
        var seen: Set<String> = []
        for job in jobs where !seen.insert(job.destination.path).inserted {
            throw UsageError("Two URLs would be saved as '\(job.destination.path)'; download them separately with '\(Self.output.synopsis)'")
        }
        return jobs
    }

    /// A download that did not finish, reported after the others.
    struct JobFailure: Sendable {
        var job: Job
        var message: String
        var exitCode: ExitCode
    }

    func run(in context: CommandContext) async throws -> ExitCode {
        if let namespace = monitor.networkNamespace, context.environment[NamespaceReexec.marker] != namespace,
           NamespaceReexec.isToolProcess {
            _ = try monitor.configuration(in: context)   // privilege (77) and classify.conf (78) errors first
            try NamespaceReexec.execute(inNamespace: namespace, environment: context.environment)
        }
        let stateRoot = try DownloadStateDirectory.resolve(override: stateDirectoryOverride, environment: context.environment,
                                                           system: .current(context))
        let jobs = try jobs(workingDirectory: context.currentDirectory, stateRoot: stateRoot)
        try DownloadStateDirectory.create(stateRoot)
        // Missing folders are made (as `-d` implies); otherwise the agent would fail later with a
        // file-system error. Walked from / without following links someone else could plant.
        for folder in Set(jobs.map { $0.destination.deletingLastPathComponent() }) {
            do {
                _ = try CheckedDirectory.open(folder.path, policy: .shared, creating: true,
                                              mode: writesToStandardOutput ? 0o700 : 0o777)
            } catch {
                throw CommandFailure(message: "cannot create \(folder.path): \(TextFormat.reason(error))", exitCode: .cannotCreate)
            }
        }
        if !verifiesCertificates {
            context.errorOutput.line("warning: --insecure: the server's certificate is not checked, so anyone on the network path can read and change what is downloaded\(expectedSHA256 == nil ? " (--sha256 would catch a changed file)" : "")")
        }

        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        let reporter = DownloadReporter(context: context, isJSON: isJSON, drawsProgress: context.isTerminal(2),
                                        usesColor: context.environment["NO_COLOR"].map(\.isEmpty) ?? true, isQuiet: isQuiet,
                                        writesToStandardOutput: writesToStandardOutput, currentPath: { source.currentPath })

        let errorOutput = context.errorOutput
        let logger = monitor.isVerbose
            ? Logger(label: "reachability.download", minimumLevel: .debug, sink: { errorOutput.line(TerminalText.escaped($0)) })
            : .silent
        let options = DownloadOptions(expectedSHA256: expectedSHA256, allowsExpensive: allowsExpensive,
                                      maximumConnections: maximumConnections, interfaces: interfaces,
                                      usesExpensivePathsOnlyAsFallback: usesExpensivePathsOnlyAsFallback)
        let makeConfiguration: @Sendable (URL) -> DownloadAgent.Configuration = { [self] state in
            var configuration = DownloadAgent.Configuration(stateDirectory: state, maximumOutageWait: maximumOutageWait,
                                                            logger: logger)
            configuration.additionalHeaders = headers
            configuration.maximumBytesPerSecond = maximumBytesPerSecond
            configuration.certificateAuthorityFile = certificateAuthorityFile.map {
                URL(fileURLWithPath: $0, relativeTo: URL(fileURLWithPath: context.currentDirectory, isDirectory: true))
            }
            configuration.verifiesCertificates = verifiesCertificates
            configuration.proxy = proxyURL
            if let maximumConnections { configuration.maximumConnectionsPerHost = maximumConnections }
            DownloadTuning.apply(context.environment, to: &configuration)
            return configuration
        }
        let registry = SessionRegistry()

        // One job's life: open (restore or create), follow its events until it ends or the
        // command is interrupted. Failures to open are reported with the others at the end.
        @Sendable func runJob(_ job: Job) async -> JobFailure? {
            guard !registry.isInterrupted else { return nil }
            let session: DownloadSession
            do {
                // A stream per agent: an AsyncStream hands each element to one consumer only.
                session = try await DownloadSession.open(job, stateRoot: stateRoot, paths: source.paths,
                                                         hostPaths: { source.paths(to: $0) },
                                                         configuration: makeConfiguration, options: options)
            } catch let failure as CommandFailure {
                return JobFailure(job: job, message: failure.message, exitCode: failure.exitCode)
            } catch let complete as AlreadyComplete {
                registry.markAlreadyComplete(job)
                reporter.reportAlreadyComplete(job, reason: complete.reason)
                return nil
            } catch {
                // Interrupted while opening (hashing an existing file): not a failure of its own.
                if registry.isInterrupted || error is CancellationError { return nil }
                return JobFailure(job: job, message: "\(error)", exitCode: .failure)
            }
            if !registry.add(session) {
                await session.agent.shutdown()   // the interrupt came while it was opening
                return nil
            }
            await reporter.follow(session.download)
            return nil
        }

        let run = RunControl()
        // Installed before any transfer starts, so no signal finds the default action.
        let removeHandler = await context.onSignals([SIGINT, SIGTERM]) { number in
            guard run.firstInterruption(number) else {
                // A second Ctrl-C while pausing: stop waiting for the checkpoint. The last one is
                // still a valid resume point (the partial file is cut back to it on the next run).
                run.finish(nil)
                return
            }
            let running = registry.interrupt()
            Task {
                for session in running { await session.agent.shutdown() }
                run.cancelWork()
            }
        }
        let limit = Self.maximumConcurrentDownloads
        run.start {
            let progress = Task { await reporter.drawProgress { registry.downloads } }
            // Each agent serves one URL, so the concurrency limit lives here: at most `limit` jobs
            // open at once; the next one starts when one ends (completes, fails, is interrupted).
            let failures = await withTaskGroup(of: JobFailure?.self) { group in
                var failures: [JobFailure] = []
                var running = 0
                for job in jobs {
                    if running == limit, let finished = await group.next() {
                        running -= 1
                        if let finished { failures.append(finished) }
                    }
                    if Task.isCancelled || registry.isInterrupted { break }
                    group.addTask { await runJob(job) }
                    running += 1
                }
                for await finished in group {
                    if let finished { failures.append(finished) }
                }
                return failures
            }
            progress.cancel()
            await progress.value
            return failures
        }
        let outcome = await run.result()
        removeHandler()
        reporter.finishProgress()
        guard var failures = outcome else {
            context.errorOutput.line("interrupted again: quitting without waiting for the checkpoint; run the same command again to resume")
            return ExitCode(rawValue: 128 + run.interruption)
        }
        let sessions = registry.sessions

        // Failures: decide what is kept before the agents stop (cancel deletes partial data and record).
        for session in sessions {
            switch session.download.state {
            case .completed:
                continue
            case .failed(let error):
                let verdict = DownloadFailureVerdict(error, storedBytes: session.download.progress.bytesReceived)
                if !verdict.keepsResumeData { await session.agent.cancel(session.download) }
                failures.append(JobFailure(job: session.job, message: "\(error.description)\(verdict.suffix)", exitCode: verdict.exitCode))
            default:
                if run.interruption == 0 {
                    failures.append(JobFailure(job: session.job, message: "did not finish (\(session.download.state))", exitCode: .failure))
                }
            }
        }
        let signal = run.interruption
        // Interrupted before every job was done (running, or not even opened yet).
        let unfinished = signal != 0 && (sessions.contains { $0.download.state != .completed }
                                         || sessions.count + registry.alreadyComplete.count < jobs.count)
        let isComplete = failures.isEmpty && !unfinished
            && sessions.count + registry.alreadyComplete.count == jobs.count

        // `-o -`: the verified file goes to stdout, then away.
        if isComplete, writesToStandardOutput {
            for job in jobs {
                do {
                    try Self.copyToStandardOutput(job.destination, context: context)
                    unlink(job.destination.path)
                    rmdir(job.destination.deletingLastPathComponent().path)
                } catch {
                    failures.append(JobFailure(job: job, message: "cannot write to stdout: \(TextFormat.reason(error)); the file is kept for the next run", exitCode: .ioError))
                }
            }
        }
        // Completed files stay "done" for the next run of the same command only while the batch
        // is unfinished; a finished batch leaves nothing behind.
        for session in sessions {
            await session.agent.shutdown()
            session.close(marksCompletion: !isComplete)
        }
        if isComplete {
            for job in registry.alreadyComplete {
                let directory = DownloadStateDirectory.jobDirectory(for: job, in: stateRoot)
                CompletionMarker.remove(in: directory)
                DownloadSession.removeIfEmpty(directory)
            }
        }
        if unfinished {
            context.errorOutput.line("paused; run the same command again to resume")
            return ExitCode(rawValue: 128 + signal)
        }

        // In command-line order, whatever order they ended in.
        let order = Dictionary(jobs.enumerated().map { ($1.destination, $0) }, uniquingKeysWith: { first, _ in first })
        failures.sort { order[$0.job.destination, default: 0] < order[$1.job.destination, default: 0] }
        for failure in failures {
            context.errorOutput.line(TerminalText.escaped("Error: \(URLRedaction.redacted(failure.job.url)): \(failure.message)"))
        }
        return DownloadFailureVerdict.combinedExitCode(failures.map(\.exitCode))
    }

    /// Copies a finished file to stdout in 1 MiB reads.
    static func copyToStandardOutput(_ file: URL, context: CommandContext) throws {
        let descriptor = open(file.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = read(descriptor, buffer.baseAddress, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            if count == 0 { return }
            try context.writeStandardOutput(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }
}

/// How one `download` run ends: its work, the signal that interrupted it, and the first of
/// "the work finished" or "a second signal said quit now". Signal handlers only set state here;
/// nothing exits the process from a handler.
final class RunControl: Sendable {
    private struct State {
        var interruption: Int32 = 0
        var work: Task<Void, Never>?
        var isWorkCancelled = false
        var outcome: [DownloadCommand.JobFailure]??
        var waiter: CheckedContinuation<[DownloadCommand.JobFailure]?, Never>?
    }

    private let state = Mutex(State())

    /// Records the first signal; false when one had already arrived.
    func firstInterruption(_ number: Int32) -> Bool {
        state.withLock { state in
            guard state.interruption == 0 else { return false }
            state.interruption = number
            return true
        }
    }

    /// The first signal's number, 0 when none arrived.
    var interruption: Int32 { state.withLock { $0.interruption } }

    /// Starts the work; its failures become the result unless a second signal came first.
    func start(_ body: @escaping @Sendable () async -> [DownloadCommand.JobFailure]) {
        let task = Task { self.finish(await body()) }
        let cancelNow = state.withLock { state in
            state.work = task
            return state.isWorkCancelled
        }
        if cancelNow { task.cancel() }
    }

    /// Cancels the work (after an interrupt shut the agents down).
    func cancelWork() {
        let task = state.withLock { state in
            state.isWorkCancelled = true
            return state.work
        }
        task?.cancel()
    }

    /// The first result wins: the work's failures, or nil for "quit now".
    func finish(_ outcome: [DownloadCommand.JobFailure]?) {
        let waiter = state.withLock { state -> CheckedContinuation<[DownloadCommand.JobFailure]?, Never>? in
            guard state.outcome == nil else { return nil }
            state.outcome = .some(outcome)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: outcome)
    }

    /// Waits for `finish`.
    func result() async -> [DownloadCommand.JobFailure]? {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> [DownloadCommand.JobFailure]?? in
                if let outcome = state.outcome { return .some(outcome) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

extension ExitCode {
    /// EX_CANTCREAT: the destination exists or its directory cannot be made.
    static let cannotCreate = ExitCode(rawValue: 73)
    /// EX_IOERR: the disk filled up or failed, or stdout could not be written.
    static let ioError = ExitCode(rawValue: 74)
    /// EX_TEMPFAIL: gave up waiting for the network or the server; running again later can succeed.
    static let temporaryFailure = ExitCode(rawValue: 75)
}

/// Test and benchmark knobs read from the environment (not in `--help`: production defaults are
/// the right ones for people): `REACHABILITY_DOWNLOAD_STALL_TIMEOUT`, `..._CONNECT_TIMEOUT`
/// (seconds), `REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES` and `..._MAX_FAILURES` (the failure budget).
enum DownloadTuning {
    static func apply(_ environment: [String: String], to configuration: inout DownloadAgent.Configuration) {
        if let text = environment["REACHABILITY_DOWNLOAD_STALL_TIMEOUT"], let seconds = Double(text), seconds > 0 {
            configuration.stallTimeout = .milliseconds(Int64(seconds * 1000))
        }
        if let text = environment["REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES"], let bytes = Int64(text), bytes > 0 {
            configuration.checkpointInterval = bytes
        }
        if let text = environment["REACHABILITY_DOWNLOAD_CONNECT_TIMEOUT"], let seconds = Double(text), seconds > 0 {
            configuration.connectTimeout = .milliseconds(Int64(seconds * 1000))
        }
        if let text = environment["REACHABILITY_DOWNLOAD_MAX_FAILURES"], let count = Int(text), count >= 0 {
            configuration.maximumConsecutiveFailures = count
        }
    }
}

/// The sessions of one `download` run, shared by the job tasks, the progress loop and the
/// interrupt handler (a signal can arrive while a job is still opening).
final class SessionRegistry: Sendable {
    private struct State {
        var sessions: [DownloadSession] = []
        var alreadyComplete: [DownloadCommand.Job] = []
        var isInterrupted = false
    }

    private let state = Mutex(State())

    /// Adds a session; false (not added) once the run was interrupted.
    func add(_ session: DownloadSession) -> Bool {
        state.withLock { state in
            guard !state.isInterrupted else { return false }
            state.sessions.append(session)
            return true
        }
    }

    /// Marks the run interrupted and returns the sessions to shut down.
    func interrupt() -> [DownloadSession] {
        state.withLock { state in
            state.isInterrupted = true
            return state.sessions
        }
    }

    /// A job whose destination already held the wanted file.
    func markAlreadyComplete(_ job: DownloadCommand.Job) { state.withLock { $0.alreadyComplete.append(job) } }

    var alreadyComplete: [DownloadCommand.Job] { state.withLock { $0.alreadyComplete } }
    var isInterrupted: Bool { state.withLock { $0.isInterrupted } }
    var sessions: [DownloadSession] { state.withLock { $0.sessions } }
    var downloads: [Download] { sessions.map(\.download) }
}

private extension String {
    /// Zeros in front up to `width` characters (`0D`).
    func leftPadded(to width: Int) -> String { count < width ? String(repeating: "0", count: width - count) + self : self }
}
