/// A classic BPF program for the event socket that drops, inside the kernel, the notifications a
/// path can never depend on, so they cost no wake-up, no copy and no parse.
///
/// Measured on 2,000 veth pairs created and deleted and on 2M-route storms: the monitor's CPU was
/// wake-ups and receive syscalls, one per notification, as for `ip monitor`. Dropped here:
/// - address messages of link, host or nowhere scope (IPv6 link-locals come and go with every
///   link; `NetworkInterface.addresses` lists only usable addresses);
/// - route messages whose destination prefix covers none of the lookup destinations (host and
///   subnet routes of a storm, `fe80::/64`, multicast and local routes).
/// Everything else (links, rules, default and covering routes, anything unexpected or short) is
/// accepted, and the engine applies the same test again in user space, so a kernel that laid
/// out a message differently costs only the saving, never a change.
///
/// rtnetlink notifications are one message per datagram, so the filter sees each whole. The
/// kernel writes RTA_TABLE first and RTA_DST right after it (`fib_dump_info`, `rt6_fill_node`);
/// the filter checks that the attribute at that offset is RTA_DST before trusting it.
enum EventFilter {
    /// One `struct sock_filter`.
    struct Instruction: Equatable, Sendable {
        var code: UInt16
        var jumpIfTrue: UInt8
        var jumpIfFalse: UInt8
        var constant: UInt32
    }

    // Opcodes from <linux/filter.h> (classic BPF, stable ABI).
    static let loadWordAbsolute: UInt16 = 0x20   // BPF_LD | BPF_W | BPF_ABS
    static let loadHalfAbsolute: UInt16 = 0x28   // BPF_LD | BPF_H | BPF_ABS
    static let loadByteAbsolute: UInt16 = 0x30   // BPF_LD | BPF_B | BPF_ABS
    static let loadLength: UInt16 = 0x80         // BPF_LD | BPF_W | BPF_LEN
    static let loadImmediate: UInt16 = 0x00      // BPF_LD | BPF_IMM
    static let loadScratch: UInt16 = 0x60        // BPF_LD | BPF_MEM
    static let storeScratch: UInt16 = 0x02       // BPF_ST
    static let jumpEqual: UInt16 = 0x15          // BPF_JMP | BPF_JEQ | BPF_K
    static let jumpEqualX: UInt16 = 0x1d         // BPF_JMP | BPF_JEQ | BPF_X
    static let jumpGreater: UInt16 = 0x25        // BPF_JMP | BPF_JGT | BPF_K
    static let jumpGreaterOrEqual: UInt16 = 0x35 // BPF_JMP | BPF_JGE | BPF_K
    static let jumpAlways: UInt16 = 0x05         // BPF_JMP | BPF_JA
    static let subtract: UInt16 = 0x14           // BPF_ALU | BPF_SUB | BPF_K
    static let add: UInt16 = 0x04                // BPF_ALU | BPF_ADD | BPF_K
    static let negate: UInt16 = 0x84             // BPF_ALU | BPF_NEG
    static let andX: UInt16 = 0x5c               // BPF_ALU | BPF_AND | BPF_X
    static let shiftLeftX: UInt16 = 0x6c         // BPF_ALU | BPF_LSH | BPF_X
    static let moveToX: UInt16 = 0x07            // BPF_MISC | BPF_TAX
    static let returnConstant: UInt16 = 0x06     // BPF_RET | BPF_K

    static let accept: UInt32 = 0xFFFF_FFFF
    static let drop: UInt32 = 0

    /// Offsets in a datagram: nlmsghdr (16 bytes), then ifaddrmsg or rtmsg, then attributes.
    static let typeOffset: UInt32 = 4
    static let addressScopeOffset: UInt32 = 16 + 3
    static let routeFamilyOffset: UInt32 = 16
    static let routeLengthOffset: UInt32 = 16 + 1
    /// rtmsg (12) + RTA_TABLE (8): the second attribute's header, then its value.
    static let secondAttributeTypeOffset: UInt32 = 16 + 12 + 8 + 2
    static let destinationOffset: UInt32 = 16 + 12 + 8 + 4

    /// The program for these lookup destinations (one IPv4, one IPv6, as the engine uses).
    static func program(destinations: [RoutePrefix]) -> [Instruction] {
        var assembler = Assembler()
        let ipv4 = destinations.first { $0.family == .ipv4 }
        let ipv6 = destinations.first { $0.family == .ipv6 }

        assembler.emit(loadHalfAbsolute, typeOffset)
        for type in [RTNetlink.newRoute, RTNetlink.delRoute] { assembler.jump(jumpEqual, hostOrder(type), ifTrue: "route") }
        for type in [RTNetlink.newAddr, RTNetlink.delAddr] { assembler.jump(jumpEqual, hostOrder(type), ifTrue: "address") }
        assembler.emit(returnConstant, accept)

        assembler.label("address")
        assembler.emit(loadLength, 0)
        assembler.jump(jumpGreaterOrEqual, addressScopeOffset + 1, ifFalse: "accept")
        assembler.emit(loadByteAbsolute, addressScopeOffset)
        assembler.jump(jumpGreaterOrEqual, UInt32(RTNetlink.scopeLink), ifTrue: "drop")
        assembler.emit(returnConstant, accept)

        assembler.label("route")
        assembler.emit(loadLength, 0)
        assembler.jump(jumpGreaterOrEqual, destinationOffset + 4, ifFalse: "accept")
        assembler.emit(loadByteAbsolute, routeLengthOffset)
        assembler.jump(jumpEqual, 0, ifTrue: "accept")  // a default route covers everything
        assembler.emit(loadHalfAbsolute, secondAttributeTypeOffset)
        assembler.jump(jumpEqual, hostOrder(RTNetlink.rtaDst), ifFalse: "accept")
        assembler.emit(loadByteAbsolute, routeFamilyOffset)
        assembler.jump(jumpEqual, UInt32(RTNetlink.afInet), ifTrue: "ipv4")
        assembler.jump(jumpEqual, UInt32(RTNetlink.afInet6), ifTrue: "ipv6")
        assembler.emit(returnConstant, accept)

        assembler.label("ipv4")
        if let ipv4 {
            assembler.emit(loadByteAbsolute, routeLengthOffset)
            assembler.jump(jumpGreater, 32, ifTrue: "accept")
            compareWord(0, of: ipv4, in: &assembler)
            assembler.emit(returnConstant, accept)
        } else {
            assembler.emit(returnConstant, drop)
        }

        assembler.label("ipv6")
        if let ipv6 {
            assembler.emit(loadLength, 0)
            assembler.jump(jumpGreaterOrEqual, destinationOffset + 16, ifFalse: "accept")
            for word in 0..<4 { compareWord(word, of: ipv6, in: &assembler) }
            assembler.emit(returnConstant, accept)
        } else {
            assembler.emit(returnConstant, drop)
        }

        assembler.label("accept")
        assembler.emit(returnConstant, accept)
        assembler.label("drop")
        assembler.emit(returnConstant, drop)
        return assembler.assemble()
    }

    /// Drops the datagram unless 32-bit word `word` of the route's destination, masked to the
    /// prefix bits that fall in it, equals the same bits of `destination`. Accepts once the
    /// prefix has no bits left (every earlier word matched).
    private static func compareWord(_ word: Int, of destination: RoutePrefix, in assembler: inout Assembler) {
        let first = UInt32(word * 32)
        assembler.emit(loadByteAbsolute, routeLengthOffset)
        assembler.jump(jumpGreater, first, ifFalse: "accept")
        assembler.emit(subtract, first)
        let skip = assembler.uniqueLabel()
        assembler.jump(jumpGreater, 32, ifFalse: skip)
        assembler.emit(loadImmediate, 32)
        assembler.label(skip)
        // mask = 0xFFFFFFFF << (32 - bits)
        assembler.emit(negate, 0)
        assembler.emit(add, 32)
        assembler.emit(moveToX, 0)
        assembler.emit(loadImmediate, 0xFFFF_FFFF)
        assembler.emit(shiftLeftX, 0)
        assembler.emit(moveToX, 0)
        assembler.emit(loadWordAbsolute, destinationOffset + UInt32(word * 4))
        assembler.emit(andX, 0)
        assembler.emit(storeScratch, 0)
        assembler.emit(loadImmediate, destinationWord(destination, word))
        assembler.emit(andX, 0)
        assembler.emit(moveToX, 0)
        assembler.emit(loadScratch, 0)
        assembler.jump(jumpEqualX, 0, ifFalse: "drop")
    }

    /// Word `word` (0-3) of an address in network order, as BPF_ABS loads read it.
    static func destinationWord(_ prefix: RoutePrefix, _ word: Int) -> UInt32 {
        let half = word < 2 ? prefix.high : prefix.low
        return UInt32(truncatingIfNeeded: word % 2 == 0 ? half >> 32 : half)
    }

    /// BPF_ABS loads read big-endian; netlink headers are in host order.
    static func hostOrder(_ value: UInt16) -> UInt32 { UInt32(value.bigEndian) }

    /// Forward jumps by label, resolved once the program is complete.
    struct Assembler {
        private var instructions: [(Instruction, ifTrue: String?, ifFalse: String?)] = []
        private var labels: [String: Int] = [:]
        private var counter = 0

        mutating func emit(_ code: UInt16, _ constant: UInt32) {
            instructions.append((Instruction(code: code, jumpIfTrue: 0, jumpIfFalse: 0, constant: constant), nil, nil))
        }

        mutating func jump(_ code: UInt16, _ constant: UInt32, ifTrue: String? = nil, ifFalse: String? = nil) {
            instructions.append((Instruction(code: code, jumpIfTrue: 0, jumpIfFalse: 0, constant: constant), ifTrue, ifFalse))
        }

        mutating func label(_ name: String) { labels[name] = instructions.count }

        mutating func uniqueLabel() -> String {
            counter += 1
            return "local\(counter)"
        }

        func assemble() -> [Instruction] {
            instructions.enumerated().map { position, entry in
                var instruction = entry.0
                func offset(_ label: String?) -> UInt8 {
                    guard let label else { return 0 }
                    guard let target = labels[label], target > position, target - position - 1 <= 255 else {
                        preconditionFailure("BPF jump to \(label) from \(position) cannot be encoded")
                    }
                    return UInt8(target - position - 1)
                }
                instruction.jumpIfTrue = offset(entry.ifTrue)
                instruction.jumpIfFalse = offset(entry.ifFalse)
                return instruction
            }
        }
    }
}
