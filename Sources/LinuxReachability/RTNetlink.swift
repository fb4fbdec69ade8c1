import Glibc
import LinuxSystem

/// rtnetlink wire format: parsing kernel messages from raw bytes and building requests.
///
/// Pure Swift over bytes so it can be tested with recorded messages and so the hot path keeps
/// no libnl objects (libnl's caches do not scale to large route tables). The numbers below are
/// kernel ABI from <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_link.h>, <linux/if_addr.h>;
/// they never change.
enum RTNetlink {
    // Message types.
    static let nlmsgNoop: UInt16 = 1
    static let nlmsgError: UInt16 = 2
    static let nlmsgDone: UInt16 = 3
    static let nlmsgOverrun: UInt16 = 4
    static let newLink: UInt16 = 16
    static let delLink: UInt16 = 17
    static let getLink: UInt16 = 18
    static let newAddr: UInt16 = 20
    static let delAddr: UInt16 = 21
    static let getAddr: UInt16 = 22
    static let newRoute: UInt16 = 24
    static let delRoute: UInt16 = 25
    static let getRoute: UInt16 = 26
    static let newRule: UInt16 = 32
    static let delRule: UInt16 = 33

    // Header flags.
    static let flagRequest: UInt16 = 0x1
    static let flagMulti: UInt16 = 0x2
    static let flagAck: UInt16 = 0x4
    static let flagDump: UInt16 = 0x300
    static let flagDumpInterrupted: UInt16 = 0x10

    // Link flags (ifi_flags).
    static let iffUp: UInt32 = 0x1
    static let iffLoopback: UInt32 = 0x8
    static let iffRunning: UInt32 = 0x40
    static let iffLowerUp: UInt32 = 0x10000

    // Link attributes.
    static let iflaIfname: UInt16 = 3
    static let iflaOperstate: UInt16 = 16
    static let iflaLinkinfo: UInt16 = 18
    static let iflaInfoKind: UInt16 = 1
    static let iflaCarrier: UInt16 = 33

    // Address attributes and flags.
    static let ifaAddress: UInt16 = 1
    static let ifaLocal: UInt16 = 2
    static let ifaFlags: UInt16 = 8
    static let ifaFTentative: UInt32 = 0x40
    static let ifaFDadFailed: UInt32 = 0x08
    static let ifaFSecondary: UInt32 = 0x01
    static let scopeHost: UInt8 = 254
    static let scopeLink: UInt8 = 253

    // Route attributes, types and flags.
    static let rtaDst: UInt16 = 1
    static let rtaOif: UInt16 = 4
    static let rtaGateway: UInt16 = 5
    static let rtaPriority: UInt16 = 6
    static let rtaPrefsrc: UInt16 = 7
    static let rtaTable: UInt16 = 15
    static let rtaVia: UInt16 = 18
    static let rtnUnicast: UInt8 = 1
    /// A destination on this host (127.0.0.0/8, ::1, our own addresses): delivered over loopback.
    static let rtnLocal: UInt8 = 2
    static let rtnhFLinkdown: UInt32 = 16
    static let rtmFLookupTable: UInt32 = 0x1000

    static let afInet: UInt8 = 2
    static let afInet6: UInt8 = 10

    static let headerSize = 16

    @inline(__always) static func align(_ length: Int) -> Int { (length + 3) & ~3 }
}

extension RTNetlink {
    /// Parses every message in one datagram; malformed trailing bytes are ignored, never trusted.
    /// With `routeReplies`, RTM_NEWROUTE is parsed as the answer to a lookup instead of a change.
    static func parse(_ bytes: UnsafeRawBufferPointer, routeReplies: Bool = false) -> [ParsedMessage] {
        var messages: [ParsedMessage] = []
        forEachMessage(in: bytes, routeReplies: routeReplies) { messages.append($0) }
        return messages
    }

    /// Visits every message in one datagram without collecting them (the event path: a route
    /// storm is one datagram per route, and an array per datagram is an allocation per route).
    static func forEachMessage(in bytes: UnsafeRawBufferPointer, routeReplies: Bool = false,
                               _ visit: (ParsedMessage) -> Void) {
        var offset = 0
        while offset + headerSize <= bytes.count {
            let length = Int(bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            guard length >= headerSize, offset + length <= bytes.count else { break }
            let type = bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt16.self)
            let flags = bytes.loadUnaligned(fromByteOffset: offset + 6, as: UInt16.self)
            let sequence = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            let body = UnsafeRawBufferPointer(rebasing: bytes[(offset + headerSize)..<(offset + length)])
            let message = routeReplies && type == newRoute
                ? parseRoute(body).map(RTNetlinkMessage.route) ?? .ignored
                : parseBody(type: type, body: body)
            visit(ParsedMessage(message: message, sequence: sequence, isDumpInterrupted: flags & flagDumpInterrupted != 0))
            offset += align(length)
        }
    }

    /// Convenience for tests and recorded captures.
    static func parse(_ bytes: [UInt8], routeReplies: Bool = false) -> [ParsedMessage] {
        bytes.withUnsafeBytes { parse($0, routeReplies: routeReplies) }
    }

    static func parseBody(type: UInt16, body: UnsafeRawBufferPointer) -> RTNetlinkMessage {
        switch type {
        case newLink, delLink:
            guard let link = parseLink(body) else { return .ignored }
            return .link(link, deleted: type == delLink)
        case newAddr, delAddr:
            guard let address = parseAddress(body) else { return .ignored }
            return .address(address, deleted: type == delAddr)
        case newRoute, delRoute:
            return .routingChanged(parseRoutePrefix(body).map(RoutingChange.route) ?? .rule)
        case newRule, delRule:
            return .routingChanged(.rule)
        case nlmsgDone:
            return .done
        case nlmsgError:
            guard body.count >= 4 else { return .error(-EPROTO) }
            return .error(body.loadUnaligned(as: Int32.self))
        default:
            return .ignored
        }
    }

    /// Parses a route message (used for RTM_GETROUTE replies, which arrive as RTM_NEWROUTE).
    static func parseRoute(_ body: UnsafeRawBufferPointer) -> RouteInfo? {
        guard body.count >= 12 else { return nil }
        let familyByte = body[0]
        guard let family = AddressFamily(kernel: familyByte) else { return nil }
        var route = RouteInfo(family: family, type: body[7], flags: body.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        route.table = UInt32(body[4])
        forEachAttribute(in: body, from: 12) { type, value in
            switch type {
            case rtaOif where value.count >= 4: route.outputInterface = value.loadUnaligned(as: Int32.self)
            case rtaGateway: route.gateway = Array(value)
            case rtaVia where value.count > 2: route.gateway = Array(value[2...])
            case rtaPrefsrc: route.preferredSource = Array(value)
            case rtaTable where value.count >= 4: route.table = value.loadUnaligned(as: UInt32.self)
            default: break
            }
        }
        return route
    }

    /// The destination prefix of a route change, without allocating: a storm delivers one
    /// datagram per route and most of them cover no lookup destination.
    static func parseRoutePrefix(_ body: UnsafeRawBufferPointer) -> RoutePrefix? {
        guard body.count >= 12, let family = AddressFamily(kernel: body[0]) else { return nil }
        var prefix = RoutePrefix(family: family, length: body[1], high: 0, low: 0)
        forEachAttribute(in: body, from: 12) { type, value in
            guard type == rtaDst else { return }
            prefix.load(value)
        }
        return prefix
    }

    static func parseLink(_ body: UnsafeRawBufferPointer) -> LinkInfo? {
        // Only AF_UNSPEC link messages carry the whole link; AF_INET6 (protocol info) and
        // AF_BRIDGE (bridge port) variants lack IFLA_LINKINFO and would erase the link kind.
        guard body.count >= 16, body[0] == 0 else { return nil }
        var link = LinkInfo(index: body.loadUnaligned(fromByteOffset: 4, as: Int32.self), name: "",
                            flags: body.loadUnaligned(fromByteOffset: 8, as: UInt32.self),
                            hardwareType: body.loadUnaligned(fromByteOffset: 2, as: UInt16.self), kind: nil)
        forEachAttribute(in: body, from: 16) { type, value in
            switch type {
            case iflaIfname: link.name = cString(value)
            case iflaLinkinfo:
                forEachAttribute(in: value, from: 0) { nested, nestedValue in
                    if nested == iflaInfoKind { link.kind = cString(nestedValue) }
                }
            default: break
            }
        }
        return link
    }

    static func parseAddress(_ body: UnsafeRawBufferPointer) -> AddressInfo? {
        guard body.count >= 8, let family = AddressFamily(kernel: body[0]) else { return nil }
        var local: [UInt8]?
        var address: [UInt8]?
        var flags = UInt32(body[2])
        forEachAttribute(in: body, from: 8) { type, value in
            switch type {
            case ifaLocal: local = Array(value)
            case ifaAddress: address = Array(value)
            case ifaFlags where value.count >= 4: flags = value.loadUnaligned(as: UInt32.self)
            default: break
            }
        }
        // IPv4 point-to-point links put the peer in IFA_ADDRESS and our own address in IFA_LOCAL.
        guard let bytes = local ?? address, bytes.count == (family == .ipv4 ? 4 : 16) else { return nil }
        return AddressInfo(index: Int32(bitPattern: body.loadUnaligned(fromByteOffset: 4, as: UInt32.self)),
                           family: family, address: bytes, prefixLength: body[1], flags: flags, scope: body[3])
    }

    /// Walks rtattrs (length u16, type u16, value, padded to 4) starting at `start`.
    static func forEachAttribute(in body: UnsafeRawBufferPointer, from start: Int,
                                 _ visit: (UInt16, UnsafeRawBufferPointer) -> Void) {
        var offset = start
        while offset + 4 <= body.count {
            let length = Int(body.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            guard length >= 4, offset + length <= body.count else { return }
            let type = body.loadUnaligned(fromByteOffset: offset + 2, as: UInt16.self) & 0x3fff
            visit(type, UnsafeRawBufferPointer(rebasing: body[(offset + 4)..<(offset + length)]))
            offset += align(length)
        }
    }

    static func cString(_ value: UnsafeRawBufferPointer) -> String {
        let bytes = value.prefix { $0 != 0 }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: Requests

    /// A dump request for links (RTM_GETLINK) or addresses (RTM_GETADDR) of every family.
    static func dumpRequest(type: UInt16, sequence: UInt32) -> [UInt8] {
        // ifinfomsg is 16 bytes; ifaddrmsg is 8. Family 0 (AF_UNSPEC) asks for all families.
        let bodySize = type == getLink ? 16 : 8
        var message = header(length: headerSize + bodySize, type: type, flags: flagRequest | flagDump, sequence: sequence)
        message += [UInt8](repeating: 0, count: bodySize)
        return message
    }

    /// An RTM_GETROUTE lookup for `destination`, exactly what `ip route get` sends; with
    /// `outputInterface`, what `ip route get ADDRESS oif DEV` sends (a link-local address's zone).
    static func routeLookup(destination: [UInt8], outputInterface: Int32? = nil, sequence: UInt32) -> [UInt8] {
        let family = destination.count == 4 ? afInet : afInet6
        var attribute = attributeBytes(type: rtaDst, value: destination)
        if let outputInterface {
            attribute += attributeBytes(type: rtaOif, value: withUnsafeBytes(of: outputInterface.littleEndian, Array.init))
        }
        var message = header(length: headerSize + 12 + attribute.count, type: getRoute, flags: flagRequest, sequence: sequence)
        // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags(u32)
        message += [family, UInt8(destination.count * 8), 0, 0, 0, 0, 0, 0]
        message += withUnsafeBytes(of: rtmFLookupTable.littleEndian, Array.init)
        message += attribute
        return message
    }

    static func header(length: Int, type: UInt16, flags: UInt16, sequence: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(length)
        bytes += withUnsafeBytes(of: UInt32(length).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: type.littleEndian, Array.init)
        bytes += withUnsafeBytes(of: flags.littleEndian, Array.init)
        bytes += withUnsafeBytes(of: sequence.littleEndian, Array.init)
        bytes += [0, 0, 0, 0]  // port id: the kernel fills it in
        return bytes
    }

    static func attributeBytes(type: UInt16, value: [UInt8]) -> [UInt8] {
        let length = 4 + value.count
        var bytes = withUnsafeBytes(of: UInt16(length).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: type.littleEndian, Array.init)
        bytes += value
        bytes += [UInt8](repeating: 0, count: align(length) - length)
        return bytes
    }
}
