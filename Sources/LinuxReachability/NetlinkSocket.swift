import CNetlink
import Dispatch
import FoundationEssentials
import Glibc
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
        guard let socket = cnl_socket_open(Int32(clamping: receiveBufferSize), &code) else {
            buffer.deallocate()
            throw ReachabilityError(.netlink, "cannot open rtnetlink socket: \(Self.describe(code))")
        }
        handle = socket
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

    var fileDescriptor: Int32 { cnl_socket_fd(handle) }

    /// Attaches a classic BPF program (see `EventFilter`); throws when the kernel refuses it.
    func attachFilter(_ program: [EventFilter.Instruction]) throws {
        let code = program.map { sock_filter(code: $0.code, jt: $0.jumpIfTrue, jf: $0.jumpIfFalse, k: $0.constant) }
        let rc = code.withUnsafeBufferPointer { cnl_socket_attach_filter(handle, $0.baseAddress, UInt16(code.count)) }
        if rc < 0 { throw ReachabilityError(.netlink, "cannot attach the event filter: \(String(cString: strerror(-rc)))") }
    }

    /// Effective kernel receive buffer (the kernel doubles what was asked for).
    var receiveBufferSize: Int { Int(cnl_socket_rcvbuf(handle)) }

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
    func receive<T>(_ body: (UnsafeRawBufferPointer) -> T) throws -> (Receive, T?) {
        let n = cnl_recv(handle, buffer.baseAddress, UInt(buffer.count))
        return try interpret(n, body)
    }

    /// Makes reads blocking with a bound, for request/response exchanges (query sockets).
    func useBlockingReads(timeoutMilliseconds: Int32) throws {
        let rc = cnl_socket_set_blocking(handle, 1)
        let timeout = cnl_socket_set_timeout(handle, timeoutMilliseconds)
        if rc < 0 || timeout < 0 {
            throw ReachabilityError(.netlink, "cannot configure rtnetlink query socket: \(String(cString: strerror(-min(rc, timeout))))")
        }
        replyTimeoutMilliseconds = timeoutMilliseconds
    }

    private(set) var replyTimeoutMilliseconds: Int32 = 0

    /// Blocking read bounded by the timeout set with `useBlockingReads`.
    func receiveReply<T>(_ body: (UnsafeRawBufferPointer) -> T) throws -> (Receive, T?) {
        let n = cnl_recv_blocking(handle, buffer.baseAddress, UInt(buffer.count))
        if n == -Int(EAGAIN) || n == -Int(EWOULDBLOCK) { return (.empty, nil) }
        return try interpret(n, body)
    }

    private func interpret<T>(_ n: Int, _ body: (UnsafeRawBufferPointer) -> T) throws -> (Receive, T?) {
        if n > 0 { return (.bytes(n), body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))) }
        if n == 0 { return (.empty, nil) }
        if n == -Int(ENOBUFS) { return (.overflow, nil) }
        throw ReachabilityError(.netlink, "rtnetlink receive failed: \(String(cString: strerror(Int32(-n))))")
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

extension NetlinkSocket {
    /// An eventfd for waking a thread blocked in poll(2).
    static func makeWakeDescriptor() throws -> Int32 {
        let fd = cnl_wake_fd()
        if fd < 0 { throw ReachabilityError(.netlink, "cannot create an eventfd: \(String(cString: strerror(-fd)))") }
        return fd
    }
}

/// Entering named network namespaces (`ip netns add NAME` creates /run/netns/NAME).
enum NetworkNamespace {
    /// Runs `body` on a fresh thread that has joined namespace `name`; sockets and mounts created
    /// there keep that namespace after the thread ends. setns() only changes the calling thread,
    /// so a dedicated thread keeps the rest of the process where it was.
    static func run<T: Sendable>(in name: String, _ body: @escaping @Sendable () throws -> T) throws -> T {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else {
            throw ReachabilityError(.namespaceNotFound, "invalid network namespace name '\(name)'")
        }
        let path = "/run/netns/\(name)"
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let err = errno
            if err == ENOENT {
                throw ReachabilityError(.namespaceNotFound, "no network namespace named '\(name)' (see 'ip netns list')")
            }
            throw ReachabilityError(err == EACCES || err == EPERM ? .permissionDenied : .netlink,
                                    "cannot open \(path): \(String(cString: strerror(err)))")
        }
        defer { Glibc.close(fd) }
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        SystemThread.detach(name: "netns-enter") {
            let rc = cnl_setns_net(fd)
            if rc < 0 {
                let message = rc == -EPERM
                    ? "watching network namespace '\(name)' needs CAP_SYS_ADMIN (run as root)"
                    : "cannot enter network namespace '\(name)': \(String(cString: strerror(-rc)))"
                result.withLock { $0 = .failure(ReachabilityError(rc == -EPERM ? .permissionDenied : .netlink, message)) }
            } else {
                result.withLock { $0 = Result { try body() } }
            }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// Opens /run/netns/NAME for a later `join(descriptor:)`.
    static func openDescriptor(_ name: String) throws -> Int32 {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else {
            throw ReachabilityError(.namespaceNotFound, "invalid network namespace name '\(name)'")
        }
        let fd = open("/run/netns/\(name)", O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let err = errno
            throw ReachabilityError(err == ENOENT ? .namespaceNotFound : err == EACCES || err == EPERM ? .permissionDenied : .netlink,
                                    "cannot open /run/netns/\(name): \(String(cString: strerror(err)))")
        }
        return fd
    }

    /// Moves the calling thread (only) into the namespace behind `descriptor`.
    static func join(descriptor: Int32) throws {
        let rc = cnl_setns_net(descriptor)
        if rc < 0 {
            throw ReachabilityError(rc == -EPERM ? .permissionDenied : .netlink,
                                    "cannot enter the network namespace: \(String(cString: strerror(-rc)))")
        }
    }

    /// A directory fd onto a sysfs that shows the current thread's network namespace, for
    /// reading /sys/class/net facts of interfaces inside another namespace.
    static func openPrivateSysfs() throws -> Int32 {
        let fd = cnl_open_private_sysfs()
        if fd < 0 {
            throw ReachabilityError(.permissionDenied,
                                    "cannot mount a sysfs view of the namespace: \(String(cString: strerror(-fd)))")
        }
        return fd
    }
}
