import FoundationEssentials
import Glibc
import LinuxReachability
import LinuxSystem
import ResumableDownloads

/// What a `download` run will do, decided and checked before anything starts: knobs read, the
/// state directory resolved and made, every destination named and its folder made.
struct DownloadPlan: Sendable {
    var jobs: [DownloadCommand.Job]
    var stateRoot: URL
    var tuning: DownloadTuning

    /// Re-executes inside `--netns` when needed: it returns only in the namespace (at once when
    /// already there). Privilege (77) and classify.conf (78) errors come first.
    static func enterNamespace(of command: DownloadCommand, in context: CommandContext) throws {
        if let namespace = command.monitor.networkNamespace, context.environment[NamespaceReexec.marker] != namespace,
           NamespaceReexec.isToolProcess {
            _ = try command.monitor.configuration(in: context)
            try NamespaceReexec.execute(inNamespace: namespace, environment: context.environment)
        }
    }

    /// Re-executes inside `--netns` first when needed (it returns only in the namespace), then
    /// fails early on anything the run would fail on later: a bad knob (78), an unsafe state
    /// directory (78), a folder that cannot be made (73).
    static func prepare(_ command: DownloadCommand, in context: CommandContext) throws -> DownloadPlan {
        try enterNamespace(of: command, in: context)
        let tuning = try DownloadTuning(context: context)
        let stateRoot = try DownloadStateDirectory.resolve(override: command.stateDirectoryOverride, environment: context.environment,
                                                           system: .current(context))
        let jobs = try command.jobs(workingDirectory: context.currentDirectory, stateRoot: stateRoot)
        try DownloadStateDirectory.create(stateRoot)
        // Missing folders are made (as `-d` implies); otherwise the agent would fail later with a
        // file-system error. Walked from / without following links someone else could plant.
        for folder in Set(jobs.map { $0.destination.deletingLastPathComponent() }) {
            do {
                _ = try CheckedDirectory.open(folder.path, policy: .shared, creating: true,
                                              mode: command.writesToStandardOutput ? 0o700 : 0o777)
            } catch {
                throw CommandFailure(message: "cannot create \(folder.path): \(TextFormat.reason(error))", exitCode: .cannotCreate)
            }
        }
        if !command.verifiesCertificates {
            context.errorOutput.line("warning: --insecure: the server's certificate is not checked, so anyone on the network path can read and change what is downloaded\(command.expectedSHA256 == nil ? " (--sha256 would catch a changed file)" : "")")
        }
        return DownloadPlan(jobs: jobs, stateRoot: stateRoot, tuning: tuning)
    }
}

/// How a run ends, decided from its sessions' final states (pure: tested without downloads).
struct DownloadSettlement: Sendable, Equatable {
    /// A session as it ended.
    struct End: Sendable, Equatable {
        var job: DownloadCommand.Job
        var state: DownloadState
        var storedBytes: Int64
    }

    /// Sessions whose partial data and record are deleted (their failure keeps nothing).
    var cancelled: [DownloadCommand.Job] = []
    /// Every failure, the ones from opening first, in command-line order.
    var failures: [DownloadCommand.JobFailure]
    /// Interrupted with downloads still running: they stay paused.
    var isUnfinished: Bool
    /// Every job's file is complete and verified.
    var isComplete: Bool

    static func decide(_ ends: [End], openingFailures: [DownloadCommand.JobFailure], interruption: Int32,
                       alreadyComplete: Int, jobs: [DownloadCommand.Job]) -> DownloadSettlement {
        var settlement = DownloadSettlement(failures: openingFailures, isUnfinished: false, isComplete: false)
        for end in ends {
            switch end.state {
            case .completed:
                continue
            case .failed(let error):
                let verdict = DownloadFailureVerdict(error, storedBytes: end.storedBytes)
                if !verdict.keepsResumeData { settlement.cancelled.append(end.job) }
                settlement.failures.append(.init(job: end.job, message: "\(error.description)\(verdict.suffix)", exitCode: verdict.exitCode))
            default:
                if interruption == 0 {
                    settlement.failures.append(.init(job: end.job, message: "did not finish (\(end.state))", exitCode: .failure))
                }
            }
        }
        // Interrupted before every job was done (running, or not even opened yet).
        settlement.isUnfinished = interruption != 0 && (ends.contains { $0.state != .completed }
                                                        || ends.count + alreadyComplete < jobs.count)
        settlement.isComplete = settlement.failures.isEmpty && !settlement.isUnfinished && ends.count + alreadyComplete == jobs.count
        settlement.failures = inCommandLineOrder(settlement.failures, jobs: jobs)
        return settlement
    }

    /// `failures` in command-line order, whatever order they ended in.
    static func inCommandLineOrder(_ failures: [DownloadCommand.JobFailure], jobs: [DownloadCommand.Job]) -> [DownloadCommand.JobFailure] {
        let order = Dictionary(jobs.enumerated().map { ($1.destination, $0) }, uniquingKeysWith: { first, _ in first })
        return failures.sorted { order[$0.job.destination, default: 0] < order[$1.job.destination, default: 0] }
    }
}

/// One `download` run carrying out its plan: a path source, one session per job (at most
/// `maximumConcurrentDownloads` at once), signals that pause, and the settlement at the end.
final class DownloadRun: Sendable {
    let command: DownloadCommand
    let plan: DownloadPlan
    let context: CommandContext
    private let registry = SessionRegistry()
    private let control = RunControl()

    init(command: DownloadCommand, plan: DownloadPlan, context: CommandContext) {
        self.command = command
        self.plan = plan
        self.context = context
    }

    func execute() async throws -> ExitCode {
        let source = try command.monitor.startPathSource(in: context)
        defer { source.cancel() }
        let reporter = DownloadReporter(context: context, isJSON: command.isJSON, drawsProgress: context.isTerminal(2),
                                        usesColor: context.environment["NO_COLOR"].map(\.isEmpty) ?? true,
                                        isQuiet: command.isQuiet, writesToStandardOutput: command.writesToStandardOutput,
                                        currentPath: { source.currentPath })
        if let notice = Self.missingInterfaceNotice(command.interfaces, on: source.currentPath) { context.errorOutput.line(notice) }
        let removeHandler = await installSignalHandlers()
        control.start { [self] in await runJobs(source: source, reporter: reporter) }
        let outcome = await control.result()
        removeHandler()
        reporter.finishProgress()
        guard let openingFailures = outcome else {
            context.errorOutput.line("interrupted again: quitting without waiting for the checkpoint; run the same command again to resume")
            return ExitCode(rawValue: 128 + control.interruption)
        }
        return await settle(openingFailures: openingFailures)
    }

    /// What to say when an `--interface` names no interface the kernel has now: the download
    /// waits for it (a modem or a USB adapter may come later), so the user learns why at once.
    static func missingInterfaceNotice(_ names: [String], on path: NetworkPath) -> String? {
        let known = path.interfaces.map(\.name)
        guard !known.isEmpty else { return nil }   // the monitor has not listed them yet
        let missing = names.filter { !known.contains($0) }
        guard !missing.isEmpty else { return nil }
        let listed = missing.map { "'\(TerminalText.escaped($0))'" }.joined(separator: ", ")
        return "reachability: no interface named \(listed) now (there are: \(known.sorted().joined(separator: ", "))); "
            + "the download waits for \(missing.count == 1 ? "it" : "them") to appear (--max-outage bounds the wait, Ctrl-C stops)"
    }

    /// Installed before any transfer starts, so no signal finds the default action: the first
    /// pauses every session, a second stops waiting for the checkpoint (the last one is still a
    /// valid resume point: the partial file is cut back to it on the next run).
    private func installSignalHandlers() async -> @Sendable () -> Void {
        let (control, registry) = (control, registry)
        return await context.onSignals([SIGINT, SIGTERM]) { number in
            guard control.firstInterruption(number) else {
                control.finish(nil)
                return
            }
            let running = registry.interrupt()
            Task {
                for session in running { await session.agent.shutdown() }
                control.cancelWork()
            }
        }
    }

    /// Each agent serves one URL, so the concurrency limit lives here: at most the limit of
    /// jobs open at once; the next one starts when one ends (completes, fails, is interrupted).
    private func runJobs(source: any PathSource, reporter: DownloadReporter) async -> [DownloadCommand.JobFailure] {
        let progress = Task { [registry] in await reporter.drawProgress { registry.downloads } }
        let limit = DownloadCommand.maximumConcurrentDownloads
        let failures = await withTaskGroup(of: DownloadCommand.JobFailure?.self) { group in
            var failures: [DownloadCommand.JobFailure] = []
            var running = 0
            for job in plan.jobs {
                if running == limit, let finished = await group.next() {
                    running -= 1
                    if let finished { failures.append(finished) }
                }
                if Task.isCancelled || registry.isInterrupted { break }
                group.addTask { [self] in await runJob(job, source: source, reporter: reporter) }
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

    /// One job's life: open (restore or create), follow its events until it ends or the
    /// command is interrupted. Failures to open are reported with the others at the end.
    private func runJob(_ job: DownloadCommand.Job, source: any PathSource, reporter: DownloadReporter) async -> DownloadCommand.JobFailure? {
        guard !registry.isInterrupted else { return nil }
        let session: DownloadSession
        do {
            // A stream per agent: an AsyncStream hands each element to one consumer only.
            session = try await DownloadSession.open(job, stateRoot: plan.stateRoot, paths: source.paths,
                                                     hostPaths: { source.paths(to: $0) },
                                                     configuration: agentConfiguration, options: downloadOptions(mirrors: job.mirrors))
        } catch let failure as CommandFailure {
            return .init(job: job, message: failure.message, exitCode: failure.exitCode)
        } catch let complete as AlreadyComplete {
            registry.markAlreadyComplete(job)
            reporter.reportAlreadyComplete(job, reason: complete.reason)
            return nil
        } catch {
            // Interrupted while opening (hashing an existing file): not a failure of its own.
            if registry.isInterrupted || error is CancellationError { return nil }
            return .init(job: job, message: "\(error)", exitCode: .failure)
        }
        if let previous = session.previousURL { reporter.reportNewURL(job, previous: previous) }
        if !registry.add(session) {
            await session.agent.shutdown()   // the interrupt came while it was opening
            return nil
        }
        guard !job.mirrors.isEmpty || command.metalinkPieces != nil else {
            await reporter.follow(session.download)
            return nil
        }
        return await followMirrors(session, reporter: reporter)
    }

    /// A job with mirrors: its events are reported until one says the source in use failed
    /// (`MirrorFailover`), then the job moves to the next source and is followed there.
    private func followMirrors(_ session: DownloadSession, reporter: DownloadReporter) async -> DownloadCommand.JobFailure? {
        var failover = MirrorFailover(primary: session.download.url, mirrors: session.job.mirrors)
        // Ranges are fetched from every source at once while they are proven the same file
        // (the engine drops one whose bytes prove wrong); after a file failed its whole-file
        // SHA-256, which cannot say which source sent the bad bytes, one source at a time.
        var spreads = true
        while true {
            let download = session.download
            var change: (url: URL, reason: String)?
            for await event in download.events {
                if case .completed = event, let check = command.metalinkPieces,
                   let problem = check.verdict(forCompleted: session.job) {
                    // The file is complete but a piece differs: it is deleted before anyone
                    // sees it, and the next source sends it again.
                    guard let next = failover.leave() else {
                        reporter.report(.failed(.checksumMismatch), of: download)   // --json readers see the end too
                        return .init(job: session.job, message: "\(problem) (from \(URLRedaction.redacted(download.url))); the file was deleted",
                                     exitCode: .failure)
                    }
                    change = (next, "\(problem); the file was deleted")
                    spreads = false
                    break
                }
                if case .change(let url, let reason) = failover.handle(event) {
                    change = (url, reason)
                    if case .failed(let error) = event, error == .checksumMismatch { spreads = false }
                    break
                }
                reporter.report(event, of: download)
            }
            guard let change, !registry.isInterrupted else { return nil }
            do {
                try await session.changeSource(to: change.url, options: downloadOptions(mirrors: spreads ? failover.untried : []))
            } catch {
                if registry.isInterrupted { return nil }   // the interrupt stopped the agent meanwhile
                return .init(job: session.job, message: "cannot continue from \(URLRedaction.redacted(change.url)): \(error)",
                             exitCode: .failure)
            }
            reporter.reportSourceChange(session.download, from: download.url, reason: change.reason)
        }
    }

    /// The options of a job fetched from its URL and `mirrors` (issue 34: spread over them).
    private func downloadOptions(mirrors: [URL]) -> DownloadOptions {
        var options = DownloadOptions(expectedSHA256: command.expectedSHA256, expectedLength: command.expectedLength,
                                      allowsExpensive: command.allowsExpensive,
                                      allowsRoaming: command.allowsRoaming,
                                      maximumConnections: command.maximumConnections, interfaces: command.interfaces,
                                      usesExpensivePathsOnlyAsFallback: command.usesExpensivePathsOnlyAsFallback)
        options.mirrors = mirrors
        options.pieceHashes = command.pieceHashes
        options.opensAllConnections = command.maximumConnections != nil
        return options
    }

    /// The engine's configuration for a job's state directory: the command's options, then the knobs.
    @Sendable private func agentConfiguration(stateDirectory: URL) -> DownloadAgent.Configuration {
        let errorOutput = context.errorOutput
        let logger = command.monitor.isVerbose
            ? Logger(label: "reachability.download", minimumLevel: .debug, sink: { errorOutput.line(TerminalText.escaped($0)) })
            : .silent
        var configuration = DownloadAgent.Configuration(stateDirectory: stateDirectory, maximumOutageWait: command.maximumOutageWait,
                                                        logger: logger)
        configuration.additionalHeaders = command.headers
        command.transport.apply(to: &configuration, workingDirectory: context.currentDirectory)
        configuration.verifiesCertificates = command.verifiesCertificates
        if let maximumConnections = command.maximumConnections { configuration.maximumConnectionsPerHost = maximumConnections }
        if command.waitsForSpace { configuration.spacePolicy = SpacePolicy() }
        plan.tuning.apply(to: &configuration)
        return configuration
    }

    /// Carries out the settlement: what a failure keeps is decided before the agents stop
    /// (cancel deletes partial data and record); `-o -` writes the verified file out; every
    /// session is closed; then the failures are reported, in command-line order.
    private func settle(openingFailures: [DownloadCommand.JobFailure]) async -> ExitCode {
        let sessions = registry.sessions
        var settlement = DownloadSettlement.decide(
            sessions.map { .init(job: $0.job, state: $0.download.state, storedBytes: $0.download.progress.bytesReceived) },
            openingFailures: openingFailures, interruption: control.interruption,
            alreadyComplete: registry.alreadyComplete.count, jobs: plan.jobs)
        for session in sessions where settlement.cancelled.contains(session.job) {
            await session.agent.cancel(session.download)
        }
        if settlement.isComplete, command.writesToStandardOutput {
            settlement.failures = DownloadSettlement.inCommandLineOrder(settlement.failures + writeToStandardOutput(), jobs: plan.jobs)
        }
        // Completed files stay "done" for the next run of the same command without asking only
        // while the batch is unfinished; once it is finished, a rerun asks the server.
        for session in sessions {
            await session.agent.shutdown()
            await session.close(batchIsFinished: settlement.isComplete)
        }
        if settlement.isComplete {
            for job in registry.alreadyComplete {
                let directory = DownloadStateDirectory.jobDirectory(for: job, in: plan.stateRoot)
                CompletionMarker.finalize(in: directory)
                DownloadSession.removeIfEmpty(directory)
            }
        }
        if settlement.isUnfinished {
            context.errorOutput.line("paused; run the same command again to resume")
            return ExitCode(rawValue: 128 + control.interruption)
        }
        for failure in settlement.failures {
            context.errorOutput.line(TerminalText.escaped("Error: \(URLRedaction.redacted(failure.job.url)): \(failure.message)"))
        }
        return DownloadFailureVerdict.combinedExitCode(settlement.failures.map(\.exitCode))
    }

    /// `-o -`: each verified file goes to stdout, then away; one that cannot be written is kept.
    private func writeToStandardOutput() -> [DownloadCommand.JobFailure] {
        var failures: [DownloadCommand.JobFailure] = []
        for job in plan.jobs {
            do {
                try DownloadCommand.copyToStandardOutput(job.destination, context: context)
                try? FileSystem.remove(job.destination.path)
                FileSystem.removeDirectory(job.destination.deletingLastPathComponent().path)
            } catch {
                failures.append(.init(job: job, message: "cannot write to stdout: \(TextFormat.reason(error)); the file is kept for the next run",
                                      exitCode: .ioError))
            }
        }
        return failures
    }
}
