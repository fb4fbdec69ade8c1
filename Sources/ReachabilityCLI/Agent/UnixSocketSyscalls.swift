#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one file that makes raw socket, lock and descriptor calls for the agent, its control
/// clients and sd_notify: negative returns become `SystemCallError` here, EINTR is retried here.
enum UnixSocketSyscalls {
    /// Glibc's `struct ucred` (pid, uid, gid as three 32-bit fields) is only declared with
    /// _GNU_SOURCE, which Swift's Glibc module does not define; SO_PEERCRED fills this layout.
    struct PeerCredentials: Sendable, Equatable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// A failed call: the operation's name and errno.
    struct SystemCallError: Error, Sendable, Equatable, CustomStringConvertible {
        var operation: String
        var number: Int32
        var description: String { "\(operation): \(String(cString: strerror(number)))" }
    }

    /// Runs `call`, retrying on EINTR; a negative result throws with errno.
    @discardableResult
    private static func retrying<T: BinaryInteger>(_ operation: String, _ call: () -> T) throws(SystemCallError) -> T {
        while true {
            let result = call()
            if result >= 0 { return result }
            if errno == EINTR { continue }
            throw SystemCallError(operation: operation, number: errno)
        }
    }

    /// Longest path a `sockaddr_un` holds, without the terminating NUL.
    static let maximumPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Fills a `sockaddr_un` for `path`; a leading `@` means the Linux abstract namespace (the
    /// name then starts with a NUL byte and is not NUL-terminated). Returns the address length.
    private static func withAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) throws(SystemCallError) -> T {
        var bytes = Array(path.utf8)
        let isAbstract = bytes.first == UInt8(ascii: "@")
        if isAbstract { bytes[0] = 0 }
        guard !bytes.isEmpty, bytes.count <= maximumPathLength else {
            throw SystemCallError(operation: "socket path '\(path)'", number: ENAMETOOLONG)
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        // Abstract names are exactly `bytes.count` long; filesystem paths include their NUL.
        let length = socklen_t(pathOffset + bytes.count + (isAbstract ? 0 : 1))
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// A close-on-exec Unix socket of `type` (SOCK_STREAM or SOCK_DGRAM).
    static func makeSocket(_ type: __socket_type) throws(SystemCallError) -> Int32 {
        try retrying("socket") { socket(AF_UNIX, Int32(type.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
    }

    /// Binds `descriptor` to `path` with the socket file created as `mode` (umask set around the
    /// bind, so there is no moment when the file has wider permissions), then listens.
    static func bindAndListen(_ descriptor: Int32, path: String, mode: mode_t, backlog: Int32 = 64) throws(SystemCallError) {
        let previous = umask(~mode & 0o777)
        defer { umask(previous) }
        let bound = try withAddress(path) { bind(descriptor, $0, $1) }
        if bound < 0 { throw SystemCallError(operation: "bind \(path)", number: errno) }
        try retrying("chmod \(path)") { chmod(path, mode) }
        try retrying("listen") { listen(descriptor, backlog) }
    }

    /// Connects `descriptor` to the socket at `path`.
    static func connect(_ descriptor: Int32, path: String) throws(SystemCallError) {
        while true {
            let result = try withAddress(path) { Glibc.connect(descriptor, $0, $1) }
            if result == 0 { return }
            if errno == EINTR { continue }
            throw SystemCallError(operation: "connect \(path)", number: errno)
        }
    }

    /// Accepts one connection and marks it close-on-exec (accept4 is a GNU extension the Glibc
    /// module does not declare; the agent does not fork, so the window is harmless).
    static func accept(_ descriptor: Int32) throws(SystemCallError) -> Int32 {
        let connection = try retrying("accept") { Glibc.accept(descriptor, nil, nil) }
        _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
        return connection
    }

    /// The uid/gid/pid of the process at the other end of a connected Unix socket (SO_PEERCRED).
    static func peerCredentials(_ descriptor: Int32) throws(SystemCallError) -> PeerCredentials {
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        try retrying("getsockopt SO_PEERCRED") { getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) }
        return credentials
    }

    /// Sets SO_RCVTIMEO so a silent peer cannot hold a connection thread forever (a read then
    /// fails with EAGAIN).
    static func setReceiveTimeout(_ descriptor: Int32, milliseconds: Int) throws(SystemCallError) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        try retrying("setsockopt SO_RCVTIMEO") {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
    }

    /// Reads up to `count` bytes; an empty array means end of input.
    static func read(_ descriptor: Int32, count: Int = 16 << 10) throws(SystemCallError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        let received = try retrying("read") { buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) } }
        return Array(buffer.prefix(received))
    }

    /// Writes every byte (MSG_NOSIGNAL: a vanished peer is an EPIPE error, not a SIGPIPE).
    static func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) throws(SystemCallError) {
        var offset = 0
        while offset < bytes.count {
            let sent = try retrying("send") {
                bytes.withUnsafeBytes { send(descriptor, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            }
            offset += sent
        }
    }

    /// Sends one datagram to the socket at `path` (`@name` for the abstract namespace).
    static func sendDatagram(_ descriptor: Int32, _ bytes: [UInt8], to path: String) throws(SystemCallError) {
        while true {
            let result = try withAddress(path) { address, length in
                bytes.withUnsafeBytes { sendto(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address, length) }
            }
            if result >= 0 { return }
            if errno == EINTR { continue }
            throw SystemCallError(operation: "sendto \(path)", number: errno)
        }
    }

    /// The path a listening `AF_UNIX` `SOCK_STREAM` socket is bound to; nil for any other kind
    /// of descriptor (another family or type, not listening, unbound or abstract).
    static func listeningStreamSocketPath(_ descriptor: Int32) -> Result<String?, SystemCallError> {
        func option(_ name: Int32) throws(SystemCallError) -> Int32 {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            try retrying("getsockopt") { getsockopt(descriptor, SOL_SOCKET, name, &value, &length) }
            return value
        }
        do {
            guard try option(SO_DOMAIN) == AF_UNIX, try option(SO_TYPE) == Int32(SOCK_STREAM.rawValue),
                  try option(SO_ACCEPTCONN) == 1 else { return .success(nil) }
            var address = sockaddr_un()
            var length = socklen_t(MemoryLayout<sockaddr_un>.size)
            _ = try withUnsafeMutablePointer(to: &address) { pointer throws(SystemCallError) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw throws(SystemCallError) in
                    try retrying("getsockname") { getsockname(descriptor, raw, &length) }
                }
            }
            let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
            let bytes = withUnsafeBytes(of: &address.sun_path) { raw in
                Array(raw.prefix(max(0, Int(length) - pathOffset)).prefix { $0 != 0 })
            }
            // An abstract name starts with NUL, which leaves no bytes here: not a file clients can find.
            return .success(bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self))
        } catch {
            return .failure(error)
        }
    }

    /// Marks a descriptor close-on-exec (one passed in by systemd is not).
    static func setCloseOnExec(_ descriptor: Int32) {
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    }

    /// Shuts both directions down; wakes a thread blocked in accept(2) on a listening socket.
    static func shutdownBoth(_ descriptor: Int32) {
        _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR))
    }

    /// Closes a descriptor (errors are not actionable).
    static func close(_ descriptor: Int32) {
        _ = Glibc.close(descriptor)
    }
}
