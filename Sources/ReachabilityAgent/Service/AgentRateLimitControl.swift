import FoundationEssentials
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// Where the agent's one bandwidth limit comes from and what it is now: `agent.conf`'s schedule
/// (`AgentRateLimitPolicy`), or a value set with `agent limit` that holds until the next
/// `agent limit` or until SIGHUP re-reads the file. It sets the `AgentRateLimit` every transfer of
/// every `DownloadAgent` the service makes draws from, so a change reaches running transfers at
/// their next chunk (no restart). The clock is injected: tests evaluate any hour without waiting.
package final class AgentRateLimitControl: Sendable {
    /// What `agent limit` set: a rate, or no limit at all (nil).
    package enum Override: Sendable, Hashable {
        case rate(Int64?)
    }

    /// The limit in force and why, as `agent status` and `queue list` show it.
    package struct State: Sendable, Hashable {
        /// Bytes per second; nil is none.
        package var bytesPerSecond: Int64?
        /// The `agent.conf` window that set it (nil: the outside value, or `agent limit`).
        package var window: LimitWindow?
        /// Whether `agent limit` set it.
        package var isOverride: Bool

        /// `limit 2 MiB/s (09:00-17:00)`, `limit 4 MiB/s (agent limit)`, `no limit`.
        package var text: String {
            guard let bytesPerSecond else { return isOverride ? "no limit (agent limit)" : "no limit" }
            let rate = "limit \(Self.rateText(bytesPerSecond))"
            if isOverride { return rate + " (agent limit)" }
            return window.map { rate + " (\($0))" } ?? rate
        }

        /// `2 MiB/s`, `1.5 MiB/s`, `500 KiB/s`, `100 B/s`: whole units when they divide, else tenths.
        package static func rateText(_ bytesPerSecond: Int64) -> String {
            for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] as [(String, Int64)] where bytesPerSecond >= 1 << shift {
                let tenths = (bytesPerSecond * 10 + (1 << shift) / 2) >> shift
                return (tenths % 10 == 0 ? "\(tenths / 10)" : "\(tenths / 10).\(tenths % 10)") + " \(unit)/s"
            }
            return "\(bytesPerSecond) B/s"
        }
    }

    private struct Inner: Sendable {
        var policy: AgentRateLimitPolicy
        var override: Override?
        var state: State?
    }

    /// The limit the transfers draw from.
    package let limit: AgentRateLimit
    private let inner: Mutex<Inner>
    private let now: @Sendable () -> Date
    private let localTime: @Sendable (Int64) -> (weekday: Int, minuteOfDay: Int)?

    /// A control for `policy`, evaluated at `now()` read as local time by `localTime` (the
    /// machine's time zone by default).
    package init(policy: AgentRateLimitPolicy, limit: AgentRateLimit = AgentRateLimit(), now: @escaping @Sendable () -> Date,
                 localTime: @escaping @Sendable (Int64) -> (weekday: Int, minuteOfDay: Int)? = { LocalTime.weekdayAndMinute(secondsSinceEpoch: $0) }) {
        self.limit = limit
        self.now = now
        self.localTime = localTime
        inner = Mutex(Inner(policy: policy))
    }

    /// The limit in force (after the last `evaluate`).
    package var state: State {
        inner.withLock { $0.state } ?? State(bytesPerSecond: nil, window: nil, isOverride: false)
    }

    /// Re-reads the clock and applies the limit that holds now; returns the new state when it
    /// changed (the caller reports it), nil otherwise. Called every second and after each change.
    @discardableResult
    package func evaluate() -> State? {
        let seconds = Int64(now().timeIntervalSince1970.rounded(.down))
        let (changed, state) = inner.withLock { inner -> (Bool, State) in
            let state: State
            switch inner.override {
            case .rate(let rate)?:
                state = State(bytesPerSecond: rate, window: nil, isOverride: true)
            case nil:
                let inForce = inner.policy.limit(secondsSinceEpoch: seconds, localTime: localTime)
                state = State(bytesPerSecond: inForce.bytesPerSecond, window: inForce.window, isOverride: false)
            }
            defer { inner.state = state }
            return (inner.state != state, state)
        }
        // Outside the lock: the engine thread takes the limit's own lock at every chunk.
        if changed { limit.setLimit(state.bytesPerSecond) }
        return changed ? state : nil
    }

    /// `agent limit RATE|none`: holds until the next one or a reload.
    @discardableResult
    package func set(_ override: Override) -> State? {
        inner.withLock { $0.override = override }
        return evaluate()
    }

    /// A reload (SIGHUP): the file's schedule again, and no `agent limit` value.
    @discardableResult
    package func reload(_ policy: AgentRateLimitPolicy) -> State? {
        inner.withLock {
            $0.policy = policy
            $0.override = nil
        }
        return evaluate()
    }
}
