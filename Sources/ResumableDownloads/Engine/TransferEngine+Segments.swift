import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// The engine's side of segment groups (`SegmentGroup`): starting members for the planner's
/// requests, mapping their endings, and finishing the group as one attempt. Engine thread only;
/// nothing here adds or removes an easy handle from inside a libcurl callback (inputs that can
/// open or close members are queued by the callbacks and settled after `perform()`).
//
// Longer than 400 lines on purpose: every step touches the engine thread's easy handles and the
// group's members together, which stay private to the engine; the decisions are SegmentPlanner's.
extension TransferEngine {
    /// How often a group's planner is ticked (growth rounds, stalls, seam checks waiting).
    static let groupTick: Duration = .milliseconds(50)
    /// A pause for backpressure this long means the disk is behind.
    static let diskBehind: Duration = .milliseconds(25)

    func startGroup(id: UInt64, request: TransferRequest, segmentation: Segmentation, file: PartialFile,
                    callbacks: TransferCallbacks) {
        let group = SegmentGroup(id: id, template: request, file: file, callbacks: callbacks,
                                 segmentation: segmentation, now: .now)
        groups[id] = group
        file.setDrainHandler { [weak self] in self?.submit(.unpause(id)) }
        let start = SegmentPlanner.Input.start(stored: segmentation.stored, seams: segmentation.seams,
                                               total: request.knownTotalLength, allowsSegments: segmentation.allowsSegments,
                                               paths: group.expanded(segmentation.paths))
        apply(group.planner.handle(start, now: .now), to: group)
    }

    /// Carries out the planner's actions.
    func apply(_ actions: [SegmentPlanner.Action], to group: SegmentGroup) {
        for action in actions {
            guard !group.isFinishing else { return }
            switch action {
            case .open(let planned):
                openMember(group, planned, seam: nil)
            case .verifySeam(let planned, let seam):
                if group.file.isWritten(planned.range) {
                    openMember(group, planned, seam: seam)
                } else {
                    group.pendingChecks.append((planned, seam))
                }
            case .setEnd(let id, let end):
                guard let member = group.members[id], let transfer = transfers[member.engineID] else { continue }
                transfer.segmentEnd = end
                let requested = transfer.request.rangeEnd ?? group.planner.total ?? Int64.max
                transfer.seamLimit = min(requested, end + group.segmentation.configuration.seamOverlap)
            case .close(let id):
                guard let member = group.members.removeValue(forKey: id) else { continue }
                group.memberOfTransfer[member.engineID] = nil
                if let transfer = transfers[member.engineID] {
                    group.bytesReceived += transfer.bytesReceived
                    recordWrites(group, member, transfer)
                }
                finish(member.engineID, forcedResult: .aborted(.recovery), failure: nil, detail: "")
            case .seamsChanged(let seams):
                group.file.setSeams(seams)
            case .complete:
                let total = group.planner.total ?? group.planner.storedBytes
                if group.segmentation.sources?.pieces != nil {
                    // Every piece is checked once its bytes reached the file (`checkPieces`).
                    group.completedLength = total
                    checkPieces(group)
                } else {
                    finishGroup(group, .completed(totalLength: total))
                }
            case .endAttempt(let id):
                finishGroup(group, group.results[id] ?? group.lastEnding ?? .transport(.networkConnectionLost))
            case .restart(let reason):
                finishGroup(group, .restartFromZero(reason: reason), disablesSegments: true)
            }
        }
        reportConnections(group)
    }

    private func openMember(_ group: SegmentGroup, _ planned: SegmentPlanner.Request, seam: Int64?) {
        let request = group.request(for: planned, seam: seam)
        let engineID = makeTransferID()
        let member = SegmentGroup.Member(id: planned.connection, engineID: engineID, path: planned.path,
                                         start: planned.range.lowerBound, seam: seam)
        group.members[planned.connection] = member
        group.memberOfTransfer[engineID] = planned.connection
        let groupID = group.id
        let callbacks = TransferCallbacks(progress: { _ in }, events: { [weak self] event in
            self?.memberEvent(groupID, engineID, event)
        }, completion: { _ in })
        let started = start(id: engineID, request: request, file: group.file, callbacks: callbacks,
                            group: group, member: planned.connection,
                            segmentEnd: seam == nil ? planned.range.upperBound : Int64.max)
        if started {
            transfers[engineID]?.journalRule = .forConnections(group.planner.connectionCount)
            // Set on its socket before it connects (`TransferContext.didOpenSocket`).
            transfers[engineID]?.receiveBuffer = group.planner.receiveBuffer(for: planned.connection, at: .now)
        } else {
            group.members[planned.connection] = nil
            group.memberOfTransfer[engineID] = nil
            group.results[planned.connection] = .failed(.invalidRequest.with(description: "libcurl refused the transfer"))
            apply(group.planner.handle(.ended(connection: planned.connection, .transport(delivered: false)), now: .now), to: group)
        }
    }

    /// An event of a member: the first answer and single-connection races go to the owner; a
    /// stall goes to the planner, and to the owner (for its race) when the planner has nothing
    /// better to do.
    func memberEvent(_ groupID: UInt64, _ engineID: UInt64, _ event: TransferEvent) {
        guard let group = groups[groupID], let memberID = group.memberOfTransfer[engineID] else { return }
        switch event {
        case .responseStarted(let connectTime, _):
            if let connectTime { _ = group.planner.handle(.roundTrip(connectTime), now: .now) }
            if !group.hasReportedResponse {
                group.hasReportedResponse = true
                group.callbacks.events(event)
            }
        case .stallSuspected:
            let actions = group.planner.handle(.stallSuspected(connection: memberID), now: .now)
            if actions.isEmpty {
                // Nothing else delivers: the owner races this connection (and waits for the
                // server if the race cannot connect), as for a transfer of one connection.
                group.suspect = memberID
                group.callbacks.events(event)
            } else {
                group.deferred.append(contentsOf: actions)
            }
        case .raceEnded, .restartedFromZero, .entityTagChanged, .sourceDropped:
            // A race of one connection, its in-place restart (`restartsInPlace`), or what the
            // download's machine learns about the server's ETags.
            group.callbacks.events(event)
        case .connectionsChanged:
            break
        }
    }

    /// A member's transfer ended (its handle is already gone; its bytes handed to the file).
    func memberEnded(_ transfer: Transfer, result: AttemptResult) {
        // What the callbacks learned first (a seam verified by this member's last bytes). Its
        // bytes go in the ledger before: its transfer is gone from `transfers`, and a seam it
        // found different must know who wrote the side before it (else no source is blamed and
        // the whole file restarts).
        if let group = transfer.group {
            if let memberID = group.memberOfTransfer[transfer.id], let member = group.members[memberID] {
                recordWrites(group, member, transfer)
            }
            settleInputs(group)
        }
        guard let group = transfer.group, !group.isFinishing,
              let memberID = group.memberOfTransfer.removeValue(forKey: transfer.id) else { return }
        group.bytesReceived += transfer.bytesReceived
        group.results[memberID] = result
        group.lastEnding = result
        guard let member = group.members.removeValue(forKey: memberID) else { return }   // closed by the planner
        recordWrites(group, member, transfer)
        var inputs: [SegmentPlanner.Input] = []
        if let seam = member.seam {
            switch result {
            case .restartFromZero where transfer.primary.machine.refusal == nil:
                inputs.append(.seamMismatch(at: seam))
            case .completed, .incomplete:
                // Every byte of the check was compared with the disk (a mismatch ends it with a
                // restart instead) when the response reached the check's end.
                let reached: Int64 = switch result {
                case .incomplete(let offset): offset
                case .completed(let total): total
                default: 0
                }
                if reached >= transfer.request.offset {
                    inputs.append(.seamVerified(at: seam))
                    inputs.append(.ended(connection: memberID, .finished))
                } else {
                    inputs.append(.ended(connection: memberID, .transport(delivered: false)))
                }
            default:
                inputs.append(.ended(connection: memberID, ending(of: transfer, result: result, in: group)))
            }
        } else if case .restartFromZero(let reason) = result, case .entityChanged? = transfer.primary.machine.refusal {
            // A mirror whose own validator changed is dropped and its bytes (maybe the old
            // version's) fetched again in a new attempt, as for a seam it lost; the first
            // source's changing is a new version of the file.
            if refusesMirror(group, member: member, ending: .fatal, result: result, forgettingWrites: true) {
                finishGroup(group, .aborted(.pathChanged))
                return
            }
            finishGroup(group, .restartFromZero(reason: reason), disablesSegments: true)
            return
        } else if case .restartFromZero = result, transfer.primary.machine.refusal == nil, transfer.request.overlap > 0,
                  transfer.primary.machine.acceptance?.verifyUntil != nil {
            // The bytes before this range's start differ from the server's: two versions.
            inputs.append(.seamMismatch(at: transfer.request.offset))
        } else {
            inputs.append(.ended(connection: memberID, ending(of: transfer, result: result, in: group)))
        }
        feedEnding(inputs, of: member, result: result, to: group)
    }

    /// Hands the planner what a member's ending taught, in order, stopping once the group
    /// finishes: a seam the member found different is first weighed against the sources, and a
    /// mirror the ending refuses is closed instead of retried.
    func feedEnding(_ inputs: [SegmentPlanner.Input], of member: SegmentGroup.Member, result: AttemptResult,
                    to group: SegmentGroup) {
        for input in inputs {
            guard !group.isFinishing else { return }
            switch input {
            case .seamMismatch(let offset) where sourceDisagrees(group, source: member.path.source, at: offset):
                return
            case .seamVerified(let offset):
                sourcesAgree(group, source: member.path.source, at: offset)
                apply(group.planner.handle(input, now: .now), to: group)
            case .ended(let id, let ending) where refusesMirror(group, member: member, ending: ending, result: result):
                apply(group.planner.handle(.ended(connection: id, .closed), now: .now), to: group)
                if !group.isFinishing { pathsChanged(group, group.interfacePaths) }
            default:
                apply(group.planner.handle(input, now: .now), to: group)
            }
        }
    }

    /// Feeds the planner what callbacks queued for it.
    func settleInputs(_ group: SegmentGroup) {
        while !group.deferredInputs.isEmpty, !group.isFinishing {
            let input = group.deferredInputs.removeFirst()
            if case .seamMismatch(let offset) = input, sourceDisagrees(group, source: nil, at: offset) { return }
            if case .seamVerified(let offset) = input { sourcesAgree(group, source: nil, at: offset) }
            apply(group.planner.handle(input, now: .now), to: group)
        }
    }

    /// What a member's result means for the planner.
    private func ending(of transfer: Transfer, result: AttemptResult, in group: SegmentGroup) -> SegmentPlanner.Ending {
        if transfer.finishedRange || transfer.storedUpTo >= transfer.segmentEnd { return .finished }
        let delivered = transfer.storedUpTo > transfer.request.offset
        switch result {
        case .completed:
            return .finished
        case .incomplete, .transport:
            return .transport(delivered: delivered)
        case .serverBusy:
            return group.members.isEmpty ? .fatal : .serverBusy
        case .restartFromZero:
            if case .rangeNotHonoured? = transfer.primary.machine.refusal { return .rangeRefused }
            return .fatal
        case .failed:
            // A range refused with an error while others are served: no more segments; alone, the
            // attempt ends with it.
            return group.members.isEmpty ? .fatal : .rangeRefused
        case .aborted(.writeFailed):
            return .fatal
        case .aborted:
            return .closed
        }
    }

    /// Ends the group as one attempt: every member closed (its bytes handed to the file), then
    /// the owner is told.
    func finishGroup(_ group: SegmentGroup, _ result: AttemptResult, disablesSegments: Bool = false) {
        guard !group.isFinishing else { return }
        // Seams verified in the last callbacks are not kept as unverified.
        for case .seamVerified(let seam) in group.deferredInputs { _ = group.planner.handle(.seamVerified(at: seam), now: .now) }
        group.deferredInputs = []
        group.isFinishing = true
        group.file.setSeams(group.planner.seams)
        groups[group.id] = nil
        for member in group.members.values {
            if let transfer = transfers[member.engineID] { group.bytesReceived += transfer.bytesReceived }
            finish(member.engineID, forcedResult: .aborted(.recovery), failure: nil, detail: "")
        }
        group.members = [:]
        group.file.setDrainHandler(nil)
        group.callbacks.completion(TransferOutcome(result: result, bytesReceived: group.bytesReceived,
                                                   disablesSegments: disablesSegments))
    }

    func abortGroup(_ id: UInt64, reason: AbortReason) {
        guard let group = groups[id] else { return }
        finishGroup(group, .aborted(reason))
    }

    /// The owner races a suspected transfer: with one connection that is its member; with more,
    /// the planner already moved the range, so there is nothing to race.
    func raceGroup(_ group: SegmentGroup, connectTimeout: Duration) {
        let data = group.members.values.filter { $0.seam == nil }
        let suspect = group.suspect.flatMap { group.members[$0] } ?? (data.count == 1 ? data.first : nil)
        if let suspect, transfers[suspect.engineID] != nil {
            startRace(suspect.engineID, connectTimeout: connectTimeout)
        } else {
            group.callbacks.events(.raceEnded(.originalWon))
        }
    }

    /// The disk caught up: every member paused for it continues.
    func unpauseGroup(_ group: SegmentGroup) {
        let now = ContinuousClock.now
        for member in group.members.values {
            guard let transfer = transfers[member.engineID], transfer.primary.isPausedForBackpressure else { continue }
            let context = transfer.primary
            // A pause that lasted is the disk falling behind: more connections would not help.
            // (A short one is only the queue's shape.)
            if let pausedAt = context.pausedAt, now - pausedAt >= Self.diskBehind {
                _ = group.planner.handle(.backpressure, now: now)
            }
            context.pausedAt = nil
            context.isPausedForBackpressure = false
            context.lastActivity = .now
            transfer.stall.restart(at: .now)
            context.easy?.unpause()
        }
    }

    func pathsChanged(_ group: SegmentGroup, _ paths: [SegmentPlanner.Path]) {
        group.interfacePaths = paths
        apply(group.planner.handle(.pathsChanged(group.expanded(paths)), now: .now), to: group)
    }

    /// Settles what callbacks queued, opens seam checks whose bytes reached the file, ticks the
    /// planners. Returns how long the engine may sleep, in milliseconds.
    func tickGroups() -> Int {
        guard !groups.isEmpty else { return 250 }
        let now = ContinuousClock.now
        // The per-host bound: every open connection of the process counts, the groups of this
        // engine share what is left.
        var sharing: [String: Int] = [:]
        for group in groups.values { sharing[group.host, default: 0] += 1 }
        for group in Array(groups.values) where !group.isFinishing {
            let own = group.members.count
            let free = max(0, group.template.settings.maximumConnectionsPerHost - HostConnections.shared.count(group.host))
            let allowance = own + free / max(1, sharing[group.host] ?? 1)
            if allowance != group.allowance {
                group.allowance = allowance
                apply(group.planner.handle(.allowance(allowance), now: now), to: group)
            }
        }
        for group in Array(groups.values) {
            while !group.deferred.isEmpty, !group.isFinishing {
                let actions = group.deferred
                group.deferred = []
                apply(actions, to: group)
            }
            settleInputs(group)
            if !group.pendingChecks.isEmpty, !group.isFinishing {
                let waiting = group.pendingChecks
                group.pendingChecks = []
                for (planned, seam) in waiting {
                    if group.file.isWritten(planned.range) {
                        openMember(group, planned, seam: seam)
                    } else {
                        group.pendingChecks.append((planned, seam))
                    }
                }
            }
            // Bytes a quiet connection gathered are journaled within the rule's interval.
            for member in group.members.values {
                transfers[member.engineID]?.primary.flushIfDue(now: now)
            }
            if group.segmentation.sources != nil, !group.isFinishing {
                recordWrites(group)
                checkPieces(group)
            }
            if !group.isFinishing, now - group.lastTick >= Self.groupTick {
                group.lastTick = now
                if group.members.values.contains(where: { transfers[$0.engineID]?.primary.isPausedForBackpressure == true }) {
                    // Silent because we hold them: not a cap's sign (`SegmentPlanner.Configuration.quietShare`).
                    apply(group.planner.handle(.writerPaused, now: now), to: group)
                }
                apply(group.planner.handle(.tick, now: now), to: group)
                if !group.isFinishing { sizeReceiveBuffers(group, now: now) }
            }
        }
        return Int(Self.groupTick.milliseconds)
    }

    /// Gives each member on a path seen capping each connection the receive buffer its cap needs
    /// (`SegmentPlanner.receiveBuffer`): what the server has in flight on it, which a kill, a
    /// server reset or a cut response throws away, stays about a window of the cap. Set again
    /// only when the size moved by a quarter. A connection libcurl pools keeps its buffer for the
    /// next request to the same server (which caps it too).
    private func sizeReceiveBuffers(_ group: SegmentGroup, now: ContinuousClock.Instant) {
        for member in group.members.values {
            // HTTP/2 may carry several members on one connection: a window sized to one would
            // hold them all to it.
            guard let transfer = transfers[member.engineID], let size = group.planner.receiveBuffer(for: member.id, at: now),
                  let socket = transfer.primary.socket, transfer.primary.easy?.isOneRequestPerConnection == true else { continue }
            if let current = transfer.receiveBuffer, abs(size - current) * 4 < current { continue }
            // A refusal leaves the kernel's autotuning: no harm.
            guard (try? FileDescriptor(rawValue: socket).setReceiveBufferSize(size)) != nil else { continue }
            transfer.receiveBuffer = size
        }
    }

    /// Tells the owner when the connections (count or paths) changed, and the file how many write.
    private func reportConnections(_ group: SegmentGroup) {
        guard !group.isFinishing else { return }
        let now = group.connections
        if now.count != group.lastReported?.count {
            group.file.setWriters(max(1, now.count))
            // The bytes a kill may lose are shared by the connections open (`SegmentJournalRule`).
            let rule = SegmentJournalRule.forConnections(now.count)
            for member in group.members.values { transfers[member.engineID]?.journalRule = rule }
        }
        guard now != group.lastReported else { return }
        group.lastReported = now
        group.callbacks.events(.connectionsChanged(now))
    }
}

extension TransferContext {
    /// libcurl made the socket of this handle's connection (before connecting it): kept for
    /// the receive buffer's later changes, and given the one the member's path needs now.
    func didOpenSocket(_ socket: Int32) {
        guard role == .primary else { return }
        self.socket = socket
        // Over TLS the protocol is known only after the handshake (HTTP/2 would multiplex other
        // members on this connection): the engine's tick sizes it once a response shows HTTP/1.x.
        guard let size = transfer.receiveBuffer, transfer.request.url.scheme?.lowercased() == "http" else {
            transfer.receiveBuffer = nil
            return
        }
        if (try? FileDescriptor(rawValue: socket).setReceiveBufferSize(size)) == nil { transfer.receiveBuffer = nil }
    }

    /// The write path of a segment group's member: bytes up to the member's end are stored
    /// (the planner may extend the end in place when it is reached), the bytes past it are
    /// compared with what the neighbour stored (the seam; skipped where the neighbour's bytes
    /// are not on disk yet), and then the member stops.
    func segmentWrite(_ bytes: UnsafeRawBufferPointer, at offset: Int64, now: ContinuousClock.Instant) -> BodyDisposition {
        guard let group = transfer.group else { return .abort }
        if !transfer.reportedStartSeam {
            transfer.reportedStartSeam = true
            // Every byte of the overlap before the start matched the disk.
            if transfer.request.overlap > 0 { group.deferredInputs.append(.seamVerified(at: transfer.request.offset)) }
        }
        transfer.bytesReceived += Int64(bytes.count)
        transfer.stall.bytesArrived(at: now)
        transfer.isSuspected = false
        var position = offset
        var rest = bytes
        while !rest.isEmpty {
            let end = transfer.segmentEnd
            if position < end {
                let take = Int(min(Int64(rest.count), end - position))
                gather(UnsafeRawBufferPointer(rebasing: rest[..<take]), at: position, now: now)
                position += Int64(take)
                rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                transfer.storedUpTo = position
                group.stored(member: transfer.member, upTo: position, now: now)
                if position == end, group.reachedEnd(transfer) { continue }   // extended in place
                continue
            }
            // Past the end: the seam with the neighbour's bytes, compared where they are on disk.
            guard position < transfer.seamLimit else { break }
            let count = Int(min(Int64(rest.count), transfer.seamLimit - position))
            let part = UnsafeRawBufferPointer(rebasing: rest[..<count])
            if transfer.file.isWritten(position..<position + Int64(count)) {
                guard transfer.file.matchesDisk(part, at: position) else {
                    group.deferredInputs.append(.seamMismatch(at: end))
                    transfer.finishedRange = true
                    return .abort
                }
            } else {
                transfer.seamUnchecked = true
            }
            position += Int64(count)
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
        }
        guard position >= transfer.segmentEnd, position >= transfer.seamLimit || transfer.segmentEnd >= (group.planner.total ?? Int64.max)
        else { return .consumed }
        // The range is stored and its seam compared (or left for a check): the member is done.
        if !transfer.finishedRange {
            transfer.finishedRange = true
            let total = group.planner.total ?? Int64.max
            if transfer.segmentEnd < total, !transfer.seamUnchecked {
                group.deferredInputs.append(.seamVerified(at: transfer.segmentEnd))
            }
            flushChunk()
        }
        // A response that ends here completes by itself (its connection can be reused);
        // one that goes on is cut.
        if let announced = machine.acceptance?.endOffset, position >= announced { return .consumed }
        return .abort
    }
}

extension SegmentGroup {
    /// A member stored bytes up to `position`: the planner counts them; the owner hears about the
    /// total at most every 100 ms.
    func stored(member: Int, upTo position: Int64, now: ContinuousClock.Instant) {
        planner.record(position: position, of: member, at: now)
        if now - lastProgress >= .milliseconds(100) {
            lastProgress = now
            callbacks.progress(planner.storedBytes)
        }
    }

    /// A member reached its end: true when the planner extended it in place.
    func reachedEnd(_ transfer: Transfer) -> Bool {
        let before = transfer.segmentEnd
        for action in planner.handle(.reachedEnd(connection: transfer.member), now: .now) {
            switch action {
            case .setEnd(let id, let end) where id == transfer.member:
                transfer.segmentEnd = end
                let requested = transfer.request.rangeEnd ?? planner.total ?? Int64.max
                transfer.seamLimit = min(requested, end + segmentation.configuration.seamOverlap)
            default:
                deferred.append(action)
            }
        }
        return transfer.segmentEnd > before
    }

    /// The only connection's answer to its resume is the whole entity: like a transfer of one
    /// connection, the file starts over with this body (the owner hears `restartedFromZero`).
    /// False when other connections run (then the attempt ends instead).
    func restartsInPlace(_ transfer: Transfer, _ acceptance: ResponseStateMachine.Acceptance) -> Bool {
        guard members.count == 1, members[transfer.member] != nil, !transfer.request.isSegment else { return false }
        let hasValidator = acceptance.entityTag != nil || acceptance.lastModified != nil
        let allows = (hasValidator || segmentation.hasExpectedDigest) && acceptance.totalLength != nil && !acceptance.refusesRanges
        deferred += planner.handle(.restartedInPlace(connection: transfer.member, total: acceptance.totalLength,
                                                     allowsSegments: allows), now: .now)
        transfer.segmentEnd = acceptance.totalLength ?? Int64.max
        transfer.seamLimit = transfer.segmentEnd
        transfer.reportedStartSeam = true
        return true
    }

    /// A member's response was accepted.
    func accepted(_ transfer: Transfer, _ acceptance: ResponseStateMachine.Acceptance) {
        let hasValidator = acceptance.entityTag != nil || acceptance.lastModified != nil
        let allows = (hasValidator || segmentation.hasExpectedDigest) && acceptance.totalLength != nil && !acceptance.refusesRanges
        let isRange = transfer.request.offset > 0 && !acceptance.restartsFromZero
        deferred += planner.handle(.accepted(connection: transfer.member, total: acceptance.totalLength, isRange: isRange,
                                             allowsSegments: allows), now: .now)
        if let total = acceptance.totalLength, transfer.segmentEnd == Int64.max, transfer.request.rangeEnd == nil {
            // The first answer tells the length: an open request ends there.
            transfer.segmentEnd = total
            transfer.seamLimit = total
        }
    }
}
