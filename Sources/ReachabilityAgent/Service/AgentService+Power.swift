import FoundationEssentials
import LinuxReachability
import ResumableDownloads

extension AgentService {
    /// How often UPower is asked while a job waits for AC power (polled, not followed by
    /// signal: a job waits at most this long after the plug goes in or out).
    static let powerInterval = Duration.seconds(2)

    /// Reads UPower now and tells the download agent (before a `--not-on-battery` job is queued:
    /// it must not start on battery before the watch's next look).
    func refreshPower() async {
        let read = environment.power
        let facts = await Task.detached { read() }.value
        await agent.updatePower(isOnBattery: facts.isOnBattery)
    }

    /// Feeds UPower's facts to the download agent every `powerInterval` while any unfinished
    /// job waits for AC power (`--not-on-battery`); nothing is asked otherwise. Started once.
    func startPowerWatch() {
        guard powerWatch == nil else { return }
        let read = environment.power
        powerWatch = Task { [weak self] in
            while !Task.isCancelled {
                guard let self else { return }
                let agent = await self.agent
                if agent.downloadsNow.contains(where: { !$0.state.isFinal && $0.options.waitsForACPower }) {
                    // The read blocks for up to its bound: off the actor.
                    let facts = await Task.detached { read() }.value
                    await agent.updatePower(isOnBattery: facts.isOnBattery)
                }
                try? await Task.sleep(for: Self.powerInterval)
            }
        }
    }
}
