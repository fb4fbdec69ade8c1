#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Who is at the other end of a connected Unix socket (SO_PEERCRED).
package struct PeerCredentials: Sendable, Equatable {
    package var pid: Int32 = 0
    package var uid: UInt32 = 0
    package var gid: UInt32 = 0

    package init(pid: Int32 = 0, uid: UInt32 = 0, gid: UInt32 = 0) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// Sockets are file descriptors (swift-system's shape): these are the socket calls, typed.
extension FileDescriptor {
    /// A close-on-exec Unix socket: a stream (control connections) or datagrams (sd_notify).
    package static func unixSocket(datagrams: Bool = false) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try Syscall.socket(AF_UNIX, Int32(datagrams ? SOCK_DGRAM.rawValue : SOCK_STREAM.rawValue)))
    }

    /// A close-on-exec TCP socket of `family`, non-blocking when asked.
    package static func tcpSocket(_ family: SocketAddress.Family, nonBlocking: Bool) throws(Errno) -> FileDescriptor {
        let domain = family == .ipv6 ? AF_INET6 : AF_INET
        let type = Int32(SOCK_STREAM.rawValue) | (nonBlocking ? Int32(SOCK_NONBLOCK.rawValue) : 0)
        return FileDescriptor(rawValue: try Syscall.socket(domain, type))
    }

    /// A close-on-exec UDP socket of `family` (a DNS query: one datagram out, one back).
    package static func udpSocket(_ family: SocketAddress.Family) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try Syscall.socket(family == .ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_DGRAM.rawValue)))
    }

    /// connect(2). On a non-blocking socket, `EINPROGRESS` (and an interrupted connect) means
    /// it goes on: wait until writable, then read `pendingConnectionError()`.
    package func connect(to address: SocketAddress) throws(Errno) {
        try address.withPointer { pointer, length throws(Errno) in try Syscall.connect(rawValue, pointer, length) }
    }

    /// bind(2) to a local address (port 0: the kernel picks one).
    package func bind(to address: SocketAddress) throws(Errno) {
        try address.withPointer { pointer, length throws(Errno) in try Syscall.bind(rawValue, pointer, length) }
    }

    /// Binds to the Unix socket `path` with the file created as `mode` (the umask is set around
    /// the bind, so there is no moment when the file has wider permissions), then listens.
    package func bindAndListen(unixPath path: String, mode: UInt32, backlog: Int32 = 64) throws(Errno) {
        let address = try SocketAddress(unixPath: path)
        try Syscall.withUmask(mode_t(~mode & 0o777)) { () throws(Errno) in try bind(to: address) }
        try Syscall.chmod(path, mode_t(mode))
        try Syscall.listen(rawValue, backlog)
    }

    /// accept(2) of one connection, close-on-exec.
    package func accept() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try Syscall.accept(rawValue))
    }

    /// send(2) without SIGPIPE (a vanished peer is EPIPE); the count sent (`.wouldBlock` when a
    /// non-blocking socket's buffer is full).
    package func send(_ bytes: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try Syscall.send(rawValue, bytes, flags: 0)
    }

    /// Sends every byte (the one write-everything loop, `FileDescriptor.writeAll`).
    package func sendAll(_ bytes: [UInt8]) throws(Errno) {
        let error = bytes.withUnsafeBytes { raw in
            Self.writeAll(raw) { rest, _ throws(Errno) in try Syscall.send(rawValue, rest, flags: 0) }.error
        }
        if let error { throw error }
    }

    /// Sends one datagram to `address`. `nonBlocking`: a receiver whose queue is full (a Unix
    /// datagram socket holds only `net.unix.max_dgram_qlen`, 10 by default) makes it fail with
    /// `.wouldBlock` instead of waiting until that receiver reads.
    package func send(_ bytes: [UInt8], to address: SocketAddress, nonBlocking: Bool = false) throws(Errno) {
        _ = try bytes.withUnsafeBytes { raw in
            Result { () throws(Errno) in
                try address.withPointer { pointer, length throws(Errno) in
                    try Syscall.sendto(rawValue, raw, pointer, length, nonBlocking: nonBlocking)
                }
            }
        }.get()
    }

    /// recv(2) into `buffer`: 0 at the end of the stream; `.wouldBlock` when nothing is queued on
    /// a non-blocking socket, or when the receive timeout passed. `nonBlocking` reads this once
    /// without waiting (MSG_DONTWAIT); `reportingTruncation` returns a datagram's whole length
    /// even when it did not fit (MSG_TRUNC).
    package func receive(into buffer: UnsafeMutableRawBufferPointer, nonBlocking: Bool = false,
                         reportingTruncation: Bool = false) throws(Errno) -> Int {
        let flags = (nonBlocking ? Int32(MSG_DONTWAIT) : 0) | (reportingTruncation ? Int32(MSG_TRUNC) : 0)
        return try Syscall.recv(rawValue, buffer, flags: flags)
    }

    /// Whether the other end of a connected stream socket has closed or reset it, without
    /// consuming anything or waiting (recv with MSG_PEEK | MSG_DONTWAIT): bytes still queued
    /// count as open.
    package func peerHasClosed() -> Bool {
        var byte: UInt8 = 0
        let result = withUnsafeMutableBytes(of: &byte) { raw in
            Result { () throws(Errno) in try Syscall.recv(rawValue, raw, flags: Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) }
        }
        switch result {
        case .success(let count): return count == 0
        case .failure(let error): return error != .wouldBlock && error != .interrupted
        }
    }

    /// Reads up to `maximum` bytes; empty at the end of the stream.
    package func receive(maximum: Int = 16 << 10) throws(Errno) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: maximum)
        let count = try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(Errno) in try receive(into: raw) }
        }.get()
        return Array(buffer.prefix(count))
    }

    /// Sends every byte with `descriptor` attached to the first of them (SCM_RIGHTS): the peer
    /// receives its own descriptor of the same open file. Used to hand the agent a file the
    /// caller opened, so the agent reads only what the caller could.
    package func sendAll(_ bytes: [UInt8], passing descriptor: FileDescriptor) throws(Errno) {
        guard !bytes.isEmpty else { return }
        let first = try bytes.withUnsafeBytes { raw in
            Result { () throws(Errno) in try Syscall.send(rawValue, raw, passing: descriptor.rawValue) }
        }.get()
        try sendAll(Array(bytes[first...]))
    }

    /// Reads up to `maximum` bytes (empty at the end of the stream), and the descriptors that
    /// came with them (SCM_RIGHTS; at most 4, close-on-exec, now the caller's to close).
    package func receiveWithDescriptors(maximum: Int = 16 << 10) throws(Errno) -> (bytes: [UInt8], descriptors: [FileDescriptor]) {
        var buffer = [UInt8](repeating: 0, count: maximum)
        let (count, descriptors) = try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(Errno) in try Syscall.receive(rawValue, raw) }
        }.get()
        return (Array(buffer.prefix(count)), descriptors.map(FileDescriptor.init(rawValue:)))
    }

    /// SO_RCVTIMEO: a read waits at most this long, then fails with `.wouldBlock`.
    package func setReceiveTimeout(milliseconds: Int) throws(Errno) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        try setOption(level: SOL_SOCKET, name: SO_RCVTIMEO, value: &timeout)
    }

    /// SO_SNDTIMEO: a send, and the connect(2) of a Unix stream socket to a listener whose
    /// backlog is full, wait at most this long, then fail with `.wouldBlock`.
    package func setSendTimeout(milliseconds: Int) throws(Errno) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        try setOption(level: SOL_SOCKET, name: SO_SNDTIMEO, value: &timeout)
    }

    /// SO_BINDTODEVICE: the socket sends and receives through `interface` only.
    package func bindToDevice(_ interface: String) throws(Errno) {
        let name = Array(interface.utf8.prefix(15)) + [0]
        try name.withUnsafeBytes { raw in
            Result { () throws(Errno) in try Syscall.setsockopt(rawValue, SOL_SOCKET, SO_BINDTODEVICE, raw) }
        }.get()
    }

    /// The outcome of a non-blocking connect (SO_ERROR): nil once connected.
    package func pendingConnectionError() throws(Errno) -> Errno? {
        let value: Int32 = try option(level: SOL_SOCKET, name: SO_ERROR)
        return value == 0 ? nil : Errno(value)
    }

    /// The process at the other end of a connected Unix socket.
    package func peerCredentials() throws(Errno) -> PeerCredentials {
        let (pid, uid, gid) = try Syscall.peerCredentials(rawValue)
        return PeerCredentials(pid: pid, uid: uid, gid: gid)
    }

    /// Shuts both directions down; wakes a thread blocked in accept(2) on a listening socket.
    package func shutdown() { Syscall.shutdown(rawValue) }

    /// SO_LINGER with a zero timeout: close(2) then resets the connection and drops what is still
    /// queued to send, instead of the kernel sending it on after the owner gave up on it.
    package func setResetOnClose() throws(Errno) {
        var option = linger(l_onoff: 1, l_linger: 0)
        try setOption(level: SOL_SOCKET, name: SO_LINGER, value: &option)
    }

    /// SO_RCVBUF: the kernel keeps at most about `bytes` received and unread for this socket (it
    /// doubles the value for its bookkeeping and holds it to `net.core.rmem_max`), so the TCP
    /// window the peer may fill is about that much; receive autotuning stops for the socket.
    package func setReceiveBufferSize(_ bytes: Int) throws(Errno) {
        var value = Int32(clamping: bytes)
        try setOption(level: SOL_SOCKET, name: SO_RCVBUF, value: &value)
    }

    /// setsockopt(2) with `value`'s bytes.
    package func setOption<Value>(level: Int32, name: Int32, value: inout Value) throws(Errno) {
        try withUnsafeBytes(of: &value) { raw in
            Result { () throws(Errno) in try Syscall.setsockopt(rawValue, level, name, raw) }
        }.get()
    }

    /// Attaches a classic BPF program (SO_ATTACH_FILTER): the kernel drops what it rejects
    /// before it wakes anyone. Each instruction is (code, jump if true, jump if false, constant).
    package func attachFilter(_ program: [(code: UInt16, jumpIfTrue: UInt8, jumpIfFalse: UInt8, constant: UInt32)]) throws(Errno) {
        try Syscall.attachFilter(rawValue, program)
    }

    /// getsockopt(2) of a fixed-size value.
    package func option<Value>(level: Int32, name: Int32, as type: Value.Type = Value.self) throws(Errno) -> Value {
        let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: MemoryLayout<Value>.size, alignment: MemoryLayout<Value>.alignment)
        defer { raw.deallocate() }
        raw.initializeMemory(as: UInt8.self, repeating: 0)
        _ = try Syscall.getsockopt(rawValue, level, name, raw)
        return raw.load(as: Value.self)
    }

    /// The path a listening `AF_UNIX` `SOCK_STREAM` socket is bound to; nil for any other kind
    /// of descriptor (another family or type, not listening, unbound or abstract).
    package func listeningUnixStreamPath() throws(Errno) -> String? {
        guard try option(level: SOL_SOCKET, name: SO_DOMAIN, as: Int32.self) == AF_UNIX,
              try option(level: SOL_SOCKET, name: SO_TYPE, as: Int32.self) == Int32(SOCK_STREAM.rawValue),
              try option(level: SOL_SOCKET, name: SO_ACCEPTCONN, as: Int32.self) == 1 else { return nil }
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        try withUnsafeMutablePointer(to: &address) { pointer throws(Errno) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw throws(Errno) in
                try Syscall.getsockname(rawValue, raw, &length)
            }
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        let bytes = withUnsafeBytes(of: &address.sun_path) { raw in
            Array(raw.prefix(max(0, Int(length) - pathOffset)).prefix { $0 != 0 })
        }
        // An abstract name starts with NUL, which leaves no bytes here: not a file clients can find.
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }

    /// Marks the descriptor close-on-exec (one systemd passes in is not).
    package func setCloseOnExec() throws(Errno) { try Syscall.setCloseOnExec(rawValue) }

    /// Blocking (or not) reads and writes (O_NONBLOCK).
    package func setNonBlocking(_ nonBlocking: Bool) throws(Errno) {
        let flags = try Syscall.fcntlGetFlags(rawValue)
        try Syscall.fcntlSetFlags(rawValue, nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
    }
}
