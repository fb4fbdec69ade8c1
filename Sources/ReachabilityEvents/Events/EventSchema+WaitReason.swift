import FoundationEssentials
import ResumableDownloads
import ReachabilityBase

extension EventSchema {
    /// The `waiting` event's fields for a job held back by a rule: `reason` (the stable name,
    /// `JobWaitReason.Kind`), `message` (as `queue list` shows it after `waiting: `), and the
    /// reason's numbers (`free`, `needed` in bytes; `until` for a date). A `waiting` event
    /// without `reason` is the older one: no usable path.
    package static func waitReasonFields(_ reason: JobWaitReason) -> [JSONValue.Member] {
        var fields: [JSONValue.Member] = [
            .init(key: "reason", value: .string(reason.kind.rawValue)),
            .init(key: "message", value: .string(reason.description)),
        ]
        switch reason {
        case .lowDiskSpace(let free, let needed):
            fields.append(.init(key: "free", value: .integer(Int(free))))
            fields.append(.init(key: "needed", value: .integer(Int(needed))))
        case .notBefore(let date):
            fields.append(.init(key: "until", value: .string(Timestamp.iso8601(date))))
        case .noPath, .constrainedPath, .expensivePath, .onBattery, .timeWindow:
            break
        }
        return fields
    }
}
