import Dispatch
import FoundationEssentials
import LinuxReachability
import Glibc
import Synchronization

/// Accepts control connections on the agent's Unix socket.
///
/// One thread blocks in accept(2); each connection gets a thread that reads lines into a
/// `ControlConnectionStateMachine` and runs the commands through `handler`. Blocking threads
/// (not tasks) because reads block, and the cooperative pool is only as wide as the CPU count.
final class ControlServer: Sendable {
    /// Runs one command and returns its reply; called from connection threads.
    typealias Handler = @Sendable (ControlCommand, ControlRequestID?) async -> ControlResponse
    /// Told about refused peers and connection errors (for the agent's log).
    typealias Observer = @Sendable (ControlServerEvent) -> Void

    let path: String
    private let listener: Int32
    /// Whether systemd passed the listening socket (socket activation): it owns the socket and
    /// its file, so stopping leaves both alone.
    let isInherited: Bool
    private let handler: Handler
    private let observer: Observer
    private let isStopped = Atomic<Bool>(false)
    private let admission = Mutex(ControlAdmission())
    /// A request line must arrive whole within this time from its first byte (a peer dripping a
    /// byte at a time cannot hold a connection by restarting a per-read timeout).
    let requestDeadline: Duration
    /// A connection with no request in progress is closed after this long.
    let idleTimeout: Duration

    /// Binds the socket (mode 0600) at `path`, replacing a stale one, and starts accepting.
    /// The caller must hold the state directory's lock, so the file cannot be another agent's.
    convenience init(path: String, requestDeadline: Duration = .seconds(10), idleTimeout: Duration = .seconds(60),
                     handler: @escaping Handler, observer: @escaping Observer) throws {
        unlink(path)
        let descriptor = try UnixSocketSyscalls.makeSocket(SOCK_STREAM)
        do {
            try UnixSocketSyscalls.bindAndListen(descriptor, path: path, mode: 0o600)
        } catch {
            UnixSocketSyscalls.close(descriptor)
            throw error
        }
        self.init(listener: descriptor, path: path, isInherited: false, requestDeadline: requestDeadline,
                  idleTimeout: idleTimeout, handler: handler, observer: observer)
    }

    /// Serves a listening socket bound at `path`: one systemd passed (`isInherited`), or one
    /// this process bound.
    init(listener: Int32, path: String, isInherited: Bool, requestDeadline: Duration = .seconds(10),
         idleTimeout: Duration = .seconds(60), handler: @escaping Handler, observer: @escaping Observer) {
        self.path = path
        self.listener = listener
        self.isInherited = isInherited
        self.requestDeadline = requestDeadline
        self.idleTimeout = idleTimeout
        self.handler = handler
        self.observer = observer
        SystemThread.detach(name: "control-accept") { [self] in acceptLoop() }
    }

    /// Stops accepting and removes the socket file. An inherited socket is neither shut down
    /// (that would break it for systemd too, which holds the same socket and starts the agent
    /// again on the next connection) nor removed; the accept thread ends with the process, and
    /// closes what it accepts from now on, so those clients are told at once.
    func stop() {
        guard !isStopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        guard !isInherited else { return }
        UnixSocketSyscalls.shutdownBoth(listener)
        unlink(path)
    }

    private func acceptLoop() {
        while !isStopped.load(ordering: .acquiring) {
            let connection: Int32
            do {
                connection = try UnixSocketSyscalls.accept(listener)
            } catch {
                if isStopped.load(ordering: .acquiring) { break }
                if error.number == EMFILE || error.number == ENFILE || error.number == ENOBUFS || error.number == ENOMEM {
                    observer(.error("accept: \(error)"))
                    usleep(50_000)   // out of descriptors: back off instead of spinning on accept
                }
                continue
            }
            guard !isStopped.load(ordering: .acquiring) else {
                UnixSocketSyscalls.close(connection)
                break
            }
            SystemThread.detach(name: "control-conn") { [self] in serve(connection) }
        }
        UnixSocketSyscalls.close(listener)
    }

    private func serve(_ connection: Int32) {
        defer { UnixSocketSyscalls.close(connection) }
        func send(_ response: ControlResponse) -> Bool {
            (try? UnixSocketSyscalls.writeAll(connection, ControlCodec.encode(response) + [UInt8(ascii: "\n")])) != nil
        }
        // Only the agent's own user and root may talk to it; the 0700 directory already keeps
        // others out, this holds even if someone loosens the permissions.
        guard let credentials = try? UnixSocketSyscalls.peerCredentials(connection) else { return }
        let ownUID = geteuid()
        guard credentials.uid == ownUID || credentials.uid == 0 else {
            observer(.refused(credentials))
            _ = send(.failure(.refused(uid: credentials.uid), id: nil))
            return
        }
        guard admission.withLock({ $0.admit(uid: credentials.uid) }) else {
            _ = send(.failure(.failed("too many control connections from uid \(credentials.uid)"), id: nil))
            return
        }
        defer { admission.withLock { $0.release(uid: credentials.uid) } }
        var machine = ControlConnectionStateMachine()
        var requestStarted: ContinuousClock.Instant?
        var idleSince = ContinuousClock.now
        while true {
            let now = ContinuousClock.now
            let deadline = requestStarted.map { $0 + requestDeadline } ?? idleSince + idleTimeout
            guard deadline > now else {
                if requestStarted != nil {
                    _ = send(.failure(.failed("request not completed within \(requestDeadline) of its first byte"), id: nil))
                }
                return
            }
            let remaining = deadline - now
            let milliseconds = max(1, remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000)
            try? UnixSocketSyscalls.setReceiveTimeout(connection, milliseconds: Int(milliseconds))
            let bytes: [UInt8]
            do {
                bytes = try UnixSocketSyscalls.read(connection)
            } catch where error.number == EAGAIN || error.number == EWOULDBLOCK {
                continue   // the deadline check above answers and closes
            } catch {
                bytes = []
            }
            let wasInsideRequest = machine.isInsideRequest
            let actions = bytes.isEmpty ? machine.endOfInput() : machine.received(bytes)
            if !wasInsideRequest, !bytes.isEmpty { requestStarted = .now }
            if !machine.isInsideRequest { requestStarted = nil }
            if !actions.isEmpty { idleSince = .now }
            for action in actions {
                switch action {
                case .handle(let id, let command):
                    observer(.request(command, credentials))
                    guard send(wait { await self.handler(command, id) }) else { return }
                case .reply(let response):
                    observer(.rejected(response.error ?? .failed("rejected"), credentials))
                    guard send(response) else { return }
                case .close:
                    return
                }
            }
        }
    }

    /// Runs async work from a plain thread and blocks that thread (never a pool thread) for it.
    private func wait(_ work: @escaping @Sendable () async -> ControlResponse) -> ControlResponse {
        let semaphore = DispatchSemaphore(value: 0)
        let result = Mutex<ControlResponse?>(nil)
        Task {
            let response = await work()
            result.withLock { $0 = response }
            semaphore.signal()
        }
        semaphore.wait()
        return result.withLock { $0 } ?? .failure(.failed("no reply"), id: nil)
    }
}

/// How many control connections each uid may hold. The agent's user cannot fill every slot:
/// root always has `reservedForRoot` of its own (to inspect or stop a flooded agent), and no
/// other uid may hold more than `perUser`. Pure: tested without sockets.
struct ControlAdmission: Sendable, Equatable {
    var perUser = 16
    var shared = 32
    var reservedForRoot = 4
    private(set) var open: [UInt32: Int] = [:]

    /// Takes a slot for `uid`; false when its share is used up.
    mutating func admit(uid: UInt32) -> Bool {
        let held = open[uid, default: 0]
        let others = open.filter { $0.key != 0 }.values.reduce(0, +)
        if uid == 0 {
            guard held < reservedForRoot || others + held < shared else { return false }
        } else {
            guard held < perUser, others < shared else { return false }
        }
        open[uid] = held + 1
        return true
    }

    /// Gives back a slot taken by `admit`.
    mutating func release(uid: UInt32) {
        guard let held = open[uid] else { return }
        open[uid] = held > 1 ? held - 1 : nil
    }
}

/// Things the control server reports to the agent's log.
enum ControlServerEvent: Sendable {
    /// A peer with another uid connected and was refused.
    case refused(UnixSocketSyscalls.PeerCredentials)
    /// A valid request from a peer.
    case request(ControlCommand, UnixSocketSyscalls.PeerCredentials)
    /// A request answered with an error without being handled (malformed, too large).
    case rejected(ControlError, UnixSocketSyscalls.PeerCredentials)
    /// Something went wrong with the socket itself.
    case error(String)
}
