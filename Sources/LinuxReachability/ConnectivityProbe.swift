import FoundationEssentials
import LinuxSystem
import Synchronization
import ReachabilityBase

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
        case connecting(FileDescriptor, SocketAddress, PathRoute)
        case sending(FileDescriptor, SocketAddress, PathRoute, sent: Int)
        case receiving(FileDescriptor, SocketAddress, PathRoute, ProbeResponseParser)
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
        let result = Mutex<Result<[SocketAddress], SocketAddress.ResolveFailure>?>(nil)
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
    var pollRequest: PollEntry? {
        switch phase {
        case .connecting(let socket, _, _), .sending(let socket, _, _, _): return PollEntry(socket, .writable)
        case .receiving(let socket, _, _, _): return PollEntry(socket, .readable)
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
        if let literal = IPAddress.parse(host), let address = SocketAddress(ipAddress: literal, port: check.target.port) {
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
            let answer = SocketAddress.resolve(host: host, port: port)
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

    /// Moves the check on after poll(2): `isReady` is whether its socket was polled and ready.
    /// Returns the outcome once the check is over.
    func advance(isReady: Bool, at now: ContinuousClock.Instant) -> (Int, ConnectivityScheduler.Outcome)? {
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
        case .connecting(let socket, let address, let route):
            guard isReady else { return nil }
            let pending: Errno?
            do { pending = try socket.pendingConnectionError() } catch { pending = error }
            if let error = pending { return failed(error, connecting: address, route) }
            phase = .sending(socket, address, route, sent: 0)
            return send()
        case .sending:
            guard isReady else { return nil }
            return send()
        case .receiving(let socket, let address, let route, var parser):
            guard isReady else { return nil }
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            let result = buffer.withUnsafeMutableBytes { raw in Result { () throws(Errno) in try socket.receive(into: raw) } }
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
                phase = .receiving(socket, address, route, parser)
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
                answer += " from \(address.text) via \(describe(route)) in \((now - started).milliseconds) ms"
                return finish(connectivity, answer, portal: portal)
            }
        }
    }

    // MARK: Steps

    private func connect(to addresses: [SocketAddress]) -> (Int, ConnectivityScheduler.Outcome)? {
        // A check server on this host (a local proxy, a test) is reached over loopback: bound to
        // the primary interface and its address, the connection could never be made, and the
        // check would only ever say "no answer".
        if let address = addresses.first(where: { IPAddress.isLoopback($0.ipAddress ?? []) }) {
            let loopback = PathRoute(family: address.addressFamily, interfaceName: "lo", interfaceIndex: 0, gateway: nil, sourceAddress: nil)
            return connect(to: address, over: loopback, binding: false)
        }
        // The first address of a family the path routes, in the resolver's order.
        guard let (address, route) = addresses.lazy.compactMap({ address in
            self.target.routes.first { $0.family == address.addressFamily }.map { (address, $0) }
        }).first else {
            let families = Set(addresses.map(\.addressFamily.rawValue)).sorted().joined(separator: ", ")
            return finish(.limited, addresses.isEmpty
                          ? "\(check.target.host) has no addresses"
                          : "no route for \(check.target.host)'s addresses (\(families))")
        }
        return connect(to: address, over: route, binding: true)
    }

    /// Opens the socket and connects; with `binding`, to the route's interface and source address
    /// so the check tests the path that was just reported.
    private func connect(to address: SocketAddress, over route: PathRoute,
                         binding: Bool) -> (Int, ConnectivityScheduler.Outcome)? {
        let socket: FileDescriptor
        do {
            socket = try FileDescriptor.tcpSocket(address.family, nonBlocking: true)
        } catch {
            return finish(.limited, "cannot open a socket: \(error)")
        }
        if binding {
            do {
                try socket.bindToDevice(route.interfaceName)
            } catch {
                // Unprivileged before Linux 5.7: the source address below still picks the path.
                logger.debug("connectivity check not bound to its interface", metadata: ["interface": route.interfaceName, "error": "\(error)"])
            }
        }
        if binding, let source = route.sourceAddress.flatMap(IPAddress.parse), let local = SocketAddress(ipAddress: source, port: 0) {
            do {
                try socket.bind(to: local)
            } catch {
                socket.close()
                return finish(.limited, "cannot bind to \(route.sourceAddress ?? "?") on \(route.interfaceName): \(error)")
            }
        }
        do {
            try socket.connect(to: address)
        } catch {
            // Interrupted or in progress: the connection goes on; poll says when it is made.
            guard error == .inProgress || error == .interrupted else {
                socket.close()
                return finish(.limited, describe(error, address, route))
            }
            phase = .connecting(socket, address, route)
            return nil
        }
        phase = .sending(socket, address, route, sent: 0)
        return send()
    }

    private func send() -> (Int, ConnectivityScheduler.Outcome)? {
        guard case .sending(let socket, let address, let route, let sent) = phase else { return nil }
        let result = request[sent...].withUnsafeBytes { raw in Result { () throws(Errno) in try socket.send(raw) } }
        switch result {
        case .success(let count) where sent + count >= request.count:
            phase = .receiving(socket, address, route, ProbeResponseParser(bodyLimit: check.expectedBody.count))
        case .success(let count):
            phase = .sending(socket, address, route, sent: sent + count)
        case .failure(let error) where error == .wouldBlock:
            break
        case .failure(let error):
            return failed(error, connecting: nil, route, peer: address)
        }
        return nil
    }

    private func timedOut() -> (Int, ConnectivityScheduler.Outcome) {
        let seconds = check.timeout.formattedSeconds
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

    private func failed(_ error: Errno, connecting address: SocketAddress?, _ route: PathRoute,
                        peer: SocketAddress? = nil) -> (Int, ConnectivityScheduler.Outcome)? {
        finish(.limited, describe(error, address ?? peer, route))
    }

    private func describe(_ error: Errno, _ address: SocketAddress?, _ route: PathRoute) -> String {
        let peer = address?.text ?? "the probe server"
        switch error {
        case .connectionRefused: return "connection refused by \(peer) via \(describe(route))"
        case .connectionReset: return "connection reset by \(peer) via \(describe(route))"
        case .networkUnreachable, .hostUnreachable: return "\(peer) unreachable via \(describe(route)): \(error)"
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
        case .connecting(let socket, _, _), .sending(let socket, _, _, _), .receiving(let socket, _, _, _): socket.close()
        case .idle, .resolving: break
        }
    }
}
