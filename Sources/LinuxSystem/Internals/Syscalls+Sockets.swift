import CLinuxSystem
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Socket system calls (see Syscalls.swift for the rules).
extension Syscall {
    static func socket(_ domain: Int32, _ type: Int32) throws(Errno) -> Int32 {
        try valueOrErrno { Glibc.socket(domain, type | Int32(SOCK_CLOEXEC.rawValue), 0) }
    }

    static func bind(_ descriptor: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) throws(Errno) {
        try valueOrErrno { Glibc.bind(descriptor, address, length) }
    }

    /// Not retried on EINTR: the connection attempt goes on, and a second connect(2) would
    /// answer EALREADY. The caller waits for it like for EINPROGRESS.
    static func connect(_ descriptor: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) throws(Errno) {
        if Glibc.connect(descriptor, address, length) < 0 { throw Errno(errno) }
    }

    static func listen(_ descriptor: Int32, _ backlog: Int32) throws(Errno) {
        try valueOrErrno { Glibc.listen(descriptor, backlog) }
    }

    static func accept(_ descriptor: Int32) throws(Errno) -> Int32 {
        try valueOrErrno { clinux_accept_cloexec(descriptor) }
    }

    static func send(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer, flags: Int32) throws(Errno) -> Int {
        try valueOrErrno { Glibc.send(descriptor, buffer.baseAddress, buffer.count, flags | Int32(MSG_NOSIGNAL)) }
    }

    static func sendto(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer, _ address: UnsafePointer<sockaddr>,
                       _ length: socklen_t, nonBlocking: Bool) throws(Errno) -> Int {
        let flags = Int32(MSG_NOSIGNAL) | (nonBlocking ? Int32(MSG_DONTWAIT) : 0)
        return try valueOrErrno { Glibc.sendto(descriptor, buffer.baseAddress, buffer.count, flags, address, length) }
    }

    static func recv(_ descriptor: Int32, _ buffer: UnsafeMutableRawBufferPointer, flags: Int32) throws(Errno) -> Int {
        try valueOrErrno { Glibc.recv(descriptor, buffer.baseAddress, buffer.count, flags) }
    }

    // Descriptor passing (SCM_RIGHTS). The CMSG_* macros cannot be imported, and a shim header
    // including <sys/socket.h> made the socket constants belong to CLinuxSystem in some builds
    // (files importing only Glibc then lost SOCK_STREAM), so the control-message layout is
    // computed here: a `cmsghdr`, padded to the alignment of `size_t`, then the descriptors.

    /// CMSG_ALIGN: rounded up to the alignment of `size_t`.
    private static func controlAlign(_ length: Int) -> Int {
        let unit = MemoryLayout<Int>.size
        return (length + unit - 1) & ~(unit - 1)
    }

    /// CMSG_SPACE of `count` descriptors.
    private static func controlSpace(descriptors count: Int) -> Int {
        controlAlign(MemoryLayout<cmsghdr>.size) + controlAlign(count * MemoryLayout<Int32>.size)
    }

    /// A `msghdr` over the one I/O vector and the whole control buffer, for sendmsg and recvmsg.
    /// `Result` carries the typed error through `withUnsafeMutablePointer`, which only rethrows.
    private static func withMessage<Value>(_ vector: inout iovec, control: UnsafeMutableRawBufferPointer,
                                           _ body: (inout msghdr) throws(Errno) -> Value) throws(Errno) -> Value {
        try withUnsafeMutablePointer(to: &vector) { vectorPointer in
            Result { () throws(Errno) in
                var message = msghdr()
                message.msg_iov = vectorPointer
                message.msg_iovlen = 1
                message.msg_control = control.baseAddress
                message.msg_controllen = control.count
                return try body(&message)
            }
        }.get()
    }

    /// sendmsg(2) of `buffer` with `descriptor` attached (SCM_RIGHTS); the bytes sent.
    static func send(_ socket: Int32, _ buffer: UnsafeRawBufferPointer, passing descriptor: Int32) throws(Errno) -> Int {
        let space = controlSpace(descriptors: 1)
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0)
        var header = cmsghdr()
        header.cmsg_len = controlAlign(MemoryLayout<cmsghdr>.size) + MemoryLayout<Int32>.size   // CMSG_LEN(sizeof(int))
        header.cmsg_level = SOL_SOCKET
        header.cmsg_type = Int32(SCM_RIGHTS)
        control.storeBytes(of: header, as: cmsghdr.self)
        control.storeBytes(of: descriptor, toByteOffset: controlAlign(MemoryLayout<cmsghdr>.size), as: Int32.self)
        var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: buffer.baseAddress), iov_len: buffer.count)
        return try withMessage(&vector, control: control) { (message: inout msghdr) throws(Errno) in
            try valueOrErrno { Glibc.sendmsg(socket, &message, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// recvmsg(2) into `buffer`, and the descriptors (at most 4, close-on-exec) that came with
    /// those bytes. Descriptors beyond the room are closed by the kernel (MSG_CTRUNC), so a peer
    /// cannot make the receiver hold more than it asked for.
    static func receive(_ socket: Int32, _ buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> (count: Int, descriptors: [Int32]) {
        let capacity = 4
        let space = controlSpace(descriptors: capacity)
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0)
        var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
        var controlLength = 0
        let count = try withMessage(&vector, control: control) { (message: inout msghdr) throws(Errno) in
            let received = try valueOrErrno { Glibc.recvmsg(socket, &message, Int32(MSG_CMSG_CLOEXEC)) }
            controlLength = min(Int(message.msg_controllen), space)
            return received
        }
        // Walk the control messages (CMSG_FIRSTHDR / CMSG_NXTHDR) for SCM_RIGHTS.
        var descriptors: [Int32] = []
        var offset = 0
        let headerSize = controlAlign(MemoryLayout<cmsghdr>.size)
        while offset + MemoryLayout<cmsghdr>.size <= controlLength {
            let header = control.load(fromByteOffset: offset, as: cmsghdr.self)
            let length = Int(header.cmsg_len)
            guard length >= headerSize, offset + length <= controlLength else { break }
            if header.cmsg_level == SOL_SOCKET, header.cmsg_type == Int32(SCM_RIGHTS) {
                for index in 0..<((length - headerSize) / MemoryLayout<Int32>.size) {
                    descriptors.append(control.loadUnaligned(fromByteOffset: offset + headerSize + index * MemoryLayout<Int32>.size,
                                                             as: Int32.self))
                }
            }
            offset += controlAlign(length)
        }
        return (count, descriptors)
    }

    static func setsockopt(_ descriptor: Int32, _ level: Int32, _ name: Int32, _ value: UnsafeRawBufferPointer) throws(Errno) {
        try valueOrErrno { Glibc.setsockopt(descriptor, level, name, value.baseAddress, socklen_t(value.count)) }
    }

    static func getsockopt(_ descriptor: Int32, _ level: Int32, _ name: Int32, _ value: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        var length = socklen_t(value.count)
        try valueOrErrno { Glibc.getsockopt(descriptor, level, name, value.baseAddress, &length) }
        return Int(length)
    }

    static func getsockname(_ descriptor: Int32, _ address: UnsafeMutablePointer<sockaddr>, _ length: inout socklen_t) throws(Errno) {
        try valueOrErrno { Glibc.getsockname(descriptor, address, &length) }
    }

    static func peerCredentials(_ descriptor: Int32) throws(Errno) -> (pid: Int32, uid: UInt32, gid: UInt32) {
        var credentials = clinux_peer_credentials()
        var length = socklen_t(MemoryLayout<clinux_peer_credentials>.size)
        try valueOrErrno { Glibc.getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) }
        return (credentials.pid, credentials.uid, credentials.gid)
    }

    static func attachFilter(_ descriptor: Int32,
                             _ program: [(code: UInt16, jumpIfTrue: UInt8, jumpIfFalse: UInt8, constant: UInt32)]) throws(Errno) {
        var code = program.map { sock_filter(code: $0.code, jt: $0.jumpIfTrue, jf: $0.jumpIfFalse, k: $0.constant) }
        try code.withUnsafeMutableBufferPointer { buffer in
            Result { () throws(Errno) in
                var filter = sock_fprog(len: UInt16(buffer.count), filter: buffer.baseAddress)
                try withUnsafeBytes(of: &filter) { raw in
                    Result { () throws(Errno) in try setsockopt(descriptor, SOL_SOCKET, SO_ATTACH_FILTER, raw) }
                }.get()
            }
        }.get()
    }

    static func shutdown(_ descriptor: Int32) {
        _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR))
    }

    static func poll(_ descriptors: inout [pollfd], _ timeoutMilliseconds: Int32) throws(Errno) -> Int {
        let count = nfds_t(descriptors.count)
        return Int(try descriptors.withUnsafeMutableBufferPointer { buffer in
            Result { () throws(Errno) in try valueOrErrno { Glibc.poll(buffer.baseAddress, count, timeoutMilliseconds) } }
        }.get())
    }

    static func eventfd() throws(Errno) -> Int32 {
        try valueOrErrno { clinux_eventfd() }
    }

    /// umask(2) for the length of `body` (never fails).
    static func withUmask<T>(_ mask: mode_t, _ body: () throws(Errno) -> T) throws(Errno) -> T {
        let previous = Glibc.umask(mask)
        defer { Glibc.umask(previous) }
        return try body()
    }

    static func chmod(_ path: String, _ mode: mode_t) throws(Errno) {
        try valueOrErrno { Glibc.chmod(path, mode) }
    }

    static func getaddrinfo(_ host: String, _ service: String, _ hints: inout addrinfo,
                            _ list: inout UnsafeMutablePointer<addrinfo>?) -> Int32 {
        Glibc.getaddrinfo(host, service, &hints, &list)
    }

    static func freeaddrinfo(_ list: UnsafeMutablePointer<addrinfo>?) { Glibc.freeaddrinfo(list) }

    static func resolverError(_ code: Int32) -> String { String(cString: gai_strerror(code)) }
}
