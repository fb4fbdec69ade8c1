import FoundationEssentials
import Glibc
import Synchronization

/// One connectivity check at a time, driven by the monitor thread's poll(2) loop: a
/// non-blocking socket bound to the path's primary interface and source address, the request,
/// and the answer read into `ProbeResponseParser`. Never blocks the monitor: host names are
/// resolved on a helper thread that wakes the loop when it is done.
///
/// Confined to the monitor thread (it is a local of the loop); only the resolver's result box
/// crosses threads.
final class ConnectivityProbe {
    private let check: ConnectivityCheck
    private let wake: WakeSignal
    private let logger: Logger

    private enum Phase {
        case idle
        case resolving(Resolution)
        case connecting(Int32, Syscalls.SocketAddress, PathRoute)
        case sending(Int32, Syscalls.SocketAddress, PathRoute, sent: Int)
        case receiving(Int32, Syscalls.SocketAddress, PathRoute, ProbeResponseParser)
    }

    private var phase = Phase.idle
    private var id = 0
    private var target = ConnectivityScheduler.Target(routes: [])
    private var started = ContinuousClock.now
    private(set) var deadline: ContinuousClock.Instant?
    /// A resolver thread still running from an earlier check (getaddrinfo cannot be cancelled).
    private var straggler: Resolution?
    private let request: [UInt8]

    /// Where a helper thread leaves getaddrinfo's answer.
    final class Resolution: Sendable {
        let result = Mutex<Result<[Syscalls.SocketAddress], Syscalls.ResolveFailure>?>(nil)
        var isDone: Bool { result.withLock { $0 != nil } }
    }

    init(check: ConnectivityCheck, wake: WakeSignal, logger: Logger) {
        self.check = check
        self.wake = wake
        self.logger = logger
        request = check.target.request()
    }

    deinit { closeSocket() }

    var isIdle: Bool { if case .idle = phase { return true } else { return false } }

    /// The socket to poll and for what, while one is open.
    var pollRequest: pollfd? {
        switch phase {
        case .connecting(let fd, _, _), .sending(let fd, _, _, _): return pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        case .receiving(let fd, _, _, _): return pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        case .idle, .resolving: return nil
        }
    }

    /// Starts check `id` over `target`, abandoning any check in flight.
    func start(id: Int, target: ConnectivityScheduler.Target, at now: ContinuousClock.Instant) -> (Int, ConnectivityScheduler.Outcome)? {
        cancel()
        self.id = id
        self.target = target
        started = now
        deadline = now + check.timeout
        let host = check.target.host
        if let literal = IPAddress.parse(host), let address = Syscalls.SocketAddress(address: literal, port: check.target.port) {
            return connect(to: [address])
        }
        if let straggler, !straggler.isDone {
            return finish(.limited, "DNS lookup of \(host) from an earlier check still running")
        }
        let resolution = Resolution()
        let port = check.target.port
        let wake = self.wake
        // A thread inherits the network namespace of the thread that creates it, so the lookup
        // runs in the monitored namespace like the probe itself.
        SystemThread.detach(name: "resolver") {
            let answer = Syscalls.resolve(host: host, port: port)
            resolution.result.withLock { $0 = answer }
            wake.signal()
        }
        straggler = resolution
        phase = .resolving(resolution)
        return nil
    }

    func cancel() {
        closeSocket()
        phase = .idle
        deadline = nil
    }

    /// Moves the check on after poll(2): `events` are the socket's revents (0 when it was not
    /// polled or not ready). Returns the outcome once the check is over.
    func advance(events: Int16, at now: ContinuousClock.Instant) -> (Int, ConnectivityScheduler.Outcome)? {
        if let deadline, now >= deadline { return timedOut() }
        switch phase {
        case .idle:
            return nil
        case .resolving(let resolution):
            guard let answer = resolution.result.withLock({ $0 }) else { return nil }
            switch answer {
            case .failure(let failure):
                return finish(.limited, "cannot resolve \(check.target.host): \(failure.message)")
            case .success(let addresses):
                return connect(to: addresses)
            }
        case .connecting(let fd, let address, let route):
            guard events != 0 else { return nil }
            if let error = Syscalls.pendingError(fd) { return failed(error, connecting: address, route) }
            phase = .sending(fd, address, route, sent: 0)
            return send()
        case .sending:
            guard events != 0 else { return nil }
            return send()
        case .receiving(let fd, let address, let route, var parser):
            guard events != 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            let result = buffer.withUnsafeMutableBytes { Syscalls.receive(fd, into: $0) }
            let progress: ProbeResponseParser.Progress
            switch result {
            case .success(0):
                progress = parser.finish()
            case .success(let count):
                progress = parser.consume(buffer[0..<count])
            case .failure(let error) where error == .wouldBlock:
                return nil
            case .failure(let error):
                // A reset after a complete enough answer still counts as that answer.
                if case .complete = parser.finish() { progress = parser.finish() } else { return failed(error, connecting: nil, route, peer: address) }
            }
            switch progress {
            case .needMore:
                phase = .receiving(fd, address, route, parser)
                return nil
            case .malformed(let reason):
                return finish(.limited, "unusable answer from \(address.text) via \(describe(route)): \(reason)")
            case .complete(let response):
                let (connectivity, portal) = ConnectivityClassifier.classify(
                    response, expected: check.expectedBody, probe: check.target, url: check.url)
                var answer = "HTTP \(response.status)"
                if response.isMarkedOnline { answer += " with X-NetworkManager-Status: online" }
                if let portal { answer += " (portal at \(portal))" }
                if connectivity == .limited { answer += " (an error status: the check server failed, not the network)" }
                answer += " from \(address.text) via \(describe(route)) in \(milliseconds(now - started)) ms"
                return finish(connectivity, answer, portal: portal)
            }
        }
    }

    // MARK: Steps

    private func connect(to addresses: [Syscalls.SocketAddress]) -> (Int, ConnectivityScheduler.Outcome)? {
        // A check server on this host (a local proxy, a test) is reached over loopback: bound to
        // the primary interface and its address, the connection could never be made, and the
        // check would only ever say "no answer".
        if let address = addresses.first(where: { IPAddress.isLoopback($0.address) }) {
            let loopback = PathRoute(family: address.family, interfaceName: "lo", interfaceIndex: 0, gateway: nil, sourceAddress: nil)
            return connect(to: address, over: loopback, binding: false)
        }
        // The first address of a family the path routes, in the resolver's order.
        guard let (address, route) = addresses.lazy.compactMap({ address in
            self.target.routes.first { $0.family == address.family }.map { (address, $0) }
        }).first else {
            let families = Set(addresses.map(\.family.rawValue)).sorted().joined(separator: ", ")
            return finish(.limited, addresses.isEmpty
                          ? "\(check.target.host) has no addresses"
                          : "no route for \(check.target.host)'s addresses (\(families))")
        }
        return connect(to: address, over: route, binding: true)
    }

    /// Opens the socket and connects; with `binding`, to the route's interface and source address
    /// so the check tests the path that was just reported.
    private func connect(to address: Syscalls.SocketAddress, over route: PathRoute,
                         binding: Bool) -> (Int, ConnectivityScheduler.Outcome)? {
        let fd: Int32
        switch Syscalls.openStreamSocket(address.family) {
        case .success(let opened): fd = opened
        case .failure(let error): return finish(.limited, "cannot open a socket: \(error)")
        }
        if binding, let error = Syscalls.bindToDevice(fd, interface: route.interfaceName) {
            // Unprivileged before Linux 5.7: the source address below still picks the path.
            logger.debug("connectivity check not bound to its interface", metadata: ["interface": route.interfaceName, "error": "\(error)"])
        }
        if binding, let source = route.sourceAddress.flatMap(IPAddress.parse), let local = Syscalls.SocketAddress(address: source, port: 0),
           let error = Syscalls.bind(fd, to: local) {
            Syscalls.close(fd)
            return finish(.limited, "cannot bind to \(route.sourceAddress ?? "?") on \(route.interfaceName): \(error)")
        }
        if let error = Syscalls.connect(fd, to: address) {
            guard error == .inProgress else {
                Syscalls.close(fd)
                return finish(.limited, describe(error, address, route))
            }
            phase = .connecting(fd, address, route)
            return nil
        }
        phase = .sending(fd, address, route, sent: 0)
        return send()
    }

    private func send() -> (Int, ConnectivityScheduler.Outcome)? {
        guard case .sending(let fd, let address, let route, let sent) = phase else { return nil }
        switch Syscalls.send(fd, request[sent...]) {
        case .success(let count) where sent + count >= request.count:
            phase = .receiving(fd, address, route, ProbeResponseParser(bodyLimit: check.expectedBody.count))
        case .success(let count):
            phase = .sending(fd, address, route, sent: sent + count)
        case .failure(let error) where error == .wouldBlock:
            break
        case .failure(let error):
            return failed(error, connecting: nil, route, peer: address)
        }
        return nil
    }

    private func timedOut() -> (Int, ConnectivityScheduler.Outcome) {
        let total = milliseconds(check.timeout)
        let seconds = total % 1000 == 0 ? "\(total / 1000)" : "\(Double(total) / 1000)"
        let stage: String
        switch phase {
        case .resolving: stage = "resolving \(check.target.host)"
        case .connecting(_, let address, let route): stage = "connecting to \(address.text) via \(describe(route))"
        case .sending(_, let address, let route, _): stage = "sending to \(address.text) via \(describe(route))"
        case .receiving(_, let address, let route, _): stage = "waiting for \(address.text) via \(describe(route)) to answer"
        case .idle: stage = "starting"
        }
        return finish(.limited, "no answer within \(seconds) s (\(stage))")!
    }

    private func failed(_ error: Syscalls.Errno, connecting address: Syscalls.SocketAddress?, _ route: PathRoute,
                        peer: Syscalls.SocketAddress? = nil) -> (Int, ConnectivityScheduler.Outcome)? {
        finish(.limited, describe(error, address ?? peer, route))
    }

    private func describe(_ error: Syscalls.Errno, _ address: Syscalls.SocketAddress?, _ route: PathRoute) -> String {
        let peer = address?.text ?? "the probe server"
        switch error.code {
        case ECONNREFUSED: return "connection refused by \(peer) via \(describe(route))"
        case ECONNRESET: return "connection reset by \(peer) via \(describe(route))"
        case ENETUNREACH, EHOSTUNREACH: return "\(peer) unreachable via \(describe(route)): \(error)"
        default: return "\(peer) via \(describe(route)): \(error)"
        }
    }

    private func describe(_ route: PathRoute) -> String {
        route.sourceAddress.map { "\(route.interfaceName) (\($0))" } ?? route.interfaceName
    }

    private func finish(_ connectivity: Connectivity, _ answer: String, portal: String? = nil) -> (Int, ConnectivityScheduler.Outcome)? {
        cancel()
        return (id, ConnectivityScheduler.Outcome(connectivity: connectivity, portalURL: portal, answer: answer))
    }

    private func closeSocket() {
        switch phase {
        case .connecting(let fd, _, _), .sending(let fd, _, _, _), .receiving(let fd, _, _, _): Syscalls.close(fd)
        case .idle, .resolving: break
        }
    }

    private func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}
