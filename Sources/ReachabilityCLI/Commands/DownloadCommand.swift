import FoundationEssentials
import Glibc
import LinuxReachability
import ResumableDownloads
import Synchronization

/// `reachability download`: fetch URLs with resume data, pausing while the network is unusable
/// and continuing from the stored offset when it comes back (or when the command is run again).
struct DownloadCommand: Command {
    static let name = "download"
    static let abstract = "Download URLs, waiting out network outages and resuming where they stopped."
    static let output = Option.value(
        "output", short: "o", valueName: "file",
        help: "Write the file here (one URL only). Default: the URL's last path component.")
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
    static let stateDirectory = Option.value(
        "state-dir", valueName: "dir",
        help: "Where resume data is kept (default $XDG_STATE_HOME/reachability, ~/.local/state/reachability, or /var/lib/reachability as root).")
    static let maximumOutage = Option.value(
        "max-outage", valueName: "seconds",
        help: "Give up (keeping the resume data, exit 75) after waiting this long for a usable path. Default: wait forever.")
    static let json = Option.flag(
        "json", help: "Print one JSON object per event on stdout (NDJSON) instead of text lines on stderr.")
    static let urls = Positional(name: "url", help: "http or https URLs to download.", isRepeating: true)
    static let options = [output, directory, sha256, noExpensive, stateDirectory, maximumOutage, json]
        + MonitorOptions.all.map { $0.name == MonitorOptions.networkNamespace.name ? networkNamespace : $0 }
    static let positionals = [urls]
    static let discussion: String? = """
        Each file is written to NAME.part and moved to NAME only once it is complete (and matches \
        --sha256). A destination that already exists is never overwritten: delete it first; if it \
        matches --sha256 it counts as complete and nothing is downloaded. \
        Interrupting (Ctrl-C, SIGTERM) pauses and keeps the resume data; running the same command \
        again (same URL and destination) continues from the stored offset, if the server's ETag or \
        Last-Modified still match. A progress bar per download is drawn on stderr when it is a \
        terminal; otherwise events are printed one per line.
        """ + "\n\n" + """
        Exit status: 0 every file complete and verified; 1 a download failed (HTTP error, checksum \
        mismatch, repeated network errors); 64 usage error; 73 a destination already exists or cannot \
        be created; 75 gave up waiting for the network (--max-outage), resume data kept; 77 --netns \
        without privilege; 78 bad classify.conf; 130 interrupted by SIGINT, 143 by SIGTERM (paused, \
        resume data kept).
        """ + "\n\n" + MonitorOptions.discussion

    /// One URL and where it goes.
    struct Job: Sendable, Equatable {
        var url: URL
        var destination: URL
    }

    /// Downloads transferring at once (the agent's default); further URLs wait for a slot.
    static let maximumConcurrentDownloads = 4

    var urls: [URL]
    var explicitOutput: String?
    var directory: String?
    var expectedSHA256: String?
    var allowsExpensive: Bool
    var stateDirectoryOverride: String?
    var maximumOutageWait: Duration?
    var isJSON: Bool
    var monitor: MonitorOptions

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
            if explicitOutput.isEmpty || explicitOutput.hasSuffix("/") {
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
        monitor = try MonitorOptions(arguments: arguments)
        if explicitOutput == nil {
            for url in urls where Self.defaultFileName(for: url) == nil {
                throw UsageError("Cannot name a file after '\(url.absoluteString)' (no file name in its path); use '\(Self.output.synopsis)'")
            }
        }
    }

    /// Only absolute http/https URLs with a host; anything else is a usage error.
    static func parseURL(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
              let host = url.host, !host.isEmpty else {
            throw UsageError("The value '\(text)' is invalid for '<url>': expected an http or https URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw UsageError("The value '\(text)' is invalid for '<url>': only http and https URLs are supported, not '\(scheme)'")
        }
        return url
    }

    /// The URL's last path component, as curl -O and wget name files; nil when there is none.
    static func defaultFileName(for url: URL) -> String? {
        let name = url.lastPathComponent   // already percent-decoded (decoding again would turn %2541 into A)
        guard !name.isEmpty, name != "/", name != ".", name != "..", !name.contains("/") else { return nil }
        return name
    }

    /// Where each URL goes, relative paths resolved against `workingDirectory`.
    func jobs(workingDirectory: String) throws -> [Job] {
        let base = URL(fileURLWithPath: workingDirectory, isDirectory: true)
        let jobs = urls.map { url -> Job in
            let destination: URL
            if let explicitOutput {
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

    func run(in context: CommandContext) async throws -> ExitCode {
        let jobs = try jobs(workingDirectory: FileManager.default.currentDirectoryPath)
        if let namespace = monitor.networkNamespace, context.environment[NamespaceReexec.marker] != namespace,
           NamespaceReexec.isToolProcess {
            _ = try monitor.configuration(in: context)   // privilege (77) and classify.conf (78) errors first
            try NamespaceReexec.execute(inNamespace: namespace, environment: context.environment)
        }
        let stateRoot = try DownloadStateDirectory.resolve(override: stateDirectoryOverride, environment: context.environment,
                                                           isRoot: geteuid() == 0)
        try DownloadStateDirectory.create(stateRoot)
        // Missing folders are made (as `-d` implies); otherwise the agent would fail later with a
        // file-system error that reads as resumable.
        for folder in Set(jobs.map { $0.destination.deletingLastPathComponent() }) {
            do {
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            } catch {
                throw CommandFailure(message: "cannot create \(folder.path): \(TextFormat.reason(error))", exitCode: .cannotCreate)
            }
        }

        let source = try monitor.startPathSource(in: context)
        defer { source.cancel() }
        let reporter = DownloadReporter(context: context, isJSON: isJSON,
                                        drawsProgress: DownloadReporter.standardErrorIsTerminal(),
                                        usesColor: context.environment["NO_COLOR"].map(\.isEmpty) ?? true)

        let errorOutput = context.errorOutput
        let logger = monitor.isVerbose
            ? Logger(label: "reachability.download", minimumLevel: .debug, sink: { errorOutput.line($0) })
            : .silent
        let options = DownloadOptions(expectedSHA256: expectedSHA256, allowsExpensive: allowsExpensive)
        let makeConfiguration: @Sendable (URL) -> DownloadAgent.Configuration = { [maximumOutageWait] state in
            var configuration = DownloadAgent.Configuration(stateDirectory: state, maximumOutageWait: maximumOutageWait,
                                                            logger: logger)
            DownloadTuning.apply(context.environment, to: &configuration)
            return configuration
        }
        let registry = SessionRegistry()
        let expectedSHA256 = expectedSHA256

        // One job's life: open (restore or create), follow its events until it ends or the
        // command is interrupted. Failures to open are reported with the others at the end.
        @Sendable func runJob(_ job: Job) async -> (Job, String, ExitCode)? {
            guard !registry.isInterrupted else { return nil }
            let session: DownloadSession
            do {
                // A stream per agent: an AsyncStream hands each element to one consumer only.
                session = try await DownloadSession.open(job, stateRoot: stateRoot, paths: source.paths,
                                                         configuration: makeConfiguration, options: options)
            } catch let failure as CommandFailure {
                return (job, failure.message, failure.exitCode)
            } catch is AlreadyComplete {
                reporter.reportAlreadyComplete(job)
                return nil
            } catch {
                return (job, "\(error)", .failure)
            }
            let stored = session.download.options.expectedSHA256
            if let expectedSHA256, stored != expectedSHA256 {
                // The resume record keeps the options the download started with.
                context.errorOutput.line("warning: \(job.destination.lastPathComponent): resuming with the SHA-256 given when it started (\(stored ?? "none")); --sha256 \(expectedSHA256) is ignored")
            }
            if !registry.add(session) {
                await session.agent.shutdown()   // the interrupt came while it was opening
                return nil
            }
            await reporter.follow(session.download)
            await session.agent.shutdown()   // frees its engine thread; records of unfinished work are kept
            return nil
        }

        let interruption = Atomic<Int32>(0)
        let limit = Self.maximumConcurrentDownloads
        let work = Task {
            let progress = Task { await reporter.drawProgress { registry.downloads } }
            // Each agent serves one URL, so the concurrency limit lives here: at most `limit` jobs
            // open at once; the next one starts when one ends (completes, fails, is interrupted).
            let failures = await withTaskGroup(of: (Job, String, ExitCode)?.self) { group in
                var failures: [(Job, String, ExitCode)] = []
                var running = 0
                for job in jobs {
                    if running == limit, let finished = await group.next() {
                        running -= 1
                        if let finished { failures.append(finished) }
                    }
                    if Task.isCancelled { break }
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
        let removeHandler = await InterruptSignals.installReportingNumber { number in
            guard interruption.compareExchange(expected: 0, desired: number, ordering: .relaxed).exchanged else {
                // A second Ctrl-C while pausing: quit now. The last checkpoint is still a valid
                // resume point (the partial file is truncated to it on the next run).
                exit(128 + number)
            }
            let running = registry.interrupt()
            Task {
                for session in running { await session.agent.shutdown() }
                work.cancel()
            }
        }
        var failures = await work.value
        removeHandler()
        reporter.finishProgress()
        let sessions = registry.sessions
        for session in sessions { await session.agent.shutdown(); session.close() }

        let signal = interruption.load(ordering: .relaxed)
        if signal != 0 {
            let unfinished = sessions.filter { $0.download.state != .completed }
            if !unfinished.isEmpty {
                context.errorOutput.line("paused; run the same command again to resume")
                return ExitCode(rawValue: 128 + signal)
            }
        }

        for session in sessions {
            switch session.download.state {
            case .completed:
                continue
            case .failed(let error):
                let code: ExitCode = error == .connectivityTimeout ? .temporaryFailure : .failure
                let kept = error.isResumable ? " (resume data kept; run the same command again to continue)" : ""
                failures.append((session.job, "\(error.description)\(kept)", code))
            default:
                failures.append((session.job, "did not finish (\(session.download.state))", .failure))
            }
        }
        // In command-line order, whatever order they ended in.
        let order = Dictionary(jobs.enumerated().map { ($1.destination, $0) }, uniquingKeysWith: { first, _ in first })
        failures.sort { order[$0.0.destination, default: 0] < order[$1.0.destination, default: 0] }
        for (job, message, _) in failures {
            context.errorOutput.line("Error: \(job.url.absoluteString): \(message)")
        }
        // The most severe status wins: a hard failure over "try again later".
        let codes = failures.map(\.2)
        if codes.isEmpty { return .success }
        if codes.contains(.failure) { return .failure }
        return codes.max { $0.rawValue < $1.rawValue }!
    }
}

extension ExitCode {
    /// EX_CANTCREAT: the destination exists or its directory cannot be made.
    static let cannotCreate = ExitCode(rawValue: 73)
    /// EX_TEMPFAIL: gave up waiting for the network; running again later can succeed.
    static let temporaryFailure = ExitCode(rawValue: 75)
}

/// Test and benchmark knobs read from the environment (not in `--help`: production defaults are
/// the right ones for people): `REACHABILITY_DOWNLOAD_STALL_TIMEOUT`, `..._CONNECT_TIMEOUT`
/// (seconds) and `REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES`.
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
    }
}

/// The sessions of one `download` run, shared by the job tasks, the progress loop and the
/// interrupt handler (a signal can arrive while a job is still opening).
final class SessionRegistry: Sendable {
    private struct State {
        var sessions: [DownloadSession] = []
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

    var isInterrupted: Bool { state.withLock { $0.isInterrupted } }
    var sessions: [DownloadSession] { state.withLock { $0.sessions } }
    var downloads: [Download] { sessions.map(\.download) }
}
