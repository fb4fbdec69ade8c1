import FoundationEssentials
import LinuxReachability
import Synchronization

/// What `watch` and the agent count about the network path, fed one path at a time. Pure:
/// the caller passes the time, so tests script a day of outages in microseconds.
package struct PathMetrics: Sendable {
    /// When counting started (the process's start), the counters' `_created`.
    package let startedAt: Date
    /// The latest path, nil before the first.
    private(set) var path: NetworkPath?
    /// Paths received after the first (each differs from the one before).
    private(set) var changes = 0
    /// Times the path became unsatisfied (an unsatisfied first path counts).
    private(set) var outages = 0
    /// When the path last changed (or the first path arrived).
    private(set) var lastChangeAt: Date?
    /// Seconds spent unsatisfied in outages that have ended.
    private var endedOutageSeconds: Double = 0
    /// Start of the current outage.
    private var outageStartedAt: Date?

    package init(startedAt: Date) {
        self.startedAt = startedAt
    }

    /// A path from the monitor; the same path again is no change.
    package mutating func record(_ newPath: NetworkPath, at time: Date) {
        guard newPath != path else { return }
        if path != nil { changes += 1 }
        if newPath.isSatisfied {
            if let start = outageStartedAt {
                // Wall-clock steps backwards (NTP) must not make an outage negative.
                endedOutageSeconds += max(0, time.timeIntervalSince(start))
                outageStartedAt = nil
            }
        } else if outageStartedAt == nil {
            outages += 1
            outageStartedAt = time
        }
        path = newPath
        lastChangeAt = time
    }

    /// Seconds without a satisfied path since counting started, including the current outage.
    package func outageSeconds(at time: Date) -> Double {
        endedOutageSeconds + (outageStartedAt.map { max(0, time.timeIntervalSince($0)) } ?? 0)
    }

    /// The path families, in exposition order.
    package func families(at time: Date) -> [MetricFamily] {
        let connections: [NetworkPath.Connection] = [.wired, .wifi, .cellular, .unavailable]
        let current = path?.connection
        var families = [
            MetricFamily("reachability_path_satisfied", .gauge,
                         help: "1 when a usable route leaves this host (the path is satisfied), else 0.",
                         value: path?.isSatisfied == true ? 1 : 0),
            MetricFamily("reachability_path_connection", .gauge,
                         help: "1 for the connection type of the primary path, 0 for the others.",
                         samples: connections.map { MetricSample(current == $0 ? 1 : 0, labels: [("connection", $0.rawValue)]) }),
            MetricFamily("reachability_path_connectivity", .gauge,
                         help: "1 for the connectivity check's answer (unknown without a check; none, limited, portal, full), 0 for the others.",
                         samples: Connectivity.allCases.map {
                             MetricSample(path?.connectivity == $0 ? 1 : 0, labels: [("state", $0.rawValue)])
                         }),
            MetricFamily("reachability_path_expensive", .gauge,
                         help: "1 when the primary path is cellular-like (expensive), else 0.",
                         value: path?.isExpensive == true ? 1 : 0),
        ]
        // The path's interfaces: the usable ones unless the monitor lists all (`--all-interfaces`),
        // so hosts that churn container interfaces do not churn series either.
        let interfaces = path?.interfaces ?? []
        let primary = path?.primaryInterface?.index
        func perInterface(_ name: String, _ help: String, _ value: (NetworkInterface) -> Bool) -> MetricFamily {
            MetricFamily(name, .gauge, help: help, samples: interfaces.map { interface in
                MetricSample(value(interface) ? 1 : 0, labels: [("interface", interface.name), ("type", interface.type.rawValue)])
            })
        }
        families += [
            perInterface("reachability_interface_up", "1 when the interface is administratively up (IFF_UP).") { $0.isUp },
            perInterface("reachability_interface_carrier", "1 when the interface has carrier (IFF_LOWER_UP).") { $0.hasCarrier },
            perInterface("reachability_interface_usable", "1 when traffic could leave through the interface: up, carrier and an address.") { $0.isUsable },
            perInterface("reachability_interface_primary", "1 for the interface the default route leaves through.") {
                path?.isSatisfied == true && $0.index == primary
            },
            MetricFamily("reachability_path_changes", .counter,
                         help: "Path changes seen since start (status, routes, addresses or an interface's state).",
                         created: startedAt, value: Double(changes)),
            MetricFamily("reachability_path_outages", .counter,
                         help: "Times the path became unsatisfied since start (an unsatisfied path at start counts).",
                         created: startedAt, value: Double(outages)),
            MetricFamily("reachability_path_outage_seconds", .counter, unit: "seconds",
                         help: "Seconds without a satisfied path since start, the current outage included.",
                         created: startedAt, value: outageSeconds(at: time)),
            MetricFamily("reachability_path_last_change_timestamp_seconds", .gauge, unit: "seconds",
                         help: "Unix time of the last path change (of the first path, before any change).",
                         value: lastChangeAt?.timeIntervalSince1970 ?? 0),
            MetricFamily("reachability_start_timestamp_seconds", .gauge, unit: "seconds",
                         help: "Unix time this process started counting; counters restart from zero with it.",
                         value: startedAt.timeIntervalSince1970),
        ]
        return families
    }
}

/// `PathMetrics` shared between a command's path loop and its metrics writer.
package final class SharedPathMetrics: Sendable {
    private let metrics: Mutex<PathMetrics>

    package init(startedAt: Date) {
        metrics = Mutex(PathMetrics(startedAt: startedAt))
    }

    package func record(_ path: NetworkPath, at time: Date) {
        metrics.withLock { $0.record(path, at: time) }
    }

    package func families(at time: Date) -> [MetricFamily] {
        metrics.withLock { $0.families(at: time) }
    }
}
