import FoundationEssentials
import LinuxReachability
import ResumableDownloads

extension AgentService {
    /// Reads UPower now and tells the download agent (before a `--not-on-battery` job is queued:
    /// it must not start on battery before the watch's first answer), then follows UPower.
    func refreshPower() async {
        let read = environment.power
        let facts = await Task.detached { read() }.value
        await agent.updatePower(isOnBattery: facts.isOnBattery)
        startPowerWatch(forJobBeingAdded: true)
    }

    /// Follows UPower (`PowerFactsWatch`: its `PropertiesChanged` signals, polling only where they
    /// cannot be subscribed) and feeds each change to the download agent, once a job waits for
    /// AC power (`--not-on-battery`, a discretionary background task); nothing is asked before.
    /// Started once; the changes reach the agent in order.
    func startPowerWatch(forJobBeingAdded: Bool = false) {
        guard powerWatch == nil, forJobBeingAdded
                || agent.downloadsNow.contains(where: { !$0.state.isFinal && $0.options.waitsForACPower }) else { return }
        let (changes, continuation) = AsyncStream.makeStream(of: PowerFacts.self, bufferingPolicy: .bufferingNewest(1))
        guard let watch = environment.watchPower({ continuation.yield($0) }) else { return }
        let relay = Task { [weak self] in
            for await facts in changes {
                guard let self else { return }
                await self.agent.updatePower(isOnBattery: facts.isOnBattery)
            }
        }
        powerWatch = (watch, relay)
    }

    /// Stops following UPower (the agent shuts down).
    func stopPowerWatch() {
        powerWatch?.watch.cancel()
        powerWatch?.relay.cancel()
        powerWatch = nil
    }
}
