// The few waits that are not for an event, each named for what it is, so that a suite holds no
// bare sleep: an outage's length (the link's absence is the scenario), a measuring window (the
// bytes counted over a span), and work that never ends (a stand-in the test expects to be cut
// off). Everything else waits for its event with `waitUntil(deadline:)`.

/// Keeps an outage going for `length`: the scenario is the link's absence, not a wait for an event.
public func holdOutage(for length: Duration) async throws {
    try await Task.sleep(for: length)
}

/// Lets `span` pass while a measurement counts what happens in it (bytes received, requests).
public func measuringWindow(_ span: Duration) async throws {
    try await Task.sleep(for: span)
}

/// Work that never finishes by itself: returns only when its task is cancelled (or after an
/// hour, longer than any test runs).
public func neverEndingWork() async {
    try? await Task.sleep(for: .seconds(3600))
}
