import FoundationEssentials
import LinuxReachability
import Glibc
import Synchronization

/// Knobs for every request, from `DownloadAgent.Configuration`.
struct TransferSettings: Sendable, Hashable {
    var connectTimeout: Duration
    var stallTimeout: Duration
    var stallBytesPerSecond: Int
    var maximumRedirects: Int
    var keepAliveIdle: Duration
    var receiveBufferSize: Int
    var userAgent: String
    /// PEM CA bundle replacing the system one, when set.
    var certificateAuthorityFile: String? = nil
    /// `Name: value` lines added to every request.
    var additionalHeaders: [String] = []
    /// CURLOPT_MAX_RECV_SPEED_LARGE, when set.
    var maximumBytesPerSecond: Int64? = nil
    /// false turns off peer and host verification (`--insecure`).
    var verifiesCertificates = true
    /// CURLOPT_PROXY when set ("" disables the environment's proxies).
    var proxy: String? = nil
}

/// One HTTP attempt for a download.
struct TransferRequest: Sendable {
    var url: URL
    /// Where the stored bytes end; the request starts `overlap` bytes earlier.
    var offset: Int64
    /// The If-Range validator (strong ETag or Last-Modified).
    var ifRange: String?
    /// The strong ETag, when that is what If-Range carries.
    var entityTag: String?
    var knownTotalLength: Int64?
    /// The recorded strong Last-Modified and any ETag seen (weak too), to notice a change.
    var lastModified: String? = nil
    var observedEntityTag: String? = nil
    /// Bytes before `offset` fetched again and compared with the disk before appending.
    var overlap: Int64 = 0
    /// Interface to pin to (`CURLOPT_INTERFACE "if!name"`), nil to follow the routing table.
    var interfaceName: String?
    /// Open a new connection instead of reusing one from before a path change.
    var freshConnection: Bool
    var settings: TransferSettings
}

/// What the engine reports when an attempt ends.
struct TransferOutcome: Sendable {
    var result: AttemptResult
    /// Body bytes accepted during this attempt.
    var bytesReceived: Int64
}

/// Runs HTTP transfers on libcurl's multi interface from one dedicated thread.
///
/// `@unchecked Sendable` invariant: `multi` and everything in `transfers` (easy handles and their
/// contexts) are touched only on the engine thread inside `run()`. Other threads only append to
/// `commands` (a Mutex) and call `curl_multi_wakeup`, which libcurl documents as thread-safe.
final class TransferEngine: @unchecked Sendable {
    private enum Command {
        case start(UInt64, TransferRequest, PartialFile, @Sendable (Int64) -> Void, @Sendable (TransferOutcome) -> Void)
        case abort(UInt64, AbortReason)
        case unpause(UInt64)
        case shutdown
    }

    private let multi: CurlMulti
    private let commands = Mutex<(queue: [Command], isShutDown: Bool)>(([], false))
    private let nextID = Atomic<UInt64>(1)
    /// Engine thread only.
    private var transfers: [UInt64: TransferContext] = [:]
    private var handles: [UnsafeMutableRawPointer: UInt64] = [:]

    /// Starts the engine thread; throws when libcurl cannot be initialised.
    init() throws {
        multi = try CurlMulti()
        SystemThread.detach(name: "transfer-engine") { [self] in run() }
    }

    /// A fresh id for `start`.
    func makeTransferID() -> UInt64 { nextID.add(1, ordering: .relaxed).oldValue }

    /// Queues an attempt. `completion` is called exactly once, on the engine thread, when it ends;
    /// `progress` gets the file offset reached (about ten times a second). Returns false (without
    /// calling `completion`) after `shutdown()`.
    @discardableResult
    func start(_ id: UInt64, _ request: TransferRequest, into file: PartialFile,
               progress: @escaping @Sendable (Int64) -> Void,
               completion: @escaping @Sendable (TransferOutcome) -> Void) -> Bool {
        submit(.start(id, request, file, progress, completion))
    }

    /// Aborts a running attempt (path change, pause, cancel); unknown or finished ids are ignored.
    func abort(_ id: UInt64, reason: AbortReason) { submit(.abort(id, reason)) }

    /// Stops the thread; running attempts end with `.aborted(.shutdown)`.
    func shutdown() { submit(.shutdown) }

    @discardableResult
    private func submit(_ command: Command) -> Bool {
        let accepted = commands.withLock { state -> Bool in
            guard !state.isShutDown else { return false }
            if case .shutdown = command { state.isShutDown = true }
            state.queue.append(command)
            return true
        }
        if accepted { multi.wakeup() }
        return accepted
    }

    // MARK: engine thread

    private func run() {
        var isRunning = true
        while isRunning {
            let pending = commands.withLock { state -> [Command] in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return state.queue
            }
            for command in pending {
                switch command {
                case .start(let id, let request, let file, let progress, let completion):
                    start(id: id, request: request, file: file, progress: progress, completion: completion)
                case .abort(let id, let reason):
                    finish(id, forcedResult: .aborted(reason), failure: nil, detail: "")
                case .unpause(let id):
                    if let context = transfers[id] {
                        context.isPausedForBackpressure = false
                        context.lastActivity = .now
                        context.easy?.unpause()
                    }
                case .shutdown:
                    isRunning = false
                }
            }
            guard isRunning else { break }
            multi.perform()
            while let done = multi.nextCompleted() {
                guard let id = handles[done.handle] else { continue }
                finish(id, forcedResult: nil, failure: done.failure, detail: done.detail)
            }
            abortStalledTransfers()
            // Short enough for the stall watchdog's granularity; wakeups cut it anyway.
            multi.poll(milliseconds: 250)
        }
        for id in Array(transfers.keys) { finish(id, forcedResult: .aborted(.shutdown), failure: nil, detail: "") }
        multi.cleanup()
    }

    /// libcurl's LOW_SPEED check averages over a window of about five seconds, so a transfer that
    /// stops dead after a fast burst is noticed only seconds late. This watchdog aborts a transfer
    /// whose response has started but which received nothing for `stallTimeout` (not counting
    /// time paused by our own backpressure); LOW_SPEED stays as the backstop for the connect phase.
    private func abortStalledTransfers() {
        let now = ContinuousClock.now
        for (id, context) in transfers where context.hasResponse && !context.isPausedForBackpressure
            && now - context.lastActivity > context.stallTimeout {
            let seconds = Double(context.stallTimeout.milliseconds) / 1000
            finish(id, forcedResult: .transport(.networkConnectionLost.with(
                description: "the network connection was lost: no data for \(seconds) s")), failure: nil, detail: "")
        }
    }

    private func start(id: UInt64, request: TransferRequest, file: PartialFile,
                       progress: @escaping @Sendable (Int64) -> Void,
                       completion: @escaping @Sendable (TransferOutcome) -> Void) {
        let machine = ResponseStateMachine(request: .init(offset: request.offset, entityTag: request.entityTag,
                                                          knownTotalLength: request.knownTotalLength,
                                                          lastModified: request.lastModified,
                                                          observedEntityTag: request.observedEntityTag,
                                                          overlap: request.overlap))
        let context = TransferContext(machine: machine, file: file, progress: progress, completion: completion)
        context.stallTimeout = request.settings.stallTimeout
        context.url = request.url
        context.proxy = request.settings.proxy
        let settings = request.settings
        let options = CurlRequestOptions(
            url: request.url.absoluteString, rangeStart: request.offset - request.overlap, sendsRange: request.offset > 0,
            ifRange: request.ifRange,
            interface: request.interfaceName.map { "if!\($0)" }, freshConnection: request.freshConnection,
            connectTimeoutMilliseconds: Int(settings.connectTimeout.milliseconds),
            lowSpeedLimitBytesPerSecond: settings.stallBytesPerSecond,
            lowSpeedTimeSeconds: max(1, Int((settings.stallTimeout.milliseconds + 999) / 1000)),
            maximumRedirects: settings.maximumRedirects,
            keepAliveIdleSeconds: max(1, Int(settings.keepAliveIdle.milliseconds / 1000)),
            receiveBufferSize: settings.receiveBufferSize, userAgent: settings.userAgent,
            certificateAuthorityFile: settings.certificateAuthorityFile,
            additionalHeaders: settings.additionalHeaders, maximumBytesPerSecond: settings.maximumBytesPerSecond,
            verifiesCertificates: settings.verifiesCertificates, proxy: settings.proxy)
        guard let easy = CurlEasy(options: options, context: Unmanaged.passUnretained(context)) else {
            completion(TransferOutcome(result: .failed(.invalidRequest.with(description: "cannot create a libcurl handle")),
                                       bytesReceived: 0))
            return
        }
        context.easy = easy
        file.setDrainHandler { [weak self] in self?.submit(.unpause(id)) }
        guard multi.add(easy) else {
            easy.cleanup()
            completion(TransferOutcome(result: .failed(.invalidRequest.with(description: "libcurl refused the transfer")),
                                       bytesReceived: 0))
            return
        }
        transfers[id] = context
        handles[easy.handle] = id
    }

    /// Ends a transfer: removes and frees the handle, then reports. `forcedResult` (our abort) wins
    /// over whatever libcurl would have said.
    private func finish(_ id: UInt64, forcedResult: AttemptResult?, failure: TransferFailure?, detail: String) {
        guard let context = transfers.removeValue(forKey: id), let easy = context.easy else { return }
        handles.removeValue(forKey: easy.handle)
        let info = easy.info()
        multi.remove(easy)
        easy.cleanup()
        context.easy = nil
        context.flushChunk()
        context.file.setDrainHandler(nil)

        let result: AttemptResult
        if let forcedResult {
            result = forcedResult
        } else if let abort = context.abortReason {
            result = .aborted(abort)
        } else {
            let error = failure.map {
                TransferErrorMapping.error(for: $0, osErrno: info.osErrno, didConnect: info.didConnect, detail: detail,
                                           proxy: ProxyEnvironment.proxy(for: context.url, explicit: context.proxy))
            }
            if case .finish(let finished) = context.machine.event(.ended(error)) {
                result = finished
            } else {
                result = .transport(error ?? .networkConnectionLost)
            }
        }
        context.completion(TransferOutcome(result: result, bytesReceived: context.bytesReceived))
    }
}

/// Per-attempt state used by libcurl's callbacks on the engine thread. Held strongly by the engine
/// while its easy handle exists, and passed to libcurl unretained: the handle is always cleaned up
/// before the context is released, so no weak box is needed and no cycle exists.
final class TransferContext {
    var machine: ResponseStateMachine
    var headers = HeaderAccumulator()
    let file: PartialFile
    let progress: @Sendable (Int64) -> Void
    let completion: @Sendable (TransferOutcome) -> Void
    var easy: CurlEasy?
    var abortReason: AbortReason?
    var bytesReceived: Int64 = 0
    /// Last header line or body byte, for the stall watchdog.
    var lastActivity = ContinuousClock.now
    /// Whether a response has started arriving (the watchdog ignores the connect phase).
    var hasResponse = false
    /// Whether the write callback paused the transfer because the disk is behind.
    var isPausedForBackpressure = false
    var stallTimeout: Duration = .seconds(30)
    /// The request's URL and explicit proxy, to name the proxy when connecting through it fails.
    var url: URL?
    var proxy: String?
    private var lastProgress = ContinuousClock.now
    /// Body bytes gathered before handing them to the writer: libcurl delivers ~16 KiB per
    /// callback on loopback, and one copy + dispatch per callback cost ~25% of throughput.
    private var chunk = Data()
    private var chunkOffset: Int64 = 0
    static let chunkSize = 512 << 10

    init(machine: ResponseStateMachine, file: PartialFile, progress: @escaping @Sendable (Int64) -> Void,
         completion: @escaping @Sendable (TransferOutcome) -> Void) {
        self.machine = machine
        self.file = file
        self.progress = progress
        self.completion = completion
    }

    /// Header callback: false stops the transfer.
    func didReceiveHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        hasResponse = true
        lastActivity = .now
        let line = String(decoding: bytes, as: UTF8.self)
        guard let head = headers.feed(line) else { return true }
        switch machine.event(.head(head)) {
        case .begin(let acceptance):
            file.begin(acceptance)
            return true
        case .abort:
            return false   // the machine remembers the result; libcurl ends with a write error
        case .ignore, .write, .compare, .finish:
            return true
        }
    }

    /// Write callback.
    func didReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyDisposition {
        if let error = file.writeError {
            abortReason = .writeFailed(error)
            return .abort
        }
        lastActivity = .now
        if file.shouldPause(adding: chunk.count + bytes.count) {
            isPausedForBackpressure = true
            return .pause
        }
        var bytes = bytes
        var action = machine.event(.body(count: bytes.count))
        if case .compare(let offset, let count) = action {
            // The overlap before the resume point: compared with the disk, never written.
            bytesReceived += Int64(count)
            guard file.matchesDisk(UnsafeRawBufferPointer(rebasing: bytes[..<count]), at: offset) else {
                _ = machine.event(.overlapMismatch)
                return .abort
            }
            if count == bytes.count { return .consumed }
            bytes = UnsafeRawBufferPointer(rebasing: bytes[count...])
            action = .write(at: offset + Int64(count))
        }
        switch action {
        case .write(let offset):
            if chunk.isEmpty {
                chunkOffset = offset
                chunk.reserveCapacity(Self.chunkSize)
            }
            chunk.append(bytes.bindMemory(to: UInt8.self))
            if chunk.count >= Self.chunkSize { flushChunk() }
            bytesReceived += Int64(bytes.count)
            let now = ContinuousClock.now
            if now - lastProgress >= .milliseconds(100) {
                lastProgress = now
                progress(offset + Int64(bytes.count))
            }
            return .consumed
        case .abort, .finish:
            return .abort
        case .ignore, .begin, .compare:
            return .consumed
        }
    }

    /// Hands the gathered bytes to the partial file (also when the attempt ends).
    func flushChunk() {
        guard !chunk.isEmpty else { return }
        file.append(chunk, at: chunkOffset)
        chunk = Data()
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        let parts = components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}
