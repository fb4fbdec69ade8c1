import FoundationEssentials
import LinuxSystem
import ReachabilityBase

/// The downloads the free-space rule holds back, and the watch that looks at them again.
struct SpaceWatch: Sendable {
    /// Held back, with the reason last found: only the watch lets them into line again (a
    /// `schedule()` per add or completion does not statvfs them).
    var waiting: [UUID: JobWaitReason] = [:]
    /// Met `ENOSPC`: taken to still need at least `SpacePolicy.afterNoSpace`.
    var metNoSpace: Set<UUID> = []
    /// The file system each destination directory was last found on (jobs on one share its space).
    var fileSystems: [String: UInt64] = [:]
    /// Runs while any download waits or transfers under the rule.
    var task: Task<Void, Never>?
}

/// The free-space rule (issue 32 item 4, `SpacePolicy`): at admission, a download that would
/// leave less than the minimum on its file system (counting what the downloads already running
/// there still write) waits in line with `JobWaitReason.lowDiskSpace` instead of taking its
/// slot; one that meets `ENOSPC` is checkpointed and waits the same way instead of failing;
/// every `recheckInterval` the waiting ones are looked at again (and let into line when the
/// space is back), and a running one that now breaks the rule (the disk filled from elsewhere)
/// is checkpointed as for a pause and waits. Nothing stored is dropped.
extension DownloadAgent {
    /// What the downloads holding a slot still write, per file system (their remaining bytes),
    /// for the admission of others; empty without a rule.
    func spaceReservations() -> [UInt64: Int64] {
        guard configuration.spacePolicy != nil else { return [:] }
        var reserved: [UInt64: Int64] = [:]
        for id in scheduler.active {
            guard let entry = entries[id], let fileSystem = space.fileSystems[Self.directory(of: entry)] else { continue }
            let (sum, overflow) = reserved[fileSystem, default: 0].addingReportingOverflow(stillNeeded(entry))
            reserved[fileSystem] = overflow ? .max : sum
        }
        return reserved
    }

    /// Whether `id` may take a slot under the rule; if not it is held back with the reason. An
    /// admitted download's remaining bytes join `reserved` for the next ones in the same pass.
    func admitsForSpace(_ id: UUID, reserved: inout [UInt64: Int64]) -> Bool {
        guard configuration.spacePolicy != nil, let entry = entries[id] else { return true }
        if space.waiting[id] != nil { return false }
        switch evaluateSpace(entry, reserved: reserved) {
        case .hold(let reason):
            hold(id, entry, reason)
            return false
        case .proceed(let fileSystem, let needed):
            if let fileSystem {
                let (sum, overflow) = reserved[fileSystem, default: 0].addingReportingOverflow(needed)
                reserved[fileSystem] = overflow ? .max : sum
            }
            startSpaceWatch()   // a running download is watched too: the disk may fill from elsewhere
            return true
        }
    }

    /// A download whose driver met `ENOSPC` (its bytes checkpointed, its driver ended): back in
    /// line, held until the watch finds the space.
    func requeueForSpace(_ id: UUID, after failure: DownloadError) {
        guard let entry = entries[id] else { return }
        space.metNoSpace.insert(id)
        configuration.logger.warning("download waits for disk space", metadata: ["id": id.uuidString, "error": failure.description])
        entry.download.update(state: .queued)
        scheduler.enqueue(id, priority: entry.download.options.priority)
        let reason: JobWaitReason = switch evaluateSpace(entry, reserved: spaceReservations()) {
        case .hold(let reason): reason
        // The file system says there is room, but the write said otherwise (a quota, or space
        // taken meanwhile): it still waits for the next check, not a request per failure.
        case .proceed: .lowDiskSpace(free: (try? FileSystemSpace.of(Self.directory(of: entry)).availableBytes) ?? 0,
                                     needed: SpacePolicy.afterNoSpace)
        }
        hold(id, entry, reason)
        schedule()
    }

    /// One look by the watch: waiting downloads whose space is back are let into line; running
    /// ones that now break the rule are checkpointed (they come back through admission, held).
    func checkSpace() {
        guard configuration.spacePolicy != nil, !isShutDown else {
            space.task?.cancel()
            space.task = nil
            return
        }
        var released = false
        let reserved = spaceReservations()
        for (id, _) in space.waiting {
            guard let entry = entries[id], entry.driver == nil, entry.intent == .run, !entry.download.state.isFinal else {
                space.waiting[id] = nil
                entries[id]?.download.wait(for: nil)
                continue
            }
            switch evaluateSpace(entry, reserved: reserved) {
            case .hold(let reason):
                space.waiting[id] = reason
                entry.download.wait(for: reason)
            case .proceed:
                configuration.logger.info("disk space is back", metadata: ["id": id.uuidString])
                space.waiting[id] = nil
                entry.download.wait(for: nil)
                released = true
            }
        }
        for id in scheduler.active {
            guard let entry = entries[id], let mailbox = entry.mailbox, entry.download.state == .running,
                  case .hold(let reason) = evaluateSpace(entry, reserved: [:]) else { continue }
            configuration.logger.warning("download stops for disk space", metadata: ["id": id.uuidString, "reason": reason.description])
            mailbox.yield(.machine(.pause))   // its intent stays `.run`: it is queued again, then held
        }
        space.metNoSpace = space.metNoSpace.filter { entries[$0].map { !$0.download.state.isFinal } ?? false }
        if released { schedule() }
        if space.waiting.isEmpty, scheduler.active.isEmpty {
            space.task?.cancel()
            space.task = nil
        }
    }

    // MARK: helpers

    private enum SpaceVerdict {
        case hold(JobWaitReason)
        /// May go on; it writes `needed` more on `fileSystem` (nil when statvfs failed).
        case proceed(fileSystem: UInt64?, needed: Int64)
    }

    private func evaluateSpace(_ entry: Entry, reserved: [UInt64: Int64]) -> SpaceVerdict {
        let needed = stillNeeded(entry)
        guard let policy = configuration.spacePolicy else { return .proceed(fileSystem: nil, needed: needed) }
        let directory = Self.directory(of: entry)
        // A directory statvfs cannot read (gone, no permission): the transfer will say what is
        // wrong, and `ENOSPC` still waits.
        guard let fileSystem = try? FileSystemSpace.of(directory) else { return .proceed(fileSystem: nil, needed: needed) }
        space.fileSystems[directory] = fileSystem.identifier
        // Not `scheduler` here: admission calls this while the scheduler is being changed.
        if let reason = policy.waitReason(available: fileSystem.availableBytes, total: fileSystem.totalBytes,
                                          stillNeeded: needed, reserved: reserved[fileSystem.identifier] ?? 0) {
            return .hold(reason)
        }
        return .proceed(fileSystem: fileSystem.identifier, needed: needed)
    }

    /// The bytes `entry` still writes: its length (announced, recorded or expected) less what
    /// it stored; when the length is not known, 0, or `afterNoSpace` after `ENOSPC`.
    private func stillNeeded(_ entry: Entry) -> Int64 {
        let progress = entry.download.progress
        let total = progress.totalBytes ?? entry.record.totalLength ?? entry.download.options.expectedLength
        let remaining = total.map { max(0, $0 - progress.bytesReceived) } ?? 0
        return total == nil && space.metNoSpace.contains(entry.download.id) ? SpacePolicy.afterNoSpace : remaining
    }

    private func hold(_ id: UUID, _ entry: Entry, _ reason: JobWaitReason) {
        if space.waiting[id] == nil {
            configuration.logger.info("download waits for disk space", metadata: ["id": id.uuidString, "reason": reason.description])
        }
        space.waiting[id] = reason
        entry.download.wait(for: reason)
        startSpaceWatch()
    }

    /// The watch runs while anything waits or transfers under the rule; a running download is
    /// looked at too (the disk may fill from elsewhere).
    private func startSpaceWatch() {
        guard space.task == nil, let interval = configuration.spacePolicy?.recheckInterval else { return }
        space.task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard !Task.isCancelled, let self else { return }
                await self.checkSpace()
            }
        }
    }

    /// The directory the partial and the finished file are in.
    private static func directory(of entry: Entry) -> String {
        entry.record.destination.deletingLastPathComponent().path
    }
}
