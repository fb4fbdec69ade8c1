import LinuxSystem

extension SocketAddress {
    /// The path's word for the address family (a Unix socket is never a path's).
    var addressFamily: AddressFamily { family == .ipv6 ? .ipv6 : .ipv4 }
}
