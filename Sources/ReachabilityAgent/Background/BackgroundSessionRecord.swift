import FoundationEssentials
import LinuxSystem
import ResumableDownloads

/// One background session as the agent keeps it on disk (`STATE/background/sessions/*.json`),
/// with its changes since in a log beside it (`BackgroundStore`, `BackgroundSessionChange`):
/// every change that matters after an agent crash is durable before it is acted on (a task
/// created or changed, an event added or acknowledged). Progress is the engine's (its resume records).
package struct BackgroundSessionRecord: Codable, Sendable, Hashable {
    package static let currentVersion = 1

    package var version = BackgroundSessionRecord.currentVersion
    package var key: BackgroundSessionKey
    package var settings: BackgroundSessionSettings
    /// Tasks by identifier; completed ones stay until their event is acknowledged.
    package var tasks: [BackgroundTaskRecord] = []
    /// Events not yet acknowledged, in order.
    package var pending: [BackgroundPendingEvent] = []
    package var nextSequence: UInt64 = 1
    package var nextTaskIdentifier = 1
    /// `invalidateAndCancel()` was called: the session goes once its events are acknowledged.
    package var isInvalidated = false
    /// The serial of the last change this file holds: the lines of the session's log that
    /// follow it are numbered from here (`BackgroundStore`); nil in records from before the log.
    package var journalSerial: UInt64?

    package init(key: BackgroundSessionKey, settings: BackgroundSessionSettings) {
        self.key = key
        self.settings = settings
    }

    /// Bounds a record read back must respect (and the agent keeps while running).
    package static let maximumTasks = 4096
    package static let maximumPending = 2 * maximumTasks

    /// Why a record read back cannot be used, or nil.
    package var problem: String? {
        if version != Self.currentVersion { return "unsupported version \(version)" }
        if let problem = BackgroundSessionKey.problem(with: key.identifier) { return problem }
        if let problem = settings.problem { return problem }
        if tasks.count > Self.maximumTasks || pending.count > Self.maximumPending { return "too many tasks or events" }
        guard (1...BackgroundTaskSpec.maximumTaskIdentifier).contains(nextTaskIdentifier), (1...(UInt64(1) << 62)).contains(nextSequence) else {
            return "nextTaskIdentifier or nextSequence is out of range"
        }
        var identifiers = Set<Int>()
        for task in tasks {
            guard identifiers.insert(task.spec.taskIdentifier).inserted else { return "task \(task.spec.taskIdentifier) appears twice" }
            if let problem = task.spec.problem { return "task \(task.spec.taskIdentifier): \(problem)" }
            if task.spec.taskIdentifier >= nextTaskIdentifier { return "task \(task.spec.taskIdentifier) is not below nextTaskIdentifier" }
        }
        var last: UInt64 = 0
        for event in pending {
            guard event.sequence > last, event.sequence < nextSequence else { return "event sequence numbers are out of order" }
            last = event.sequence
        }
        return nil
    }
}

/// A task of a background session.
package struct BackgroundTaskRecord: Codable, Sendable, Hashable {
    package enum Phase: String, Codable, Sendable {
        /// Made, never resumed.
        case created
        /// Resumed; transferring, queued in the engine, or held back (date, disk space).
        case running
        /// Suspended by the session (or `queue pause`).
        case suspended
        /// Its last event has been added; it goes when that is acknowledged.
        case completed
    }

    package var spec: BackgroundTaskSpec
    package var phase: Phase = .created
    /// The engine download carrying it; duplicates of one URL share one.
    package var transfer: UUID
    /// Fails with -1001 after this (`timeoutIntervalForResource` from the first resume).
    package var deadline: Double?
    /// The last progress known (for snapshots after a restart).
    package var bytesReceived: Int64 = 0
    package var totalBytes: Int64?
    /// An upload task once the server holds it (IETF draft or tus): an agent restart asks that
    /// resource its offset and sends only the rest.
    package var uploadResume: UploadResumeState?

    package init(spec: BackgroundTaskSpec, transfer: UUID) {
        self.spec = spec
        self.transfer = transfer
        bytesReceived = spec.resumeState?.verifiedOffset ?? 0
        totalBytes = spec.resumeState?.totalLength
    }

    /// The task as the agent reports it.
    package func snapshot(waitingReason: String?) -> BackgroundTaskSnapshot {
        let state: BackgroundTaskSnapshot.State = switch phase {
        case .created, .suspended: .suspended
        case .running: .running
        case .completed: .completed
        }
        return BackgroundTaskSnapshot(taskIdentifier: spec.taskIdentifier, url: spec.url, taskDescription: spec.taskDescription,
                                      earliestBeginDate: spec.earliestBeginDate, expectedBytes: spec.expectedBytes,
                                      priority: spec.priority, state: state, bytesReceived: bytesReceived,
                                      totalBytes: totalBytes ?? spec.upload?.identity?.size, waitingReason: waitingReason,
                                      isFromResumeData: spec.resumeState != nil, transfer: transfer,
                                      isUpload: spec.upload != nil ? true : nil, uploadFile: spec.upload?.file)
    }
}

/// An event kept until the session acknowledges it.
package struct BackgroundPendingEvent: Codable, Sendable, Hashable {
    package var sequence: UInt64
    /// `finished` or `failed`.
    package var kind: BackgroundEvent.Kind
    package var task: BackgroundTaskSnapshot
    package var failure: BackgroundFailure?
    /// For an upload's `finished`: the server's response.
    package var response: BackgroundUploadResponse?
    /// For `finished`: the hard link handed out last (`TRANSFER-SEQUENCE.delivery`), if any.
    package var delivery: String?

    package init(sequence: UInt64, kind: BackgroundEvent.Kind, task: BackgroundTaskSnapshot, failure: BackgroundFailure?) {
        self.sequence = sequence
        self.kind = kind
        self.task = task
        self.failure = failure
    }

    /// The name of the hard link a `finished` event hands out: one per event, so the original
    /// stays the agent's until the event is acknowledged.
    package var deliveryName: String { "\(task.transfer.uuidString)-\(sequence).delivery" }
}
