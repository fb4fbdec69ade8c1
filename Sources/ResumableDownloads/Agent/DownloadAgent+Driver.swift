import FoundationEssentials
import LinuxReachability
import ReachabilityBase

/// What a driver's mailbox carries: inputs for its machine, from the engine thread, timers, the
/// path consumer, the probe scheduler and the public API.
//
// Longer than 400 lines on purpose: the executor of DownloadStateMachine's actions, kept beside
// the driver's mailbox it serves; the decisions are the machine's (DownloadStateMachine.swift).
enum DriverInput: Sendable {
    /// An input for the machine as it is.
    case machine(DownloadStateMachine.Input)
    /// The attempt got its first response line (the connect time sizes probe timeouts).
    case responseStarted(attempt: Int, connectTime: Duration?, waited: Duration?)
    /// An attempt ended: checkpoint first, then tell the machine.
    case attemptEnded(attempt: Int, TransferOutcome)
}

/// A driver's own resources while it runs (actor-isolated, never shared).
final class DriverResources {
    let id: UUID
    let download: Download
    let file: PartialFile
    /// `scheme://host:port`: probes are per host.
    let host: String
    let mailbox: AsyncStream<DriverInput>.Continuation
    var timers: [DownloadStateMachine.Timer.Kind: Task<Void, Never>] = [:]
    /// The server answered ranges inconsistently in this run: one connection from now on.
    var segmentsDisabled = false
    /// The last attempt failed: the next one adds connections only after a while.
    var lastAttemptFailed = false
    /// The file's sources when the download has mirrors (`DownloadOptions.mirrors`).
    let sources: SourceLedger?

    init(id: UUID, download: Download, file: PartialFile, host: String, mailbox: AsyncStream<DriverInput>.Continuation) {
        self.id = id
        self.download = download
        self.file = file
        self.host = host
        self.mailbox = mailbox
        let options = download.options
        let mirrors = options.mirrors.filter { $0 != file.record.url }
        sources = mirrors.isEmpty ? nil : SourceLedger(urls: [file.record.url] + mirrors, pieces: options.pieceHashes)
    }

    /// The URL a single-connection attempt uses: the download's own, or the first mirror left
    /// when it was dropped.
    var currentURL: URL {
        guard let sources, let first = sources.liveSources.first else { return file.record.url }
        return sources.urls[first]
    }

    var facts: DownloadStateMachine.FileFacts {
        .init(storedBytes: file.writtenBytes, hasExpectedDigest: file.record.expectedSHA256 != nil)
    }
}

extension DownloadAgent {
    var machinePolicy: DownloadStateMachine.Policy {
        DownloadStateMachine.Policy(
            backoff: Backoff(initial: configuration.initialBackoff, maximum: configuration.maximumBackoff,
                             maximumRetryAfter: configuration.maximumRetryAfter),
            maximumConsecutiveFailures: configuration.maximumConsecutiveFailures, maximumRestarts: 3,
            maximumOutageWait: configuration.maximumOutageWait, restartStagger: configuration.restartStagger,
            attemptRate: TokenBucket(burst: 4, interval: .milliseconds(500)))
    }

    /// The key probes are shared by: scheme, host and port.
    static func hostKey(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? "http"
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// Finished files that may wait for their completion group with their slot given away.
    static let maximumFilesAwaitingCompletion = 32

    /// Unsynced bytes after which even an attempt that ended early is checkpointed.
    static let lightCheckpointLimit: Int64 = 1 << 20

    /// Gives `id` its driver and mailbox.
    func startDriver(_ id: UUID) {
        let (inputs, mailbox) = AsyncStream.makeStream(of: DriverInput.self)
        entries[id]?.mailbox = mailbox
        followHost(of: id)
        entries[id]?.driver = Task { await self.drive(id, inputs: inputs, mailbox: mailbox) }
    }

    // MARK: the executor

    /// Runs a download until it completes, fails, or is paused, cancelled or shut down: feeds its
    /// `DownloadStateMachine` every input, one at a time, and carries out the actions it answers.
    func drive(_ id: UUID, inputs: AsyncStream<DriverInput>, mailbox: AsyncStream<DriverInput>.Continuation) async {
        guard let entry = entries[id], let file = openPartialFile(id, entry) else { return }
        let download = entry.download
        entries[id]?.file = file
        download.report(bytesReceived: file.writtenBytes, totalBytes: file.record.totalLength, resetRate: true)
        let driver = DriverResources(id: id, download: download, file: file, host: Self.hostKey(entry.record.url),
                                     mailbox: mailbox)
        var machine = DownloadStateMachine(policy: machinePolicy.limitingTime(of: download.options, now: .now, wallClock: Date()))
        let start = pathWaiters.facts(access: PathAccess(download.options),
                                      host: entries[id]?.followsHost == true ? entry.host : nil)
        var actions = machine.handle(.start(driver.facts, start), now: .now, random: .random(in: 0...1))
        var iterator = inputs.makeAsyncIterator()
        while true {
            for action in actions where await perform(action, driver) { return }
            guard let input = await iterator.next() else { return }
            let now = ContinuousClock.now
            switch input {
            case .machine(let input):
                actions = machine.handle(input, now: now, random: .random(in: 0...1))
            case .responseStarted(let attempt, let connectTime, let waited):
                if let connectTime { probes.recordConnectTime(connectTime, host: driver.host) }
                if let waited { probes.recordAnswerTime(waited, host: driver.host) }
                actions = machine.handle(.responseStarted(attempt: attempt), now: now)
            case .attemptEnded(let attempt, let outcome):
                let result = await attemptEnded(attempt, outcome, driver)
                actions = machine.handle(.attemptEnded(attempt: attempt, result, file: driver.facts,
                                                       received: outcome.bytesReceived),
                                         now: .now, random: .random(in: 0...1))
            }
        }
    }

    /// Opens the download's partial file; nil when the driver ended instead (the file was
    /// finished before a crash, or cannot be opened).
    private func openPartialFile(_ id: UUID, _ entry: Entry) -> PartialFile? {
        do {
            let state = try stateDirectory()
            if PartialFile.finishedBefore(entry.record, stateDirectory: state) {
                // Killed between renaming the verified file into place and removing its record.
                finishRestored(id, entry.record)
                return nil
            }
            let highWater = max(256 << 10, configuration.writeBufferLimit)
            var limits = PartialFile.Limits(highWater: highWater, lowWater: highWater / 4,
                                            checkpointInterval: max(1 << 20, configuration.checkpointInterval))
            limits.afterRename = configuration.afterRenameHook
            limits.checkpointSpacing = configuration.checkpointSpacing
            return try PartialFile(record: entry.record, stateDirectory: state, limits: limits)
        } catch {
            endDriver(id, failure: error as? DownloadError ?? .fileSystem.with(description: "\(error)"))
            return nil
        }
    }

    /// What an ended attempt leaves: segments off after inconsistent ranges, a mirror's wrong
    /// bytes forgotten, the checkpoint; returns the result the machine is told.
    private func attemptEnded(_ attempt: Int, _ outcome: TransferOutcome, _ driver: DriverResources) async -> AttemptResult {
        if outcome.disablesSegments, !driver.segmentsDisabled {
            driver.segmentsDisabled = true
            configuration.logger.info("segments off: the server answers ranges inconsistently",
                                      metadata: ["id": driver.id.uuidString])
        }
        driver.download.report(connections: DownloadConnections())
        driver.lastAttemptFailed = switch outcome.result {
        case .completed, .aborted: false
        default: true
        }
        if let forgotten = driver.sources?.takeForgets(), !forgotten.isEmpty {
            // A mirror's bytes proved wrong: they are fetched again (after the queued writes).
            await driver.file.settled()
            do { try await driver.file.forget(forgotten) } catch {}
        }
        return await checkpoint(after: outcome, attempt: attempt, driver)
    }

    /// Checkpoints after an attempt; a failed checkpoint turns the result into a write failure
    /// (unless we stopped the attempt on purpose).
    private func checkpoint(after outcome: TransferOutcome, attempt: Int, _ driver: DriverResources) async -> AttemptResult {
        if entries[driver.id]?.transfer?.attempt == attempt { entries[driver.id]?.transfer = nil }
        var result = outcome.result
        // A connection that ended early is usually followed at once by the next attempt: with a
        // server that cuts every connection after a few KiB, an fsync per attempt was most of
        // the time (a second per MiB). Below 1 MiB unsynced, the queued writes are only awaited;
        // the block journal covers a crash meanwhile, and the next checkpoint (periodic, pause,
        // shutdown, failure, completion) makes them durable.
        // A transfer that ended with the whole body is usually completed next: its completion
        // group fsyncs the data (`CompletionGroupCommit`), so a checkpoint here was a second
        // fdatasync and record write per file (issue 29). Should the machine not complete it,
        // the next checkpoint covers the bytes, as for a light one.
        let isLight = switch result {
        case .transport, .incomplete, .completed: true
        default: false
        }
        let isWhole = if case .completed = result { true } else { false }
        do {
            if isLight {
                await driver.file.settled()
                if let error = driver.file.writeError { throw error }
            }
            if !isLight || (!isWhole && driver.file.unsyncedBytes >= Self.lightCheckpointLimit) {
                try await driver.file.checkpoint()
            }
        } catch {
            switch result {
            case .aborted(.paused), .aborted(.cancelled), .aborted(.shutdown), .aborted(.writeFailed): break
            default: result = .aborted(.writeFailed(error as? DownloadError ?? .fileSystem))
            }
        }
        driver.download.report(bytesReceived: driver.file.writtenBytes, totalBytes: driver.file.record.totalLength)
        configuration.logger.debug("attempt ended", metadata: ["id": driver.id.uuidString, "result": "\(result)",
                                                               "bytes": "\(outcome.bytesReceived)"])
        return result
    }

    /// Carries out one action; true when the driver has ended.
    // Over 60 lines: one case per `DownloadStateMachine.Action`, each the action's whole effect (a table).
    private func perform(_ action: DownloadStateMachine.Action, _ driver: DriverResources) async -> Bool {
        let id = driver.id
        switch action {
        case .startAttempt(let plan):
            startAttempt(plan, driver)
        case .abortAttempt(let reason):
            if let transfer = entries[id]?.transfer {
                configuration.logger.debug("aborting attempt", metadata: ["id": id.uuidString, "reason": "\(reason)"])
                engine.abort(transfer.id, reason: reason)
            }
        case .requestRace(let attempt):
            let mailbox = driver.mailbox
            probes.requestRace(id, attempt: attempt, host: driver.host) { mailbox.yield(.machine($0)) }
        case .finishRace(let attempt, let reachable):
            probes.finishRace(id, attempt: attempt, reachable: reachable)
        case .race:
            if let transfer = entries[id]?.transfer {
                let timeout = probes.connectTimeout(for: driver.host)
                configuration.logger.debug("stall suspected: racing a fresh connection",
                                           metadata: ["id": id.uuidString, "connectTimeout": "\(timeout)"])
                engine.race(transfer.id, connectTimeout: min(timeout, configuration.connectTimeout))
            }
        case .armTimer(let timer, let deadline):
            driver.timers[timer.kind]?.cancel()
            let mailbox = driver.mailbox
            driver.timers[timer.kind] = Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                guard !Task.isCancelled else { return }
                mailbox.yield(.machine(.timerFired(timer)))
            }
        case .cancelTimer(let kind):
            driver.timers.removeValue(forKey: kind)?.cancel()
        case .joinServerWait(let justProbed):
            configuration.logger.info("waiting for server", metadata: ["id": id.uuidString, "host": driver.host])
            let mailbox = driver.mailbox
            probes.join(id, host: driver.host, justProbed: justProbed) { mailbox.yield(.machine($0)) }
        case .leaveServerWait:
            probes.leave(id)
        case .reportServer(let reachable):
            probes.report(id, host: driver.host, reachable: reachable)
        case .restartFromZero(let reason):
            do {
                try await driver.file.restartFromZero()
            } catch {
                await failDriver(id, driver, error)
                return true
            }
            configuration.logger.info("restarting from zero", metadata: ["id": id.uuidString, "reason": reason])
            driver.download.emit(.restartedFromZero(reason: reason))
            driver.download.report(bytesReceived: 0, totalBytes: nil, resetRate: true)
        case .update(let state, let event):
            driver.download.update(state: state, event: event)
        case .emit(let event):
            driver.download.emit(event)
            if case .restartedFromZero = event {
                driver.download.report(bytesReceived: 0, totalBytes: nil, resetRate: true)
            }
        case .complete(let total):
            do {
                try await driver.file.verifyCompletion(totalLength: total, expectedLength: driver.download.options.expectedLength)
                // Every byte is here and verified: said before the slot goes, so that a reader
                // seeing `running` with all bytes knows the download is only finishing.
                driver.download.report(bytesReceived: total, totalBytes: total)
                // The transfer is over and its bytes verified: its slot goes to the next download
                // while this one waits for its completion group (the fsyncs and the rename), as
                // long as few wait: each holds its descriptors, and a slow disk must not let
                // thousands pile up (EMFILE at 10,000 jobs without this bound).
                if CompletionGroupCommit.shared.inFlight < Self.maximumFilesAwaitingCompletion {
                    scheduler.release(id)
                    schedule()
                }
                let url = try await driver.file.commitCompletion()
                entries[id]?.record = driver.file.record   // its validators, for `completedEntity(of:)`
                configuration.logger.info("download completed", metadata: ["id": id.uuidString, "bytes": "\(total)"])
                finishDriver(driver)
                driver.download.update(state: .completed, event: .completed(url))
                schedule()
            } catch {
                await failDriver(id, driver, error)
            }
            return true
        case .exit(let exit):
            await end(driver, exit)
            return true
        }
        return false
    }

    private func startAttempt(_ plan: DownloadStateMachine.AttemptPlan, _ driver: DriverResources) {
        let id = driver.id
        let file = driver.file
        let host = entries[id]?.followsHost == true ? entries[id]?.host : nil
        let pinnedInterface = pinnedInterface(for: driver, host: host)
        file.updateRecord { $0.attempts += 1; $0.updatedAt = Date() }
        let request = attemptRequest(plan, driver, pinnedInterface: pinnedInterface, host: host)
        let multipath = request.segmentation.flatMap {
            $0.paths.contains { $0.interface != nil && $0.interface != pinnedInterface } ? $0.paths : nil
        }
        configuration.logger.debug("attempt", metadata: ["id": id.uuidString, "offset": "\(request.offset)",
                                                         "interface": pinnedInterface ?? "-",
                                                         "probe": "\(plan.isProbe)", "seamProbe": "\(request.isSeamProbe)",
                                                         "overlap": "\(request.overlap)",
                                                         "validators": "\(plan.usesValidators)",
                                                         "connectTimeout": "\(request.settings.connectTimeout)"])
        let transferID = engine.makeTransferID()
        let attempt = plan.id
        let mailbox = driver.mailbox
        let download = driver.download
        // Registered and queued in one actor turn: a path update handled after this sees the
        // transfer, and its abort is queued behind the start.
        entries[id]?.transfer = ActiveTransfer(id: transferID, attempt: attempt,
                                               pathKey: PathKey(pathWaiters.gatingPath(host: host)),
                                               pinnedInterface: pinnedInterface, multipath: multipath)
        let started = engine.start(transferID, request, into: file, progress: { [weak download] offset in
            download?.report(bytesReceived: offset, totalBytes: file.record.totalLength)
            mailbox.yield(.machine(.bytesArrived(attempt: attempt)))
        }, events: Self.attemptEvents(attempt, mailbox: mailbox, download: download), completion: { outcome in
            mailbox.yield(.attemptEnded(attempt: attempt, outcome))
        })
        if !started {
            mailbox.yield(.attemptEnded(attempt: attempt, TransferOutcome(result: .aborted(.shutdown), bytesReceived: 0)))
        }
    }

    /// The interface an attempt is bound to: the one the path waiters pinned, else the first
    /// usable one of `--interface` (all of them when several connections are allowed, see
    /// `segmentation`); nil lets the routing table choose.
    private func pinnedInterface(for driver: DriverResources, host: String?) -> String? {
        let options = driver.download.options
        let usability = pathWaiters.usability(access: PathAccess(options), host: host)
        if case .usable(let pinned) = usability, let pinned { return pinned }
        guard !options.interfaces.isEmpty else { return nil }
        return MultipathPolicy.paths(for: pathWaiters.gatingPath(host: host), pinnedInterface: nil,
                                     access: PathAccess(options), interfaces: options.interfaces)
            .first?.interface ?? options.interfaces.first
    }

    /// The request of an attempt from the file's written end: its settings, the resume overlap
    /// and validators, a seam probe when responses keep being cut there, and its segmentation.
    private func attemptRequest(_ plan: DownloadStateMachine.AttemptPlan, _ driver: DriverResources,
                                pinnedInterface: String?, host: String?) -> TransferRequest {
        let record = driver.file.record
        let offset = driver.file.writtenEnd
        let options = driver.download.options
        var settings = self.settings
        settings.additionalHeaders += options.requestHeaders
        settings.proxy = options.proxy
        if let timeout = options.requestTimeout {
            settings.connectTimeout = min(settings.connectTimeout, timeout)
            settings.stallTimeout = min(settings.stallTimeout, timeout)
        }
        if let timeout = plan.connectTimeout ?? (plan.isRecovery ? probes.connectTimeout(for: driver.host) : nil) {
            settings.connectTimeout = min(settings.connectTimeout, timeout)
        }
        settings.answerSuspicion = min(settings.stallTimeout, probes.answerSuspicion(for: driver.host, minimum: settings.stallSuspicion))
        // Every resume re-fetches the bytes just before the offset and compares them with the
        // disk before appending (issue 7): a server that ignores If-Range or gives no validator
        // cannot splice two versions. Validators are left out once the machine found them
        // varying per response with a digest to prove the result.
        let validators = plan.usesValidators
        var request = TransferRequest(url: driver.currentURL, offset: offset,
                                      ifRange: offset > 0 && validators ? record.validator : nil,
                                      entityTag: validators ? record.entityTag : nil, knownTotalLength: record.totalLength,
                                      lastModified: validators ? record.lastModified : nil,
                                      observedEntityTag: validators ? record.observedEntityTag : nil,
                                      overlap: min(offset, plan.overlap),
                                      interfaceName: pinnedInterface, freshConnection: plan.freshConnection,
                                      settings: settings)
        let probesSeam = plan.probesSeam && offset > 0
        if probesSeam {
            // Responses keep being cut at the offset: ask for the one byte there, without the
            // overlap or If-Range, only to compare its validators (nothing of it is written, so
            // ranges stored past it, from a segmented run, need no planner for this request).
            request.overlap = 0
            request.ifRange = nil
            request.rangeEnd = offset + 1
            request.isSeamProbe = true
        }
        request.segmentation = probesSeam ? nil : segmentation(for: driver, pinnedInterface: pinnedInterface, host: host, plan: plan)
        request.agentRate = configuration.agentRateLimit.map {
            AgentRateShare(limit: $0, job: driver.id, priority: options.priority)
        }
        return request
    }

    /// What the engine tells about an attempt, as inputs in the driver's mailbox (and the
    /// download's own reports).
    private static func attemptEvents(_ attempt: Int, mailbox: AsyncStream<DriverInput>.Continuation,
                                      download: Download) -> @Sendable (TransferEvent) -> Void {
        { event in
            switch event {
            case .responseStarted(let connectTime, let waited):
                mailbox.yield(.responseStarted(attempt: attempt, connectTime: connectTime, waited: waited))
            case .restartedFromZero(let reason):
                mailbox.yield(.machine(.restartedFromZero(attempt: attempt, reason: reason)))
            case .stallSuspected:
                mailbox.yield(.machine(.stallSuspected(attempt: attempt)))
            case .entityTagChanged:
                mailbox.yield(.machine(.entityTagChanged(attempt: attempt)))
            case .raceEnded(let outcome):
                mailbox.yield(.machine(.raceEnded(attempt: attempt, outcome)))
            case .sourceDropped(let url, let reason):
                download.emit(.sourceDropped(url, reason: reason))
            case .connectionsChanged(let connections):
                download.report(connections: DownloadConnections(count: connections.count, paths: connections.paths.map {
                    DownloadConnections.Path(interface: $0.interface, connections: $0.connections)
                }))
            }
        }
    }

    /// Whether and how this attempt may use several connections and paths: not with a receive
    /// limit (`--limit-rate` caps the download, not each connection), not after the server
    /// answered ranges inconsistently in this run; otherwise within the per-host bound and the
    /// download's own, over the paths `MultipathPolicy` finds. A download whose stored bytes are
    /// not one prefix (resume data of a segmented one) always goes through the planner, which
    /// fetches only the gaps.
    private func segmentation(for driver: DriverResources, pinnedInterface: String?, host: String?,
                              plan: DownloadStateMachine.AttemptPlan) -> Segmentation? {
        let options = driver.download.options
        let record = driver.file.record
        let stored = driver.file.written
        let isPrefix = stored.ranges.count <= 1 && (stored.ranges.first?.lowerBound ?? 0) == 0
        let bound = max(1, min(configuration.maximumConnectionsPerHost, options.maximumConnections ?? Int.max))
        // Without validators (they vary per response; a digest proves the file) a range could
        // not be checked against the others: one connection.
        let canSplit = !driver.segmentsDisabled && configuration.maximumBytesPerSecond == nil && bound > 1
            && plan.usesValidators
        // One connection allowed: the transfer is the plain one it always was (paths included:
        // a path change restarts it), unless resume data of a segmented run has gaps to fill.
        guard !isPrefix || canSplit else { return nil }
        let paths = canSplit
            ? MultipathPolicy.paths(for: pathWaiters.gatingPath(host: host), pinnedInterface: pinnedInterface,
                                    access: PathAccess(options), interfaces: options.interfaces)
            : [SegmentPlanner.Path(interface: pinnedInterface)]
        var planner = SegmentPlanner.Configuration(maximumConnections: canSplit ? bound : 1)
        planner.expensiveUse = options.usesExpensivePathsOnlyAsFallback ? .fallbackOnly : .whenUseful
        // A count the caller named (`--connections N`) opens at once; the default ramps.
        planner.opensAllAtOnce = options.opensAllConnections
        // A server that just failed an attempt has not shown it serves more connections.
        if driver.lastAttemptFailed { planner.growthDelay = .seconds(5) }
        let hasDigest = record.expectedSHA256 != nil
        if canSplit, let pieces = driver.sources?.pieces, pieces.length % planner.alignment == 0,
           pieces.length <= planner.minimumSegment {
            // Pieces split where ranges do: each piece has one writer, so a bad one names its source.
            planner.alignment = pieces.length
        }
        let known = record.totalLength != nil && (record.validator != nil || hasDigest) && !stored.isEmpty
        return Segmentation(configuration: planner, stored: stored, seams: record.seamSet,
                            allowsSegments: known ? true : nil, hasExpectedDigest: hasDigest,
                            usesValidators: plan.usesValidators, overlap: plan.overlap,
                            paths: paths.isEmpty ? [SegmentPlanner.Path(interface: pinnedInterface)] : paths,
                            sources: canSplit ? driver.sources : nil)
    }

    // MARK: endings

    private func end(_ driver: DriverResources, _ exit: DownloadStateMachine.Exit) async {
        let id = driver.id
        switch exit {
        case .cancelled:
            await driver.file.discard()
            finishDriver(driver)
            driver.download.update(state: .failed(.cancelled), event: .failed(.cancelled))
        case .paused, .requeued:
            _ = try? await driver.file.checkpoint()
            await driver.file.close()
            entries[id]?.record = driver.file.record
            finishDriver(driver)
            if exit == .requeued || entries[id]?.intent == .run, !isShutDown {
                // resume() arrived while the pause was being carried out.
                entries[id]?.intent = .run
                driver.download.update(state: .queued)
                scheduler.enqueue(id, priority: driver.download.options.priority)
            } else {
                driver.download.update(state: .paused, event: .paused)
            }
        case .failed(let error):
            await failDriver(id, driver, error)
            return
        }
        schedule()
    }

    /// A restored download whose file was already in place: completed without a transfer.
    private func finishRestored(_ id: UUID, _ record: ResumeRecord) {
        guard let entry = entries[id] else { return }
        releaseEntry(id)
        let size = record.finishedFile?.size ?? record.totalLength ?? 0
        entry.download.report(bytesReceived: size, totalBytes: size)
        configuration.logger.info("download completed before a restart", metadata: ["id": id.uuidString, "bytes": "\(size)"])
        entry.download.update(state: .completed, event: .completed(record.destination))
        schedule()
    }

    /// A download that ends without a running driver (restored complete, or failed) gives up
    /// its driver, mailbox, host watch and slot.
    private func releaseEntry(_ id: UUID) {
        entries[id]?.driver = nil
        entries[id]?.mailbox?.finish()
        entries[id]?.mailbox = nil
        stopFollowingHost(of: id)
        scheduler.release(id)
    }

    /// The driver's bookkeeping ends: timers, probe queue, mailbox, slot.
    private func finishDriver(_ driver: DriverResources) {
        for timer in driver.timers.values { timer.cancel() }
        driver.timers = [:]
        probes.leave(driver.id)
        probes.finishRace(driver.id, reachable: nil)
        driver.mailbox.finish()
        stopFollowingHost(of: driver.id)
        entries[driver.id]?.mailbox = nil
        entries[driver.id]?.transfer = nil
        entries[driver.id]?.driver = nil
        // Its descriptors (the destination's directory) go with it: a finished job's entry
        // stays, and 10,000 of them kept 10,000 directories open.
        entries[driver.id]?.file = nil
        scheduler.release(driver.id)
    }

    private func failDriver(_ id: UUID, _ driver: DriverResources, _ error: any Error) async {
        let failure = error as? DownloadError ?? .fileSystem.with(description: "\(error)")
        if failure == .diskFull, configuration.spacePolicy != nil, !isShutDown, entries[id]?.intent == .run {
            // Waits for space instead (DownloadAgent+Space.swift), its bytes kept as for a pause.
            _ = try? await driver.file.checkpoint()
            await driver.file.close()
            entries[id]?.record = driver.file.record
            finishDriver(driver)
            requeueForSpace(id, after: failure)
            return
        }
        if failure.isResumable {
            _ = try? await driver.file.checkpoint()
            await driver.file.close()
        } else if failure.isExpiredLink, let stored = try? await driver.file.checkpoint(), stored > 0 {
            // An expired link strands no bytes: they stay for the same download from a new URL.
            await driver.file.close()
        } else {
            // Nothing useful to resume (4xx, checksum mismatch, broken server): leave no debris.
            await driver.file.discard()
        }
        entries[id]?.record = driver.file.record
        finishDriver(driver)
        endDriver(id, failure: failure)
    }

    func endDriver(_ id: UUID, failure: DownloadError) {
        guard let entry = entries[id] else { return }
        releaseEntry(id)
        configuration.logger.warning("download failed", metadata: ["id": id.uuidString, "error": failure.description])
        entry.download.update(state: .failed(failure), event: .failed(failure))
        schedule()
    }
}
