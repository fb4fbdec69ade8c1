/// The tests' one way to wait for a state they cannot be told about: check `condition` every
/// 5 ms until it holds or `timeout` passes, and answer whether it held. Never a fixed sleep.
public enum Polling {
    public static func wait(timeout: Duration = .seconds(20), _ condition: @Sendable () async -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return await condition()
    }
}
