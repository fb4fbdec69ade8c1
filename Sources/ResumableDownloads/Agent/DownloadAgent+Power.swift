import FoundationEssentials
import ReachabilityBase

/// The machine's power as the agent was last told, and the downloads it holds back for it.
struct PowerWatch: Sendable {
    /// True on battery, false on AC power, nil unknown (then nothing waits: a machine without
    /// UPower is taken to be on the mains).
    var isOnBattery: Bool?
    /// Held back in line for AC power.
    var waiting: Set<UUID> = []
}

/// The power rule (issue 32 item 3): a download with `waitsForACPower` does not take a slot
/// while the machine runs on battery (it waits queued with `JobWaitReason.onBattery`), and one
/// transferring when the battery takes over is checkpointed as for a pause and waits. The
/// agent's owner feeds UPower's facts (`updatePower`); this module reads no bus itself.
extension DownloadAgent {
    /// The machine now runs on battery (true), on AC power (false) or nobody knows (nil).
    public func updatePower(isOnBattery: Bool?) {
        guard power.isOnBattery != isOnBattery, !isShutDown else { return }
        power.isOnBattery = isOnBattery
        configuration.logger.info("power changed", metadata: ["onBattery": isOnBattery.map { "\($0)" } ?? "unknown"])
        if isOnBattery == true {
            for id in scheduler.active {
                guard let entry = entries[id], entry.download.options.waitsForACPower, let mailbox = entry.mailbox else { continue }
                configuration.logger.info("download stops for AC power", metadata: ["id": id.uuidString])
                mailbox.yield(.machine(.pause))   // its intent stays `.run`: queued again, then held
            }
            return
        }
        let released = power.waiting
        power.waiting = []
        for id in released { entries[id]?.download.wait(for: nil) }
        if !released.isEmpty { schedule() }
    }

    /// Whether `id` may take a slot under the power rule; if not it is held with `onBattery`.
    func admitsForPower(_ id: UUID) -> Bool {
        guard power.isOnBattery == true, let entry = entries[id], entry.download.options.waitsForACPower else { return true }
        if power.waiting.insert(id).inserted {
            configuration.logger.info("download waits for AC power", metadata: ["id": id.uuidString])
        }
        entry.download.wait(for: .onBattery)
        return false
    }
}
