import Dispatch
import FoundationEssentials
import LinuxReachability
import LinuxSystem
import Synchronization
import ReachabilityBase

/// Accepts control connections on the agent's Unix socket.
///
/// One thread blocks in accept(2); each connection gets a thread that reads lines into a
/// `ControlConnectionStateMachine` and runs the commands through `handler`. Blocking threads
/// (not tasks) because reads block, and the cooperative pool is only as wide as the CPU count.
package final class ControlServer: Sendable {
    /// Runs one command and returns its reply; called from connection threads.
    package typealias Handler = @Sendable (ControlCommand, ControlRequestID?) async -> ControlResponse
    /// Told about refused peers and connection errors (for the agent's log).
    package typealias Observer = @Sendable (ControlServerEvent) -> Void

    package let path: String
    private let listener: FileDescriptor
    private let handler: Handler
    private let observer: Observer
    private let isStopped = Atomic<Bool>(false)
    private let admission = Mutex(ControlAdmission())
    /// A request line must arrive whole within this time from its first byte (a peer dripping a
    /// byte at a time cannot hold a connection by restarting a per-read timeout).
    package let requestDeadline: Duration
    /// A connection with no request in progress is closed after this long.
    package let idleTimeout: Duration

    /// Binds the socket (mode 0600) at `path`, replacing a stale one, and starts accepting.
    /// The caller must hold the state directory's lock, so the file cannot be another agent's.
    package init(path: String, requestDeadline: Duration = .seconds(10), idleTimeout: Duration = .seconds(60),
                 handler: @escaping Handler, observer: @escaping Observer) throws(Errno) {
        self.path = path
        self.requestDeadline = requestDeadline
        self.idleTimeout = idleTimeout
        self.handler = handler
        self.observer = observer
        try FileSystem.remove(path)
        let socket = try FileDescriptor.unixSocket()
        do {
            try socket.bindAndListen(unixPath: path, mode: 0o600)
        } catch {
            socket.close()
            throw error
        }
        listener = socket
        SystemThread.detach(name: "control-accept") { [self] in acceptLoop() }
    }

    /// Stops accepting and removes the socket file.
    package func stop() {
        guard !isStopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        listener.shutdown()
        try? FileSystem.remove(path)
    }

    private func acceptLoop() {
        while !isStopped.load(ordering: .acquiring) {
            let connection: FileDescriptor
            do {
                connection = try listener.accept()
            } catch {
                if isStopped.load(ordering: .acquiring) { break }
                if [.tooManyOpenFiles, .tooManyOpenFilesInSystem, .noBufferSpace, .outOfMemory].contains(error) {
                    observer(.error("accept: \(error)"))
                    CurrentProcess.sleep(milliseconds: 50)   // out of descriptors: back off instead of spinning on accept
                }
                continue
            }
            SystemThread.detach(name: "control-conn") { [self] in serve(connection) }
        }
        listener.close()
    }

    private func serve(_ connection: FileDescriptor) {
        defer { connection.close() }
        func reply(_ response: ControlResponse) -> Bool {
            (try? connection.sendAll(ControlCodec.encode(response) + [UInt8(ascii: "\n")])) != nil
        }
        // Only the agent's own user and root may talk to it; the 0700 directory already keeps
        // others out, this holds even if someone loosens the permissions.
        guard let credentials = try? connection.peerCredentials() else { return }
        let ownUID = CurrentProcess.effectiveUserID
        guard credentials.uid == ownUID || credentials.uid == 0 else {
            observer(.refused(credentials))
            _ = reply(.failure(.refused(uid: credentials.uid), id: nil))
            return
        }
        guard admission.withLock({ $0.admit(uid: credentials.uid) }) else {
            _ = reply(.failure(.failed("too many control connections from uid \(credentials.uid)"), id: nil))
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
                    _ = reply(.failure(.failed("request not completed within \(requestDeadline) of its first byte"), id: nil))
                }
                return
            }
            let remaining = deadline - now
            let milliseconds = max(1, remaining.milliseconds)
            try? connection.setReceiveTimeout(milliseconds: Int(milliseconds))
            let bytes: [UInt8]
            do {
                bytes = try connection.receive()
            } catch where error == .wouldBlock {
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
                    guard reply(wait { await self.handler(command, id) }) else { return }
                case .reply(let response):
                    observer(.rejected(response.error ?? .failed("rejected"), credentials))
                    guard reply(response) else { return }
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
package struct ControlAdmission: Sendable, Equatable {
    package var perUser = 16
    package var shared = 32
    package var reservedForRoot = 4
    private(set) var open: [UInt32: Int] = [:]

    /// Takes a slot for `uid`; false when its share is used up.
    package mutating func admit(uid: UInt32) -> Bool {
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
    package mutating func release(uid: UInt32) {
        guard let held = open[uid] else { return }
        open[uid] = held > 1 ? held - 1 : nil
    }
}

/// Things the control server reports to the agent's log.
package enum ControlServerEvent: Sendable {
    /// A peer with another uid connected and was refused.
    case refused(PeerCredentials)
    /// A valid request from a peer.
    case request(ControlCommand, PeerCredentials)
    /// A request answered with an error without being handled (malformed, too large).
    case rejected(ControlError, PeerCredentials)
    /// Something went wrong with the socket itself.
    case error(String)
}
