#if canImport(Glibc)
import Glibc
#endif

/// The tests' one way to wait for a state they cannot be told about: check `condition` every
/// `interval` until it holds or `deadline` passes, and answer whether it held (checked once more
/// at the deadline, so a slow machine that gets there late still sees the state). Never a fixed
/// sleep: the wait ends as soon as the condition holds.
public func waitUntil(deadline: ContinuousClock.Instant, every interval: Duration = .milliseconds(5),
                      _ condition: () async throws -> Bool) async rethrows -> Bool {
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        if interval > .zero { try? await Task.sleep(for: min(interval, max(deadline - .now, .zero))) }
    }
    return try await condition()
}

/// `waitUntil(deadline:)` for synchronous code (checks on processes, files and sockets from a
/// test that is not async); it blocks the calling thread, so async code uses `waitUntil`. Named
/// apart because an async caller's plain closure would otherwise pick this overload. An
/// `interval` of zero suits a condition that blocks by itself for a while (a `recv` with a
/// receive timeout, a `poll`).
public func waitUntilBlocking(deadline: ContinuousClock.Instant, every interval: Duration = .milliseconds(5),
                      _ condition: () throws -> Bool) rethrows -> Bool {
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        let pause = min(interval, max(deadline - .now, .zero))
        if pause > .zero { usleep(useconds_t(pause / .microseconds(1))) }
    }
    return try condition()
}

/// The older name of `waitUntil(deadline:)` with a timeout; kept as a thin forward because many
/// suites (and other branches) call it.
public enum Polling {
    /// Whether `condition` holds within `timeout`, checked every 5 ms.
    public static func wait(timeout: Duration = .seconds(20), _ condition: @Sendable () async -> Bool) async -> Bool {
        await waitUntil(deadline: .now + timeout, condition)
    }
}
