import Dispatch
import FoundationEssentials
import LinuxReachability
import LinuxSystem
import ReachabilityBase
import ResumableDownloads
import Synchronization

/// Accepts control connections on the agent's Unix socket.
///
/// One thread blocks in accept(2); each connection gets a thread that reads lines into a
/// `ControlConnectionStateMachine` and runs the commands through `handler`. Blocking threads
/// (not tasks) because reads block, and the cooperative pool is only as wide as the CPU count.
package final class ControlServer: Sendable {
    /// Runs one command from `peer` and returns its reply, or nil when it has sent it itself
    /// (an attach, whose reply must precede the events it pushes); called from connection threads.
    package typealias Handler = @Sendable (ControlCommand, ControlRequestID?, ControlPeer) async -> ControlResponse?
    /// Answers a request at once on the connection's thread, without the cooperative pool or
    /// the service actor (`status`, `list`), or returns nil to leave it to the `Handler`.
    package typealias Immediate = @Sendable (ControlCommand, ControlRequestID?, ControlPeer) -> ControlResponse?
    /// Told when a connection ends (an attached session is then detached).
    package typealias Closed = @Sendable (ControlPeer) async -> Void
    /// Told about refused peers and connection errors (for the agent's log).
    package typealias Observer = @Sendable (ControlServerEvent) -> Void

    package let path: String
    private let listener: FileDescriptor
    /// Whether systemd passed the listening socket (socket activation): it owns the socket and
    /// its file, so stopping leaves both alone.
    package let isInherited: Bool
    private let handler: Handler
    private let immediate: Immediate?
    private let closed: Closed
    private let observer: Observer
    private let nextPeerID = Atomic<UInt64>(0)
    private let isStopped = Atomic<Bool>(false)
    /// The nice value the accept thread started with (the process's), for work handed to the pool.
    private let normalNice = Atomic<Int32>(0)
    private let admission = AdmissionBox()
    /// A request line must arrive whole within this time from its first byte (a peer dripping a
    /// byte at a time cannot hold a connection by restarting a per-read timeout).
    package let requestDeadline: Duration
    /// A connection with no request in progress is closed after this long.
    package let idleTimeout: Duration
    /// The nice value of the accept thread and the connection threads it starts (nil: left
    /// as is). A `status` or a page is under a millisecond of CPU; under load its latency was
    /// the time its thread waited for a CPU beside the downloads' threads (issue 29).
    package let threadNice: Int32?

    /// Binds the socket (mode 0600) at `path`, replacing a stale one, and starts accepting.
    /// The caller must hold the state directory's lock, so the file cannot be another agent's.
    package convenience init(path: String, requestDeadline: Duration = .seconds(10), idleTimeout: Duration = .seconds(60),
                             threadNice: Int32? = nil, immediate: Immediate? = nil, handler: @escaping Handler,
                             closed: @escaping Closed = { _ in }, observer: @escaping Observer) throws(Errno) {
        try FileSystem.remove(path)
        let socket = try FileDescriptor.unixSocket()
        do {
            try socket.bindAndListen(unixPath: path, mode: 0o600)
        } catch {
            socket.close()
            throw error
        }
        self.init(listener: socket, path: path, isInherited: false, requestDeadline: requestDeadline,
                  idleTimeout: idleTimeout, threadNice: threadNice, immediate: immediate, handler: handler, closed: closed,
                  observer: observer)
    }

    /// Serves a listening socket bound at `path`: one systemd passed (`isInherited`), or one
    /// this process bound.
    package init(listener: FileDescriptor, path: String, isInherited: Bool, requestDeadline: Duration = .seconds(10),
                 idleTimeout: Duration = .seconds(60), threadNice: Int32? = nil, immediate: Immediate? = nil,
                 handler: @escaping Handler,
                 closed: @escaping Closed = { _ in },
                 observer: @escaping Observer) {
        self.path = path
        self.listener = listener
        self.isInherited = isInherited
        self.requestDeadline = requestDeadline
        self.idleTimeout = idleTimeout
        self.threadNice = threadNice
        self.handler = handler
        self.immediate = immediate
        self.closed = closed
        self.observer = observer
        SystemThread.detach(name: "control-accept") { [self] in acceptLoop() }
    }

    /// Stops accepting and removes the socket file. An inherited socket is neither shut down
    /// (that would break it for systemd too, which holds the same socket and starts the agent
    /// again on the next connection) nor removed; the accept thread ends with the process, and
    /// closes what it accepts from now on, so those clients are told at once.
    package func stop() {
        guard !isStopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        guard !isInherited else { return }
        listener.shutdown()
        try? FileSystem.remove(path)
    }

    private func acceptLoop() {
        if let threadNice {
            normalNice.store(CurrentProcess.currentThreadNice, ordering: .relaxed)
            // Inherited by every connection thread started from here.
            do {
                try CurrentProcess.setCurrentThreadNice(threadNice)
                observer(.threadPriority(nice: threadNice, refused: nil))
            } catch {
                observer(.threadPriority(nice: threadNice, refused: error))
            }
        }
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
            guard !isStopped.load(ordering: .acquiring) else {
                connection.close()
                break
            }
            let acceptedAt = ContinuousClock.now
            SystemThread.detach(name: "control-conn") { [self] in serve(connection, acceptedAt: acceptedAt) }
        }
        listener.close()
    }

    private func serve(_ connection: FileDescriptor, acceptedAt: ContinuousClock.Instant) {
        // Only the agent's own user and root may talk to it; the 0700 directory already keeps
        // others out, this holds even if someone loosens the permissions.
        guard let credentials = try? connection.peerCredentials() else { connection.close(); return }
        let peer = ControlPeer(id: nextPeerID.add(1, ordering: .relaxed).newValue, credentials: credentials, socket: connection,
                               promote: { [admission] in admission.withLock { $0.promote(uid: credentials.uid, program: credentials.pid) } })
        // A reply that stays unread this long drops the peer (its slot is freed): a program that
        // writes requests and never reads cannot hold a serving thread and a slot for ever.
        try? connection.setSendTimeout(milliseconds: ControlPeer.plainSendTimeout)
        defer { peer.finish() }
        let ownUID = CurrentProcess.effectiveUserID
        guard credentials.uid == ownUID || credentials.uid == 0 else {
            observer(.refused(credentials))
            _ = peer.send(.failure(.refused(uid: credentials.uid), id: nil))
            return
        }
        guard admission.withLock({ $0.admit(uid: credentials.uid, program: credentials.pid) }) else {
            _ = peer.send(.failure(.failed("too many control connections from uid \(credentials.uid) (pid \(credentials.pid)); close some, or read their replies"), id: nil))
            return
        }
        defer {
            admission.withLock { $0.release(uid: credentials.uid, program: credentials.pid, attached: peer.isStreaming) }
            wait { await self.closed(peer) }
        }
        readRequests(from: connection, peer: peer, acceptedAt: acceptedAt)
    }

    /// Reads request lines until the peer closes, idles past `idleTimeout`, leaves a request
    /// unfinished past `requestDeadline`, or cannot be answered.
    private func readRequests(from connection: FileDescriptor, peer: ControlPeer, acceptedAt: ContinuousClock.Instant) {
        var machine = ControlConnectionStateMachine()
        // When the lines being carried out arrived: the accept for the first ones.
        var arrivedAt = acceptedAt, isFirst = true
        var requestStarted: ContinuousClock.Instant?
        var idleSince = ContinuousClock.now
        while true {
            let now = ContinuousClock.now
            // An attached session's connection is idle by design between its requests.
            if peer.isStreaming, requestStarted == nil { idleSince = now }
            let deadline = requestStarted.map { $0 + requestDeadline } ?? idleSince + idleTimeout
            guard deadline > now else {
                if requestStarted != nil {
                    _ = peer.send(.failure(.failed("request not completed within \(requestDeadline) of its first byte"), id: nil))
                }
                return
            }
            try? connection.setReceiveTimeout(milliseconds: Int(max(1, (deadline - now).milliseconds)))
            let bytes: [UInt8]
            do {
                // With any descriptors the peer passed (an upload's open file), kept for its request.
                let received = try connection.receiveWithDescriptors()
                bytes = received.bytes
                peer.keep(received.descriptors)
            } catch where error == .wouldBlock {
                continue   // the deadline check above answers and closes
            } catch {
                bytes = []
            }
            if !isFirst { arrivedAt = .now }
            isFirst = false
            let wasInsideRequest = machine.isInsideRequest
            let actions = bytes.isEmpty ? machine.endOfInput() : machine.received(bytes)
            if !wasInsideRequest, !bytes.isEmpty { requestStarted = .now }
            if !machine.isInsideRequest { requestStarted = nil }
            if !actions.isEmpty { idleSince = .now }
            guard carryOut(actions, for: peer, arrivedAt: arrivedAt) else { return }
            // The deadline covers reading one line, not carrying out the lines before it: a
            // pipelining client's partial next line starts its clock once they are answered.
            if !actions.isEmpty, machine.isInsideRequest { requestStarted = .now }
        }
    }

    /// Carries out and answers the requests that arrived together; false when the connection
    /// must close (the peer asked to, or a reply could not be written to a plain connection).
    /// Adds (and a background session's task requests) that arrived together are carried out
    /// in order, and answered in order once their records are durable: their fsyncs are shared
    /// (a group commit). Any other request waits until the run before it is answered.
    private func carryOut(_ actions: [ControlConnectionStateMachine.Action], for peer: ControlPeer,
                          arrivedAt: ContinuousClock.Instant) -> Bool {
        let credentials = peer.credentials
        // An attached session's requests that arrived are carried out even when their reply
        // cannot be written: a program that resumes a task and exits at once (or is killed)
        // meant it, and the agent owns the task from then on.
        func reply(_ response: ControlResponse) -> Bool { peer.send(response) || peer.isStreaming }
        var adds = PendingAdds()
        var index = actions.startIndex
        while index < actions.endIndex {
            let action = actions[index]
            index += 1
            switch action {
            case .handle(let id, let command):
                if Self.joinsARun(command) {
                    observer(.request(command, credentials))
                    // The requests of the kind that follow it are carried out in the same task, in order.
                    var run = [(id, command)]
                    while index < actions.endIndex, case .handle(let nextID, let next) = actions[index], Self.joinsARun(next) {
                        observer(.request(next, credentials))
                        run.append((nextID, next))
                        index += 1
                    }
                    for (response, writes) in carryOutRun(run, for: peer) { adds.append(response, writes) }
                    continue
                }
                guard adds.answer(reply) else { return false }
                if let response = immediate?(command, id, peer) {
                    // Logged once answered: the log line is written under the lock every
                    // download's events take, and to the agent's stdout, which a slow reader
                    // of it fills (issue 29: status p99 under 10,000 jobs).
                    let isSent = reply(response)
                    observer(.request(command, credentials, answeredIn: .now - arrivedAt))
                    guard isSent else { return false }
                    continue
                }
                observer(.request(command, credentials))
                if let response = wait({ await self.handler(command, id, peer) }) {
                    guard reply(response) else { return false }
                }
            case .reply(let response):
                guard adds.answer(reply) else { return false }
                observer(.rejected(response.error ?? .failed("rejected"), credentials))
                guard reply(response) else { return false }
            case .close:
                _ = adds.answer(reply)
                return false
            }
        }
        return adds.answer(reply)
    }

    /// Whether `command` is carried out in a run with the like requests that arrived beside it:
    /// adds, and a background session's task requests (create, change, resume/suspend/cancel,
    /// acknowledge), whose session record writes the run shares (`RunCommit`).
    static func joinsARun(_ command: ControlCommand) -> Bool {
        switch command {
        case .add, .createTask, .updateTask, .taskAction, .acknowledge: true
        default: false
        }
    }

    /// Carries out a run of requests in one task, in order: one hand-over between this thread
    /// and the pool per run, not per request (on 2 loaded cores each hand-over waited for a CPU:
    /// 101 adds/s). The writes the run put off (`RunCommit`) are made durable before this
    /// returns; each reply comes with the writes of its own it must still wait for (an add's
    /// record, group-committed on a thread of its own).
    private func carryOutRun(_ run: [(ControlRequestID?, ControlCommand)], for peer: ControlPeer)
        -> [(ControlResponse?, DurableWrites)] {
        wait { () -> [(ControlResponse?, DurableWrites)] in
            let commit = RunCommit()
            let carried = await RunCommit.$collecting.withValue(commit) { () -> [(ControlResponse?, DurableWrites)] in
                var carried: [(ControlResponse?, DurableWrites)] = []
                for (id, command) in run {
                    let writes = DurableWrites()
                    let response = await DurableWrites.$collecting.withValue(writes) { await self.handler(command, id, peer) }
                    carried.append((response, writes))
                }
                return carried
            }
            await commit.commit()
            return carried
        }
    }

    /// Runs async work from a plain thread and blocks that thread (never a pool thread) for it.
    private func wait<Result: Sendable>(_ work: @escaping @Sendable () async -> Result) -> Result {
        let semaphore = DispatchSemaphore(value: 0)
        let result = Mutex<Result?>(nil)
        // Enqueued at the process's own priority: a pool thread this starts would inherit
        // this thread's raised one, and the downloads' work would run at it.
        if threadNice != nil { try? CurrentProcess.setCurrentThreadNice(normalNice.load(ordering: .relaxed)) }
        Task {
            let response = await work()
            result.withLock { $0 = response }
            semaphore.signal()
        }
        if let threadNice { try? CurrentProcess.setCurrentThreadNice(threadNice) }
        semaphore.wait()
        // Set before the signal.
        return result.withLock { $0 }!
    }
}

/// The server's admission, shared with its peers' promotions.
private final class AdmissionBox: Sendable {
    private let admission = Mutex(ControlAdmission())
    func withLock<Result>(_ body: (inout ControlAdmission) -> Result) -> Result { admission.withLock { body(&$0) } }
}

/// How many control connections each uid may hold. The agent's user cannot fill every slot:
/// root always has `reservedForRoot` of its own (to inspect or stop a flooded agent), and no
/// other uid may hold more than `perUser`. One program (a pid) holds at most `perProgram` of its
/// uid's request slots: a stuck program that opens connections and never reads them cannot lock
/// its user's other programs out (`agent status`, a background session's attach) in the 10 s
/// before its connections are dropped. Pure: tested without sockets.
package struct ControlAdmission: Sendable, Equatable {
    package var perUser = 16
    package var shared = 32
    package var reservedForRoot = 4
    package var perProgram = 8
    /// Attached background sessions per uid: long-lived by design, so they leave the request
    /// slots above (a program with a session still gets `queue list` answered) for their own.
    package var attachedPerUser = 256
    private(set) var open: [UInt32: Int] = [:]
    private(set) var attached: [UInt32: Int] = [:]
    /// Request slots per program (pid), for the connections admitted with one.
    private(set) var programs: [Int32: Int] = [:]

    /// Takes a slot for `uid` (and `program`, its pid, when known); false when a share is used up.
    package mutating func admit(uid: UInt32, program: Int32? = nil) -> Bool {
        let held = open[uid, default: 0]
        let others = open.filter { $0.key != 0 }.values.reduce(0, +)
        if let program, programs[program, default: 0] >= perProgram { return false }
        if uid == 0 {
            guard held < reservedForRoot || others + held < shared else { return false }
        } else {
            guard held < perUser, others < shared else { return false }
        }
        open[uid] = held + 1
        if let program { programs[program, default: 0] += 1 }
        return true
    }

    /// Gives back a slot taken by `admit` (with the same `program`), or (`attached`) by `promote`.
    package mutating func release(uid: UInt32, program: Int32? = nil, attached isAttached: Bool = false) {
        if isAttached {
            guard let held = attached[uid] else { return }
            attached[uid] = held > 1 ? held - 1 : nil
            return
        }
        if let program, let held = programs[program] { programs[program] = held > 1 ? held - 1 : nil }
        guard let held = open[uid] else { return }
        open[uid] = held > 1 ? held - 1 : nil
    }

    /// Moves one of `uid`'s connections from a request slot to an attached-session slot; false
    /// when it holds `attachedPerUser` already.
    package mutating func promote(uid: UInt32, program: Int32? = nil) -> Bool {
        guard attached[uid, default: 0] < attachedPerUser else { return false }
        release(uid: uid, program: program)
        attached[uid, default: 0] += 1
        return true
    }
}

/// Things the control server reports to the agent's log.
package enum ControlServerEvent: Sendable {
    /// A peer with another uid connected and was refused.
    case refused(PeerCredentials)
    /// A valid request from a peer; with the time from its arrival (the connection's accept
    /// for its first line) to its reply written, for those answered at once (`status`, `list`).
    case request(ControlCommand, PeerCredentials, answeredIn: Duration? = nil)
    /// A request answered with an error without being handled (malformed, too large).
    case rejected(ControlError, PeerCredentials)
    /// Something went wrong with the socket itself.
    case error(String)
    /// The control threads' nice value was set, or refused (`refused`: they keep the process's).
    case threadPriority(nice: Int32, refused: Errno?)
}
