import Glibc
import Synchronization

/// The connectivity probe's system calls: sockets, name resolution, readiness. Every raw call the
/// probe makes is here, so errno handling and EINTR retries live once; the probe's logic above it
/// (`ConnectivityProbe`) and its parsing (`ProbeResponseParser`) see Swift values only.
enum Syscalls {
    /// An errno value with its text.
    struct Errno: Error, Equatable, CustomStringConvertible {
        var code: Int32
        var description: String { String(cString: strerror(code)) }

        static var current: Errno { Errno(code: errno) }
        static let wouldBlock = Errno(code: EAGAIN)
        static let inProgress = Errno(code: EINPROGRESS)
    }

    /// A socket address for connect(2) and bind(2), with its text for messages.
    struct SocketAddress: Sendable {
        var family: AddressFamily
        /// `10.77.9.1:80` or `[2001:db8::1]:80`.
        var text: String
        /// The 4 or 16 address bytes.
        var address: [UInt8]
        fileprivate var storage: sockaddr_storage
        fileprivate var length: socklen_t

        /// From 4 or 16 address bytes and a port.
        init?(address bytes: [UInt8], port: UInt16) {
            guard let presentation = IPAddress.format(bytes) else { return nil }
            address = bytes
            var storage = sockaddr_storage()
            if bytes.count == 4 {
                var sin = sockaddr_in()
                sin.sin_family = sa_family_t(AF_INET)
                sin.sin_port = port.bigEndian
                withUnsafeMutableBytes(of: &sin.sin_addr) { $0.copyBytes(from: bytes) }
                withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: sin) { raw.copyMemory(from: $0) } }
                length = socklen_t(MemoryLayout<sockaddr_in>.size)
                family = .ipv4
                text = "\(presentation):\(port)"
            } else {
                var sin6 = sockaddr_in6()
                sin6.sin6_family = sa_family_t(AF_INET6)
                sin6.sin6_port = port.bigEndian
                withUnsafeMutableBytes(of: &sin6.sin6_addr) { $0.copyBytes(from: bytes) }
                withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: sin6) { raw.copyMemory(from: $0) } }
                length = socklen_t(MemoryLayout<sockaddr_in6>.size)
                family = .ipv6
                text = "[\(presentation)]:\(port)"
            }
            self.storage = storage
        }
    }

    /// getaddrinfo(3) for a TCP service; blocking (run it off the monitor thread).
    static func resolve(host: String, port: UInt16) -> Result<[SocketAddress], ResolveFailure> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0 else { return .failure(ResolveFailure(message: String(cString: gai_strerror(rc)))) }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var entry = list
        while let current = entry {
            if let raw = current.pointee.ai_addr {
                switch current.pointee.ai_family {
                case AF_INET:
                    let sin = UnsafeRawPointer(raw).loadUnaligned(as: sockaddr_in.self)
                    let bytes = withUnsafeBytes(of: sin.sin_addr) { Array($0) }
                    if let address = SocketAddress(address: bytes, port: port) { addresses.append(address) }
                case AF_INET6:
                    let sin6 = UnsafeRawPointer(raw).loadUnaligned(as: sockaddr_in6.self)
                    let bytes = withUnsafeBytes(of: sin6.sin6_addr) { Array($0) }
                    if let address = SocketAddress(address: bytes, port: port) { addresses.append(address) }
                default:
                    break
                }
            }
            entry = current.pointee.ai_next
        }
        return .success(addresses)
    }

    struct ResolveFailure: Error, Sendable { var message: String }

    /// A non-blocking, close-on-exec TCP socket.
    static func openStreamSocket(_ family: AddressFamily) -> Result<Int32, Errno> {
        let domain = family == .ipv4 ? AF_INET : AF_INET6
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = socket(domain, type, 0)
        return fd < 0 ? .failure(.current) : .success(fd)
    }

    /// SO_BINDTODEVICE: the socket sends and receives through `interface` only.
    static func bindToDevice(_ fd: Int32, interface: String) -> Errno? {
        var name = Array(interface.utf8.prefix(15)) + [0]
        let rc = setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, &name, socklen_t(name.count))
        return rc < 0 ? .current : nil
    }

    /// bind(2) to a local address (port 0: the kernel picks one).
    static func bind(_ fd: Int32, to address: SocketAddress) -> Errno? {
        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, address.length) }
        }
        return rc < 0 ? .current : nil
    }

    /// Starts connect(2); nil when connected at once, `.inProgress` while it runs.
    static func connect(_ fd: Int32, to address: SocketAddress) -> Errno? {
        var storage = address.storage
        while true {
            let rc = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
            }
            if rc == 0 { return nil }
            if errno == EINTR { continue }
            return .current
        }
    }

    /// The outcome of a non-blocking connect (SO_ERROR); nil once connected.
    static func pendingError(_ fd: Int32) -> Errno? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) < 0 { return .current }
        return value == 0 ? nil : Errno(code: value)
    }

    /// send(2) without SIGPIPE; the count sent, or an errno (`.wouldBlock` when the buffer is full).
    static func send(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Result<Int, Errno> {
        while true {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n >= 0 { return .success(n) }
            if errno == EINTR { continue }
            return .failure(.current)
        }
    }

    /// recv(2) into `buffer`; 0 at the end of the stream, `.wouldBlock` when nothing is queued.
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Result<Int, Errno> {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n >= 0 { return .success(n) }
            if errno == EINTR { continue }
            return .failure(.current)
        }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// poll(2) with EINTR reported as "nothing ready"; the timeout in milliseconds, -1 forever.
    static func poll(_ descriptors: inout [pollfd], timeoutMilliseconds: Int32) -> Errno? {
        let rc = Glibc.poll(&descriptors, nfds_t(descriptors.count), timeoutMilliseconds)
        if rc < 0, errno != EINTR { return .current }
        return nil
    }

    /// Adds one to an eventfd, waking whoever polls it.
    static func signal(eventDescriptor fd: Int32) {
        var one: UInt64 = 1
        _ = write(fd, &one, MemoryLayout<UInt64>.size)
    }

    /// Resets an eventfd after it woke poll(2) (non-blocking: the caller knows it is readable).
    static func drain(eventDescriptor fd: Int32) {
        var value: UInt64 = 0
        _ = read(fd, &value, MemoryLayout<UInt64>.size)
    }
}

/// The eventfd that wakes the monitor thread's poll(2): `cancel()`, a finished host-name lookup,
/// a check to start. Closed once, under the same lock as every signal, so a lookup thread that
/// finishes after the monitor ended can never write into a descriptor number reused by then.
final class WakeSignal: Sendable {
    private let descriptor: Mutex<Int32?>
    /// For poll(2) on the monitor thread, which alone closes it.
    let pollDescriptor: Int32

    init(descriptor: Int32) {
        self.descriptor = Mutex(descriptor)
        pollDescriptor = descriptor
    }

    func signal() {
        descriptor.withLock { fd in if let fd { Syscalls.signal(eventDescriptor: fd) } }
    }

    /// After poll(2) reported it readable.
    func reset() {
        descriptor.withLock { fd in if let fd { Syscalls.drain(eventDescriptor: fd) } }
    }

    func close() {
        descriptor.withLock { fd in
            if let open = fd { Syscalls.close(open) }
            fd = nil
        }
    }
}
