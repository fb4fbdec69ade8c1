#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A socket address for connect(2), bind(2) and sendto(2): IPv4 or IPv6 with a port, or a Unix
/// socket path (`@name` for Linux's abstract namespace), with its text for messages.
package struct SocketAddress: Sendable {
    /// The address family.
    package enum Family: Sendable, Hashable {
        case ipv4, ipv6, unix
    }

    package let family: Family
    /// `10.77.9.1:80`, `[2001:db8::1]:80`, or the socket path.
    package let text: String
    /// The 4 or 16 address bytes of an IP address; nil for a Unix socket.
    package let ipAddress: [UInt8]?
    private let storage: sockaddr_storage
    private let length: socklen_t

    /// From 4 or 16 address bytes and a port; nil for another count.
    package init?(ipAddress bytes: [UInt8], port: UInt16) {
        guard bytes.count == 4 || bytes.count == 16, let presentation = Self.presentation(ofIPAddress: bytes) else { return nil }
        ipAddress = bytes
        // The bytes are in network order already: loaded as they are into `in_addr`/`in6_addr`.
        if bytes.count == 4 {
            (storage, length) = Self.stored(sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: port.bigEndian,
                                                        sin_addr: bytes.withUnsafeBytes { $0.loadUnaligned(as: in_addr.self) },
                                                        sin_zero: (0, 0, 0, 0, 0, 0, 0, 0)))
            (family, text) = (.ipv4, "\(presentation):\(port)")
        } else {
            (storage, length) = Self.stored(sockaddr_in6(sin6_family: sa_family_t(AF_INET6), sin6_port: port.bigEndian, sin6_flowinfo: 0,
                                                         sin6_addr: bytes.withUnsafeBytes { $0.loadUnaligned(as: in6_addr.self) },
                                                         sin6_scope_id: 0))
            (family, text) = (.ipv6, "[\(presentation)]:\(port)")
        }
    }

    /// A concrete `sockaddr_*` in the generic storage, with its length.
    private static func stored<Address>(_ address: Address) -> (sockaddr_storage, socklen_t) {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: address) { raw.copyMemory(from: $0) } }
        return (storage, socklen_t(MemoryLayout<Address>.size))
    }

    /// Longest path a `sockaddr_un` holds, without the terminating NUL.
    package static let maximumUnixPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// A Unix socket path; a leading `@` means the abstract namespace (the name then starts with
    /// a NUL byte and is not NUL-terminated). ENAMETOOLONG for an empty or too long path.
    package init(unixPath path: String) throws(Errno) {
        var bytes = Array(path.utf8)
        let isAbstract = bytes.first == UInt8(ascii: "@")
        if isAbstract { bytes[0] = 0 }
        guard !bytes.isEmpty, bytes.count <= Self.maximumUnixPathLength else { throw Errno(ENAMETOOLONG) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        // Abstract names are exactly `bytes.count` long; file-system paths include their NUL.
        storage = Self.stored(address).0
        length = socklen_t(pathOffset + bytes.count + (isAbstract ? 0 : 1))
        family = .unix
        text = path
        ipAddress = nil
    }

    func withPointer<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws(Errno) -> T) throws(Errno) -> T {
        var storage = storage
        return try withUnsafePointer(to: &storage) { pointer in
            Result { () throws(Errno) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    Result { () throws(Errno) in try body(address, length) }
                }.get()
            }
        }.get()
    }

    /// A name lookup that failed, with the resolver's text.
    package struct ResolveFailure: Error, Sendable {
        package var message: String

        package init(message: String) { self.message = message }
    }

    /// getaddrinfo(3) for a TCP service: every address of `host`, IPv6 and IPv4, in the
    /// resolver's order. Blocking: run it off any thread that must not wait.
    package static func resolve(host: String, port: UInt16) -> Result<[SocketAddress], ResolveFailure> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let code = Syscall.getaddrinfo(host, String(port), &hints, &list)
        guard code == 0 else { return .failure(ResolveFailure(message: Syscall.resolverError(code))) }
        defer { Syscall.freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var entry = list
        while let current = entry {
            if let raw = current.pointee.ai_addr {
                let bytes: [UInt8]? = switch current.pointee.ai_family {
                case AF_INET: withUnsafeBytes(of: UnsafeRawPointer(raw).loadUnaligned(as: sockaddr_in.self).sin_addr) { Array($0) }
                case AF_INET6: withUnsafeBytes(of: UnsafeRawPointer(raw).loadUnaligned(as: sockaddr_in6.self).sin6_addr) { Array($0) }
                default: nil
                }
                if let bytes, let address = SocketAddress(ipAddress: bytes, port: port) { addresses.append(address) }
            }
            entry = current.pointee.ai_next
        }
        return .success(addresses)
    }

    /// inet_ntop(3)'s text for 4 or 16 address bytes (`192.0.2.1`, `2001:db8::1`); nil otherwise.
    package static func presentation(ofIPAddress bytes: [UInt8]) -> String? {
        let family: Int32
        switch bytes.count {
        case 4: family = AF_INET
        case 16: family = AF_INET6
        default: return nil
        }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let ok = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &text, socklen_t(text.count)) != nil }
        return ok ? String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }
}
