import CNetlink
import Dispatch
import FoundationEssentials
import Glibc
import LinuxSystem
import Synchronization

/// The one file that calls into libnl (through the CNetlink shim); everything else sees bytes.
///
/// `@unchecked Sendable` because it owns a `struct nl_sock *`. Invariant: an event socket is only
/// read on the engine's serial queue, and a query socket is only used while holding the engine's
/// query lock, so libnl never sees concurrent calls on one handle.
final class NetlinkSocket: @unchecked Sendable {
    enum Receive: Equatable {
        /// `count` bytes are in the buffer.
        case bytes(Int)
        /// Nothing queued (non-blocking read) or the wait timed out.
        case empty
        /// ENOBUFS: the kernel dropped messages, so the caller must resynchronise.
        case overflow
    }

    private let handle: OpaquePointer
    private var isClosed = false
    private var sequence: UInt32 = UInt32(truncatingIfNeeded: Int(Date().timeIntervalSince1970))
    /// One reusable receive buffer; rtnetlink datagrams fit in 32 KiB (the kernel's dump skb size).
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 8)

    /// Opens a NETLINK_ROUTE socket with `receiveBufferSize` bytes of kernel buffer and joins `groups`.
    init(receiveBufferSize: Int, groups: [Int32]) throws {
        var code: Int32 = 0
        guard let socket = cnl_socket_open(&code) else {
            buffer.deallocate()
            throw ReachabilityError(.netlink, "cannot open rtnetlink socket: \(Self.describe(code))")
        }
        handle = socket
        // SO_RCVBUFFORCE first: rmem_max (often 208 KiB) silently caps SO_RCVBUF, and rtnetlink
        // storms then overflow with ENOBUFS; without CAP_NET_ADMIN, libnl's SO_RCVBUF.
        var size = Int32(clamping: receiveBufferSize)
        if size > 0, (try? fileDescriptor.setOption(level: SOL_SOCKET, name: SO_RCVBUFFORCE, value: &size)) == nil {
            _ = cnl_socket_set_receive_buffer(socket, size)
        }
        // Ask the kernel for extended acknowledgements (and ENOBUFS reports) where it has them;
        // a kernel without them is no reason to fail.
        var one: Int32 = 1
        try? fileDescriptor.setOption(level: CNL_SOL_NETLINK, name: CNL_NETLINK_EXT_ACK, value: &one)
        for group in groups {
            let rc = cnl_socket_join(socket, group)
            if rc < 0 {
                close()
                throw ReachabilityError(.netlink, "cannot join rtnetlink group \(group): \(Self.describe(rc))")
            }
        }
    }

    deinit {
        close()
        buffer.deallocate()
    }

    static func describe(_ libnlCode: Int32) -> String {
        String(cString: cnl_strerror(libnlCode))
    }

    /// Multicast groups for links, IPv4/IPv6 addresses, routes and policy rules.
    static let monitorGroups: [Int32] = [
        CNL_GROUP_LINK, CNL_GROUP_IPV4_IFADDR, CNL_GROUP_IPV6_IFADDR,
        CNL_GROUP_IPV4_ROUTE, CNL_GROUP_IPV6_ROUTE, CNL_GROUP_IPV4_RULE, CNL_GROUP_IPV6_RULE,
    ]

    /// The socket libnl opened; reads and options go through LinuxSystem like every other call.
    var fileDescriptor: FileDescriptor { FileDescriptor(rawValue: cnl_socket_fd(handle)) }

    /// Attaches a classic BPF program (see `EventFilter`); throws when the kernel refuses it.
    func attachFilter(_ program: [EventFilter.Instruction]) throws {
        do {
            try fileDescriptor.attachFilter(program.map { ($0.code, $0.jumpIfTrue, $0.jumpIfFalse, $0.constant) })
        } catch {
            throw ReachabilityError(.netlink, "cannot attach the event filter: \(error)")
        }
    }

    /// Effective kernel receive buffer (the kernel doubles what was asked for); -1 when unknown.
    var receiveBufferSize: Int { Int((try? fileDescriptor.option(level: SOL_SOCKET, name: SO_RCVBUF, as: Int32.self)) ?? -1) }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        cnl_socket_close(handle)
    }

    func nextSequence() -> UInt32 {
        sequence &+= 1
        return sequence
    }

    /// Reads one datagram without blocking; `body` sees the bytes before the next read.
    /// recv(2) rather than libnl's nl_recv, so the hot path reuses one buffer instead of a malloc
    /// per message; a datagram larger than the buffer is EMSGSIZE (MSG_TRUNC reports its size).
    func receive<T>(_ body: (UnsafeRawBufferPointer) -> T) throws -> (Receive, T?) {
        try interpret(Result { () throws(Errno) in
            try fileDescriptor.receive(into: buffer, nonBlocking: true, reportingTruncation: true)
        }, body)
    }

    /// Makes reads blocking with a bound, for request/response exchanges (query sockets); the
    /// timeout is set once, so each read needs no extra call.
    func useBlockingReads(timeoutMilliseconds: Int32) throws {
        do {
            try fileDescriptor.setNonBlocking(false)
            try fileDescriptor.setReceiveTimeout(milliseconds: Int(timeoutMilliseconds))
        } catch {
            throw ReachabilityError(.netlink, "cannot configure rtnetlink query socket: \(error)")
        }
        replyTimeoutMilliseconds = timeoutMilliseconds
    }

    private(set) var replyTimeoutMilliseconds: Int32 = 0

    /// Blocking read bounded by the timeout set with `useBlockingReads`.
    func receiveReply<T>(_ body: (UnsafeRawBufferPointer) -> T) throws -> (Receive, T?) {
        try interpret(Result { () throws(Errno) in try fileDescriptor.receive(into: buffer, reportingTruncation: true) }, body)
    }

    private func interpret<T>(_ result: Result<Int, Errno>, _ body: (UnsafeRawBufferPointer) -> T) throws -> (Receive, T?) {
        switch result {
        case .success(let count) where count > buffer.count:
            throw ReachabilityError(.netlink, "rtnetlink receive failed: \(Errno.messageTooLong)")
        case .success(let count) where count > 0:
            return (.bytes(count), body(UnsafeRawBufferPointer(rebasing: buffer[0..<count])))
        case .success, .failure(.wouldBlock):
            return (.empty, nil)
        case .failure(.noBufferSpace):
            return (.overflow, nil)
        case .failure(let error):
            throw ReachabilityError(.netlink, "rtnetlink receive failed: \(error)")
        }
    }

    func send(_ message: [UInt8]) throws {
        let rc = message.withUnsafeBytes { cnl_send(handle, $0.baseAddress, UInt($0.count)) }
        if rc < 0 { throw ReachabilityError(.netlink, "rtnetlink send failed: \(Self.describe(rc))") }
    }

    /// Sends `message` (built with `sequence`) and collects replies until the kernel is done:
    /// NLMSG_DONE for dumps, the single reply or error otherwise. Replies from older requests
    /// (other sequence numbers) are skipped.
    func exchange(_ message: [UInt8], sequence: UInt32, isDump: Bool, routeReplies: Bool = false) throws -> [ParsedMessage] {
        try send(message)
        var replies: [ParsedMessage] = []
        while true {
            let (result, parsed) = try receiveReply { bytes in
                RTNetlink.parse(bytes, routeReplies: routeReplies)
            }
            switch result {
            case .empty:
                throw ReachabilityError(.netlink, "rtnetlink did not answer within \(replyTimeoutMilliseconds) ms")
            case .overflow:
                // Only a dump can overflow a query socket; the caller retries the whole dump.
                replies.append(ParsedMessage(message: .error(-ENOBUFS), sequence: sequence, isDumpInterrupted: true))
                return replies
            case .bytes:
                for reply in parsed ?? [] where reply.sequence == sequence {
                    switch reply.message {
                    case .done:
                        return replies
                    case .error(let code):
                        replies.append(reply)
                        if code != 0 || !isDump { return replies }
                    default:
                        replies.append(reply)
                        if !isDump { return replies }
                    }
                }
            }
        }
    }
}

/// Entering named network namespaces (`ip netns add NAME` creates /run/netns/NAME).
enum NetworkNamespace {
    /// Runs `body` on a fresh thread that has joined namespace `name`; sockets and mounts created
    /// there keep that namespace after the thread ends. setns() only changes the calling thread,
    /// so a dedicated thread keeps the rest of the process where it was.
    static func run<T: Sendable>(in name: String, _ body: @escaping @Sendable () throws -> T) throws -> T {
        let namespace = try openDescriptor(name)
        defer { namespace.close() }
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        SystemThread.detach(name: "netns-enter") {
            do throws(Errno) {
                try namespace.enterNetworkNamespace()
                result.withLock { $0 = Result { try body() } }
            } catch {
                let message = error == .operationNotPermitted
                    ? "watching network namespace '\(name)' needs CAP_SYS_ADMIN (run as root)"
                    : "cannot enter network namespace '\(name)': \(error)"
                result.withLock { $0 = .failure(ReachabilityError(error == .operationNotPermitted ? .permissionDenied : .netlink, message)) }
            }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// Opens /run/netns/NAME for a later `join(_:)`.
    static func openDescriptor(_ name: String) throws -> FileDescriptor {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else {
            throw ReachabilityError(.namespaceNotFound, "invalid network namespace name '\(name)'")
        }
        let path = "/run/netns/\(name)"
        do {
            return try FileDescriptor.openForReading(path)
        } catch .noSuchFile {
            throw ReachabilityError(.namespaceNotFound, "no network namespace named '\(name)' (see 'ip netns list')")
        } catch {
            throw ReachabilityError(error == .permissionDenied || error == .operationNotPermitted ? .permissionDenied : .netlink,
                                    "cannot open \(path): \(error)")
        }
    }

    /// Moves the calling thread (only) into the namespace behind `descriptor`.
    static func join(_ descriptor: FileDescriptor) throws {
        do {
            try descriptor.enterNetworkNamespace()
        } catch {
            throw ReachabilityError(error == .operationNotPermitted ? .permissionDenied : .netlink,
                                    "cannot enter the network namespace: \(error)")
        }
    }

    /// A directory descriptor onto a sysfs that shows the current thread's network namespace,
    /// for reading /sys/class/net facts of interfaces inside another namespace.
    static func openPrivateSysfs() throws -> FileDescriptor {
        do {
            return try FileDescriptor.openPrivateSysfs()
        } catch {
            throw ReachabilityError(.permissionDenied, "cannot mount a sysfs view of the namespace: \(error)")
        }
    }
}
