import FoundationEssentials
import LinuxReachability
import ReachabilityBase

/// One-shot exchanges that follow the path: a request that starts without a usable path waits
/// for one (or fails at once with `-1009`), and one whose path goes away or moves (another
/// interface or source address) while it runs ends at once with `-1005`, instead of a `-1001`
/// once a timer runs out.
extension DownloadAgent {
    /// Sends `request` once and returns the response (any status: a 4xx/5xx is a response, not an
    /// error). Throws `DownloadError`: `-1005` when the path goes during the exchange, `-1009` when
    /// there is none and `waitsForConnectivity` is false, `-1001` after the request's idle
    /// timeout, `cancelled` when the task is cancelled, transport errors as downloads map them.
    package func exchange(_ request: ExchangeRequest, waitsForConnectivity: Bool = false,
                          handlers: ExchangeHandlers = ExchangeHandlers()) async throws(DownloadError) -> ExchangeResponse {
        try await exchangeOutcome(request, waitsForConnectivity: waitsForConnectivity, handlers: handlers).result.get()
    }

    /// `exchange`, with how many body bytes were handed to the connection also when it failed
    /// (what a resumable upload may have to resend).
    package func exchangeOutcome(_ request: ExchangeRequest, waitsForConnectivity: Bool = false,
                                 handlers: ExchangeHandlers = ExchangeHandlers()) async throws(DownloadError) -> (result: Result<ExchangeResponse, DownloadError>, bytesSent: Int64) {
        let outcome = try await exchangeReport(request, waitsForConnectivity: waitsForConnectivity, handlers: handlers)
        return (outcome.result, outcome.bytesSent)
    }

    /// `exchangeOutcome`, with what the connection showed of the server (whether it connected,
    /// how long that took): what a resumable upload reports to its host's server wait.
    func exchangeReport(_ request: ExchangeRequest, waitsForConnectivity: Bool = false,
                        handlers: ExchangeHandlers = ExchangeHandlers()) async throws(DownloadError) -> ExchangeOutcome {
        activate()
        guard !isShutDown else { throw DownloadError.invalidRequest.with(description: "the agent is shut down") }
        try request.validate()
        // The path this exchange starts on is the one the agent has read. On its first use the
        // agent has read none yet, and the paths waiting in its stream may be old (offline, then
        // online): an exchange started before them would take the first as a change and end with
        // -1005. So it starts only once the agent has read its first path.
        try await waitForFirstPath()
        // The route to the exchange's server (or proxy) gates it, as it gates downloads: a server
        // reached by a route of its own is asked at once on a machine without a default route.
        let host = gateHost(for: request.url, proxy: configuration.proxy)
        if let host { retainHostPaths(host) }
        defer { if let host { releaseHostPaths(host) } }
        try await waitForHostAnswer(host)
        if !hasUsablePath(toward: host) {
            guard waitsForConnectivity else {
                throw DownloadError.notConnectedToInternet.with(description:
                    "not connected: no usable network path to \(host ?? "the server") (set waitsForConnectivity to wait for one)")
            }
            handlers.waitingForConnectivity()
            while !hasUsablePath(toward: host) {
                guard await waitForNextPath() else { throw DownloadError.cancelled }
            }
        }
        guard !Task.isCancelled else { throw DownloadError.cancelled }
        let id = engine.makeTransferID()
        exchangePaths[id] = (host, pathWaiters.gatingPath(host: host).map(PathKey.init))
        defer { exchangePaths[id] = nil }
        let engine = engine
        let settings = settings
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<ExchangeOutcome, Never>) in
                let started = engine.exchange(id, request, settings: settings, handlers: handlers) { continuation.resume(returning: $0) }
                if !started {
                    continuation.resume(returning: ExchangeOutcome(
                        result: .failure(.invalidRequest.with(description: "the agent is shut down")), bytesSent: 0))
                }
            }
        } onCancel: {
            engine.abort(id, reason: .cancelled)
        }
        return outcome
    }

    /// Whether a request may be sent now: the path is satisfied, or no path source says otherwise.
    package var hasUsablePath: Bool { pathWaiters.path?.isSatisfied ?? true }

    /// `hasUsablePath` for a request to `host`: the route to that host when the agent follows
    /// hosts' routes (a destination route without a default one is usable), else the primary path.
    func hasUsablePath(toward host: String?) -> Bool {
        pathWaiters.gatingPath(host: host)?.isSatisfied ?? true
    }

    /// Waits until the route to `host` has been read once (at once when hosts are not followed);
    /// throws `cancelled` when the task is cancelled first.
    func waitForHostAnswer(_ host: String?) async throws(DownloadError) {
        while pathWaiters.gate(host: host) == .pending {
            guard await waitForNextPath() else { throw DownloadError.cancelled }
        }
    }

    /// Waits until the path is usable; throws `cancelled` when the task is cancelled first.
    package func waitForUsablePath() async throws(DownloadError) {
        activate()
        while !hasUsablePath {
            guard await waitForNextPath() else { throw DownloadError.cancelled }
        }
    }

    /// Waits until the agent has read a path from its source (at once when it has no source);
    /// throws `cancelled` when the task is cancelled first.
    func waitForFirstPath() async throws(DownloadError) {
        activate()
        while pathWaiters.hasPathSource, pathWaiters.path == nil {
            guard await waitForNextPath() else { throw DownloadError.cancelled }
        }
    }

    /// Waits for the next path the agent reads; false when the task is cancelled first.
    func waitForNextPath() async -> Bool {
        let id = engine.makeTransferID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                if Task.isCancelled {
                    continuation.resume(returning: false)
                } else {
                    connectivityWaiters[id] = continuation
                }
            }
        } onCancel: {
            Task { await self.stopWaiting(id) }
        }
    }

    private func stopWaiting(_ id: UInt64) {
        connectivityWaiters.removeValue(forKey: id)?.resume(returning: false)
    }

    /// A new path (the primary one, or a host's route): exchanges whose gating path is no longer
    /// the one they started on end (`-1005`); waiters look again (each waits for what it needs: a
    /// first path, a host's answer, a usable one).
    func exchangesFollowPaths() {
        for (id, started) in exchangePaths {
            guard let current = pathWaiters.gatingPath(host: started.host) else { continue }
            // Started with no path source: only losing the path ends it.
            let isLost = started.key.map { $0 != PathKey(current) } ?? !current.isSatisfied
            if isLost { engine.abort(id, reason: .pathChanged) }
        }
        let waiters = connectivityWaiters
        connectivityWaiters = [:]
        for waiter in waiters.values { waiter.resume(returning: true) }
    }
}
