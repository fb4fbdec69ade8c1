import Glibc
import LinuxSystem

extension AddressFamily {
    init?(kernel value: UInt8) {
        switch value {
        case RTNetlink.afInet: self = .ipv4
        case RTNetlink.afInet6: self = .ipv6
        default: return nil
        }
    }
}

/// IP address text conversion through libc's inet_pton / inet_ntop.
enum IPAddress {
    static func parse(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4, Array.init) }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6, Array.init) }
        return nil
    }

    /// 127.0.0.0/8, `::1`, and IPv4-mapped 127.x: traffic that never leaves the host.
    static func isLoopback(_ bytes: [UInt8]) -> Bool {
        if bytes.count == 4 { return bytes[0] == 127 }
        guard bytes.count == 16 else { return false }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
        return isIPv4Mapped(bytes) && bytes[12] == 127
    }

    /// 169.254.0.0/16 and fe80::/10: addresses that only mean something on one link.
    static func isLinkLocal(_ bytes: [UInt8]) -> Bool {
        if bytes.count == 4 { return bytes[0] == 169 && bytes[1] == 254 }
        guard bytes.count == 16 else { return false }
        return bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80
    }

    static func isIPv4Mapped(_ bytes: [UInt8]) -> Bool {
        bytes.count == 16 && bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
    }

    static func format(_ bytes: [UInt8]) -> String? {
        SocketAddress.presentation(ofIPAddress: bytes)
    }
}
