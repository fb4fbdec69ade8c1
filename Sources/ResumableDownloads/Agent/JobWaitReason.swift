import FoundationEssentials
import LinuxReachability
import ReachabilityBase

/// Why a job that wants to transfer does not: one typed value for every rule that holds a job
/// back (the path, power, disk space, time), so `queue list`, events and metrics say it the same
/// way (`waiting: on battery`, `waiting: 0.8 GiB free, needs 1 GiB`). BITS has one such value per
/// job too (`BG_JOB_STATE_TRANSIENT_ERROR` with its error context), URLSession only the
/// `taskIsWaitingForConnectivity` callback.
public enum JobWaitReason: Sendable, Hashable, CustomStringConvertible {
    /// No usable network path.
    case noPath
    /// The only paths are constrained (saving data: NetworkManager `Metered=yes`), and the job
    /// stays off them (`--no-constrained`, `allowsConstrainedNetworkAccess = false`).
    case constrainedPath
    /// The only paths are expensive (cellular-like), and the job stays off them.
    case expensivePath
    /// The machine runs on battery, and the job waits for AC power (`--not-on-battery`, a
    /// discretionary background task).
    case onBattery
    /// Transferring would leave less than the minimum free space on the file system: `free`
    /// bytes are free, `needed` must be (what the job still has to write plus the minimum).
    case lowDiskSpace(free: Int64, needed: Int64)
    /// Not before this time (a background task's `earliestBeginDate`).
    case notBefore(Date)
    /// Outside the time window that lets it run; the text names the window
    /// (`09:00-17:00 limit 2 MiB/s`).
    case timeWindow(String)

    /// A stable name for each reason, for `--json`, events and metric labels.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case noPath, constrainedPath, expensivePath, onBattery, lowDiskSpace, notBefore, timeWindow
    }

    /// Its stable name.
    public var kind: Kind {
        switch self {
        case .noPath: .noPath
        case .constrainedPath: .constrainedPath
        case .expensivePath: .expensivePath
        case .onBattery: .onBattery
        case .lowDiskSpace: .lowDiskSpace
        case .notBefore: .notBefore
        case .timeWindow: .timeWindow
        }
    }

    /// Why a job waiting for connectivity on `path` waits: a constrained or expensive path it
    /// stays off (constrained first: such a path is expensive too), else no usable path.
    public static func forPath(_ path: NetworkPath?, allowsExpensive: Bool, allowsConstrained: Bool) -> JobWaitReason {
        guard let path, path.isSatisfied else { return .noPath }
        if path.isConstrained, !allowsConstrained { return .constrainedPath }
        if path.isExpensive, !allowsExpensive { return .expensivePath }
        return .noPath
    }

    /// The reason as `queue list` shows it after `waiting: `.
    public var description: String {
        switch self {
        case .noPath: "no network path"
        case .constrainedPath: "only constrained paths (the job stays off them)"
        case .expensivePath: "only expensive paths (the job stays off them)"
        case .onBattery: "on battery"
        case .lowDiskSpace(let free, let needed):
            // In the unit of `needed` unless that would read `0 TiB` for a free count.
            "\(free > 0 && Self.binaryBytes(free, scale: needed).hasPrefix("0 ") ? Self.binaryBytes(free) : Self.binaryBytes(free, scale: needed)) free, needs \(Self.binaryBytes(needed))"
        case .notBefore(let date): "not before \(Timestamp.iso8601(date)) (earliestBeginDate)"
        case .timeWindow(let window): window
        }
    }

    /// `0.8 GiB`, `1 GiB`, `512 MiB`, `300 B`: in the largest 1024-based unit that `scale` (the
    /// count itself unless given) reaches, one decimal, a trailing `.0` dropped; both counts of a
    /// reason share the unit of the larger (`0.8 GiB free, needs 1 GiB`, not `819.1 MiB`).
    /// Rounded down, so a free count never looks larger than it is.
    public static func binaryBytes(_ count: Int64, scale: Int64? = nil) -> String {
        let count = max(0, count)
        let scale = max(count, scale ?? count)
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] as [(String, Int64)] where scale >= 1 << shift {
            // Whole units and the tenths of the rest apart: `count * 10` would overflow.
            let tenths = (count >> shift) * 10 + ((count & ((1 << shift) - 1)) * 10) >> shift
            return tenths % 10 == 0 ? "\(tenths / 10) \(unit)" : "\(tenths / 10).\(tenths % 10) \(unit)"
        }
        return "\(count) B"
    }
}
