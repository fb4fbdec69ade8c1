import FoundationEssentials
import LinuxSystem
import LinuxReachability
import ReachabilityBase
import ReachabilityEvents
import ResumableDownloads

/// A program's handle on the download agent of one state directory: typed requests over its
/// control socket (`STATE_DIR/agent.sock`, one JSON line each way, `ControlProtocol`).
///
/// Only the agent's own user and root may use it (the agent checks the peer's credentials).
/// Every request is one connection; the async methods run it on a thread of their own, so they
/// never block a task's thread. Errors are `AgentClientError`.
///
/// ```swift
/// let agent = try AgentClient()                       // the default state directory
/// let download = try await agent.add(url)            // queued in STATE_DIR/files
/// for download in try await agent.downloads() { print(download.id, download.state) }
/// ```
public struct AgentClient: Sendable {
    /// The state directory whose agent this talks to (absolute).
    public let stateDirectory: String
    /// How long a request may wait for the agent's reply.
    public var timeout: Duration = .seconds(30)

    /// The agent on `stateDirectory` (an absolute path, as the agent's `--state-dir`).
    public init(stateDirectory: String) {
        self.stateDirectory = stateDirectory
    }

    /// The agent on the default state directory, resolved as the agent resolves it:
    /// `$REACHABILITY_STATE_DIR`, else `$XDG_STATE_HOME/reachability` (when it is the caller's),
    /// else `/var/lib/reachability` for root, else `~/.local/state/reachability`.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) throws(AgentClientError) {
        do {
            stateDirectory = try StateDirectoryLocation.resolve(explicit: nil, environment: environment)
        } catch {
            throw AgentClientError(.noStateDirectory, error.message)
        }
    }

    /// The control socket's path.
    public var socketPath: String { AgentStateDirectory.socketPath(in: stateDirectory) }

    /// Queues a download of `url` (http or https). The file goes to `output` (an absolute path
    /// in one of the agent's `download-dir=` directories) or, by default, to `STATE_DIR/files`
    /// under a name taken from the URL. An existing file is refused unless `replacing`.
    /// `clientKey` (1-128 visible ASCII characters) names the job for retries: an add repeated
    /// with a key this user already used, after a reset or a timeout, is answered with that
    /// first job instead of queueing the file twice. `connections` bounds the connections the
    /// job opens (1-16, and never more than the agent's per-server bound; nil takes that bound);
    /// `allowsConstrained` false keeps it off constrained paths; `priority` is its class in the
    /// line for transfer slots (a `foreground` job takes a slot from a lower one at once);
    /// `waitsForACPower` keeps it waiting while the machine runs on battery.
    public func add(_ url: URL, output: String? = nil, sha256: String? = nil,
                    replacing: Bool = false, clientKey: String? = nil, connections: Int? = nil,
                    allowsConstrained: Bool = true,
                    priority: DownloadPriority = .normal,
                    waitsForACPower: Bool = false) async throws(AgentClientError) -> AgentDownload {
        try await download(.add(url: url, output: output, sha256: sha256, replace: replacing, clientKey: clientKey,
                                job: QueueJobOptions(connections: connections, allowsConstrained: allowsConstrained,
                                                     priority: priority, waitsForACPower: waitsForACPower)))
    }

    /// Every download the agent knows, finished ones included.
    public func downloads() async throws(AgentClientError) -> [AgentDownload] {
        try await request(.list()).downloads ?? []
    }

    /// Pauses the download with this ID (or unique ID prefix); its resume data is kept, also
    /// across agent restarts.
    public func pause(_ id: String) async throws(AgentClientError) -> AgentDownload { try await download(.pause(id)) }

    /// Resumes a paused (or resumably failed) download.
    public func resume(_ id: String) async throws(AgentClientError) -> AgentDownload { try await download(.resume(id)) }

    /// Cancels a download and deletes its partial file.
    public func cancel(_ id: String) async throws(AgentClientError) -> AgentDownload { try await download(.cancel(id)) }

    /// The agent itself: its path, limits and download counts.
    public func status() async throws(AgentClientError) -> AgentStatus {
        guard let status = try await request(.status).status else { throw AgentClientError(.noReply, "the agent sent no status") }
        return status
    }

    /// The agent's path and download metrics as text.
    public func metrics(format: MetricsFormat = .openMetrics) async throws(AgentClientError) -> String {
        guard let text = try await request(.metrics(format)).metrics else {
            throw AgentClientError(.noReply, "the agent sent no metrics (an agent older than this client?)")
        }
        return text
    }

    private func download(_ command: ControlCommand) async throws(AgentClientError) -> AgentDownload {
        guard let download = try await request(command).download else {
            throw AgentClientError(.noReply, "the agent's reply names no download")
        }
        return download
    }

    /// Sends `command` on a thread of its own and returns the agent's successful reply;
    /// `descriptor` (an upload's open file) travels with it (SCM_RIGHTS).
    package func request(_ command: ControlCommand, passing descriptor: FileDescriptor? = nil) async throws(AgentClientError) -> ControlResponse {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<ControlResponse, AgentClientError>, Never>) in
            SystemThread.detach(name: "agent-client") {
                continuation.resume(returning: Result { () throws(AgentClientError) in try send(command, passing: descriptor) })
            }
        }
        return try result.get()
    }

    /// Longest reply read (a list of every download, the metrics text); a peer that sends more,
    /// or never ends its line, cannot make a program hold it all.
    static let maximumReplySize = 32 << 20

    /// Reads until the reply line ends, the peer closes, the whole `timeout` has passed (a peer
    /// dripping a byte at a time cannot restart it), or the line is too long.
    private func readReply(_ socket: FileDescriptor) -> (bytes: [UInt8], timedOut: Bool) {
        let deadline = ContinuousClock.now + timeout
        var buffer: [UInt8] = []
        var isLineComplete = false
        while !isLineComplete, buffer.count <= Self.maximumReplySize {
            let remaining = deadline - .now
            guard remaining > .zero else { return (buffer, true) }
            try? socket.setReceiveTimeout(milliseconds: Int(max(1, remaining.millisecondsRoundedUp)))
            let bytes: [UInt8]
            do {
                bytes = try socket.receive(maximum: 64 << 10)
            } catch {
                return (buffer, error == .wouldBlock)
            }
            if bytes.isEmpty { break }
            isLineComplete = bytes.contains(UInt8(ascii: "\n"))   // the new bytes only: never quadratic
            buffer += bytes
        }
        return (buffer, false)
    }

    /// Sends `command` and returns the agent's successful reply, blocking the calling thread
    /// for at most `timeout` after connecting. An error reply is thrown as `.rejected`.
    package func send(_ command: ControlCommand, passing descriptor: FileDescriptor? = nil) throws(AgentClientError) -> ControlResponse {
        let socket = try connectedSocket()
        defer { socket.close() }
        let request = ControlRequest(id: .number(1), command: command)
        do {
            let line = ControlCodec.encode(request) + [UInt8(ascii: "\n")]
            if let descriptor { try socket.sendAll(line, passing: descriptor) } else { try socket.sendAll(line) }
        } catch {
            // A refusing agent may already have answered and closed; read its reply below.
        }
        let (buffer, timedOut) = readReply(socket)
        if buffer.count > Self.maximumReplySize {
            throw AgentClientError(.noReply, "the agent on \(stateDirectory) sent a reply longer than \(Self.maximumReplySize) bytes")
        }
        let line = buffer.prefix { $0 != UInt8(ascii: "\n") }
        guard !line.isEmpty, let response = try? ControlCodec.decodeResponse(line) else {
            throw timedOut
                ? AgentClientError(.noReply, "the agent on \(stateDirectory) did not answer within \(timeout.formattedSeconds) s; if systemd starts it from a socket unit, see 'systemctl --user status reachability-agent' (or 'systemctl status' for the system one)")
                : AgentClientError(.noReply, "the agent on \(stateDirectory) closed the connection without a reply")
        }
        if let error = response.error, !response.ok || error.code == .permissionDenied {
            if error.code == .permissionDenied {
                throw AgentClientError(.permissionDenied, "the agent refused the connection: \(error.message)", agentCode: error.code)
            }
            throw AgentClientError(.rejected, error.message, agentCode: error.code)
        }
        guard response.ok else { throw AgentClientError(.rejected, "the agent reported an error") }
        return response
    }
}

extension AgentClient {
    /// A socket connected to the agent's control socket, or why there is none.
    package func connectedSocket() throws(AgentClientError) -> FileDescriptor {
        let socket: FileDescriptor
        do {
            socket = try FileDescriptor.unixSocket()
        } catch {
            throw AgentClientError(.unreachable, "cannot create a socket: \(error)")
        }
        // A wedged agent whose backlog is full cannot hold the connect, nor a send, past the timeout.
        try? socket.setSendTimeout(milliseconds: Int(max(1, timeout.millisecondsRoundedUp)))
        do {
            try socket.connect(to: SocketAddress(unixPath: socketPath))
        } catch {
            socket.close()
            switch error {
            case .connectionRefused, .noSuchFile:
                throw AgentClientError(.notRunning, "no agent is running on \(stateDirectory) (start one with 'reachability agent')")
            case .wouldBlock:
                throw AgentClientError(.noReply, "the agent on \(stateDirectory) did not accept the connection within \(timeout.formattedSeconds) s")
            case .permissionDenied, .operationNotPermitted:
                throw AgentClientError(.permissionDenied,
                                       "permission denied connecting to the agent on \(stateDirectory): it belongs to another user (only its own user or root may control it)")
            default:
                throw AgentClientError(.unreachable, "cannot connect to the agent on \(stateDirectory): connect \(socketPath): \(error)")
            }
        }
        return socket
    }
}

/// Why a request to the agent failed. Compare with the static members
/// (`error == .notRunning`); `agentCode` says why the agent refused a request.
public struct AgentClientError: Error, Sendable, Hashable, CustomStringConvertible {
    package enum Code: Sendable, Hashable {
        case noStateDirectory, notRunning, permissionDenied, unreachable, noReply, rejected
    }

    private let code: Code
    /// For people: what failed and, where there is one, what to do.
    public let message: String
    /// For `.rejected` (and a refused `.permissionDenied`): the agent's reason.
    public let agentCode: ControlErrorCode?

    package init(_ code: Code, _ message: String, agentCode: ControlErrorCode? = nil) {
        self.code = code
        self.message = message
        self.agentCode = agentCode
    }

    /// No state directory could be found (no home directory, a relative `REACHABILITY_STATE_DIR`).
    public static let noStateDirectory = AgentClientError(.noStateDirectory, "no state directory")
    /// No agent listens on the state directory.
    public static let notRunning = AgentClientError(.notRunning, "no agent is running")
    /// The agent belongs to another user.
    public static let permissionDenied = AgentClientError(.permissionDenied, "permission denied")
    /// The socket could not be created or connected for another reason.
    public static let unreachable = AgentClientError(.unreachable, "the agent cannot be reached")
    /// The agent closed the connection, or did not answer within the timeout, or answered
    /// without what was asked for.
    public static let noReply = AgentClientError(.noReply, "the agent did not reply")
    /// The agent refused the request (`agentCode` says why: notFound, ambiguous, invalidArgument...).
    public static let rejected = AgentClientError(.rejected, "the agent refused the request")

    public var description: String { message }

    /// Same kind of failure (the message and the agent's code are not compared).
    public static func == (lhs: AgentClientError, rhs: AgentClientError) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
