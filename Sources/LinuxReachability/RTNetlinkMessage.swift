import LinuxSystem

/// One netlink message of interest, parsed.
enum RTNetlinkMessage: Equatable, Sendable {
    /// RTM_NEWLINK (or RTM_DELLINK when `deleted`).
    case link(LinkInfo, deleted: Bool)
    /// RTM_NEWADDR / RTM_DELADDR.
    case address(AddressInfo, deleted: Bool)
    /// A route or rule changed. Only what it could redirect is kept: paths come from lookups,
    /// so a route matters only when its prefix covers a lookup destination.
    case routingChanged(RoutingChange)
    /// A reply to RTM_GETROUTE.
    case route(RouteInfo)
    /// End of a dump.
    case done
    /// NLMSG_ERROR: 0 is an ACK, otherwise a negative errno.
    case error(Int32)
    /// Anything else.
    case ignored
}

/// What a route or rule message could change.
enum RoutingChange: Equatable, Sendable {
    /// A policy rule (or a route message without a family we know): anything may be redirected.
    case rule
    /// A route to this prefix was added, changed or removed.
    case route(RoutePrefix)

    /// Whether the change could alter the kernel's answer for `destination`.
    func affects(_ destination: RoutePrefix) -> Bool {
        switch self {
        case .rule: return true
        case .route(let prefix): return prefix.contains(destination)
        }
    }
}

/// An IPv4 or IPv6 prefix held in two integers (IPv4 in the top 32 bits of `high`), so route
/// storms compare prefixes without allocating.
struct RoutePrefix: Hashable, Sendable {
    var family: AddressFamily
    var length: UInt8
    var high: UInt64
    var low: UInt64

    /// A full-length prefix for one address (4 or 16 bytes).
    init?(address bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.init(family: bytes.count == 4 ? .ipv4 : .ipv6, length: UInt8(bytes.count * 8), high: 0, low: 0)
        bytes.withUnsafeBytes { load($0) }
    }

    init(family: AddressFamily, length: UInt8, high: UInt64, low: UInt64) {
        self.family = family
        self.length = length
        self.high = high
        self.low = low
    }

    /// Reads 4 or 16 address bytes in network order.
    mutating func load(_ value: UnsafeRawBufferPointer) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (position, byte) in value.prefix(16).enumerated() {
            if position < 8 { high |= UInt64(byte) << (56 - 8 * UInt64(position)) } else { low |= UInt64(byte) << (120 - 8 * UInt64(position)) }
        }
        self.high = high
        self.low = low
    }

    /// Whether `address` (a full-length prefix of the same family) lies inside this prefix.
    func contains(_ address: RoutePrefix) -> Bool {
        guard family == address.family else { return false }
        let bits = Int(min(length, family == .ipv4 ? 32 : 128))
        let highBits = min(bits, 64)
        let lowBits = max(bits - 64, 0)
        let highMask: UInt64 = highBits == 0 ? 0 : ~UInt64(0) << (64 - highBits)
        let lowMask: UInt64 = lowBits == 0 ? 0 : ~UInt64(0) << (64 - lowBits)
        return (high ^ address.high) & highMask == 0 && (low ^ address.low) & lowMask == 0
    }
}

/// The facts of one link that the monitor keeps.
struct LinkInfo: Equatable, Sendable {
    var index: Int32
    var name: String
    var flags: UInt32
    var hardwareType: UInt16
    var kind: String?

    var isUp: Bool { flags & RTNetlink.iffUp != 0 }
    var hasCarrier: Bool { flags & RTNetlink.iffLowerUp != 0 }
    var isLoopback: Bool { flags & RTNetlink.iffLoopback != 0 }
}

/// One interface address.
struct AddressInfo: Hashable, Sendable {
    var index: Int32
    var family: AddressFamily
    var address: [UInt8]
    var prefixLength: UInt8
    var flags: UInt32
    var scope: UInt8

    /// Addresses that can source traffic beyond the link: DAD finished, not host or link scope.
    var isUsable: Bool {
        flags & (RTNetlink.ifaFTentative | RTNetlink.ifaFDadFailed) == 0
            && scope != RTNetlink.scopeHost && scope != RTNetlink.scopeLink
    }

    var presentation: String { IPAddress.format(address) ?? "?" }

    /// Identity for add/delete: the same address on the same link replaces its flags.
    var key: AddressKey { AddressKey(index: index, address: address, prefixLength: prefixLength) }
}

struct AddressKey: Hashable, Sendable {
    var index: Int32
    var address: [UInt8]
    var prefixLength: UInt8
}

/// The kernel's answer to a route lookup.
struct RouteInfo: Equatable, Sendable {
    var family: AddressFamily
    var type: UInt8
    var flags: UInt32
    var outputInterface: Int32?
    var gateway: [UInt8]?
    var preferredSource: [UInt8]?
    var table: UInt32?

    var isLinkDown: Bool { flags & RTNetlink.rtnhFLinkdown != 0 }
}

/// A batch of parsed messages with the header facts the engine needs.
struct ParsedMessage: Equatable, Sendable {
    var message: RTNetlinkMessage
    var sequence: UInt32
    var isDumpInterrupted: Bool
}
