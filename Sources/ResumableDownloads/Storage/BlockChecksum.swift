/// XXH64 (Yann Collet's xxHash, 64-bit), streaming: the crash journal's per-block checksum.
///
/// The journal needs to tell a block that reached the disk from one a power loss tore, zeroed or
/// never wrote; a 64-bit checksum leaves a 2^-64 chance per block of keeping a damaged one. It
/// needs no resistance to forgery: whoever could plant entries could as well rewrite the files
/// they vouch for (see `BlockJournal`). SHA-256 did the job at 1.8 GB/s and took a third of the
/// write queue's time on a loopback download; this runs at several GB/s in release builds.
///
/// Written from the algorithm's published description; the tests check the reference vectors.
struct BlockChecksum {
    static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    private let seed: UInt64
    private var v1: UInt64
    private var v2: UInt64
    private var v3: UInt64
    private var v4: UInt64
    /// Bytes of an incomplete 32-byte stripe.
    private var pending: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    private var pendingCount = 0
    private var length: UInt64 = 0

    init(seed: UInt64 = 0) {
        self.seed = seed
        v1 = seed &+ Self.prime1 &+ Self.prime2
        v2 = seed &+ Self.prime2
        v3 = seed
        v4 = seed &- Self.prime1
    }

    /// The checksum of `bytes` in one call.
    static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        var checksum = BlockChecksum(seed: seed)
        checksum.update(bytes)
        return checksum.finalize()
    }

    @inline(__always)
    private static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
        let sum = accumulator &+ input &* prime2
        return ((sum << 31) | (sum >> 33)) &* prime1
    }

    @inline(__always)
    private static func merge(_ hash: UInt64, _ value: UInt64) -> UInt64 {
        (hash ^ round(0, value)) &* prime1 &+ prime4
    }

    @inline(__always)
    private static func rotate(_ value: UInt64, _ count: UInt64) -> UInt64 {
        (value << count) | (value >> (64 - count))
    }

    @inline(__always)
    private mutating func stripe(_ a: UInt64, _ b: UInt64, _ c: UInt64, _ d: UInt64) {
        v1 = Self.round(v1, a)
        v2 = Self.round(v2, b)
        v3 = Self.round(v3, c)
        v4 = Self.round(v4, d)
    }

    /// Feeds the next bytes.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty, let base = bytes.baseAddress else { return }
        length &+= UInt64(bytes.count)
        var offset = 0
        if pendingCount > 0 {
            // Complete the pending stripe byte by byte (at most 31 bytes).
            withUnsafeMutableBytes(of: &pending) { stripeBytes in
                while pendingCount < 32, offset < bytes.count {
                    stripeBytes[pendingCount] = bytes[offset]
                    pendingCount += 1
                    offset += 1
                }
            }
            guard pendingCount == 32 else { return }
            stripe(UInt64(littleEndian: pending.0), UInt64(littleEndian: pending.1),
                   UInt64(littleEndian: pending.2), UInt64(littleEndian: pending.3))
            pendingCount = 0
        }
        // The hot loop on locals, so the four lanes stay in registers.
        var (a, b, c, d) = (v1, v2, v3, v4)
        var p = base + offset
        let stripes = (bytes.count - offset) / 32
        for _ in 0..<stripes {
            a = Self.round(a, UInt64(littleEndian: p.loadUnaligned(as: UInt64.self)))
            b = Self.round(b, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
            c = Self.round(c, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))
            d = Self.round(d, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 24, as: UInt64.self)))
            p += 32
        }
        (v1, v2, v3, v4) = (a, b, c, d)
        offset += stripes * 32
        if offset < bytes.count {
            withUnsafeMutableBytes(of: &pending) { stripeBytes in
                while offset < bytes.count {
                    stripeBytes[pendingCount] = bytes[offset]
                    pendingCount += 1
                    offset += 1
                }
            }
        }
    }

    /// The checksum of everything fed.
    func finalize() -> UInt64 {
        var hash: UInt64
        if length >= 32 {
            hash = Self.rotate(v1, 1) &+ Self.rotate(v2, 7) &+ Self.rotate(v3, 12) &+ Self.rotate(v4, 18)
            hash = Self.merge(hash, v1)
            hash = Self.merge(hash, v2)
            hash = Self.merge(hash, v3)
            hash = Self.merge(hash, v4)
        } else {
            hash = seed &+ Self.prime5
        }
        hash &+= length
        var tail = pending
        let count = pendingCount
        withUnsafeBytes(of: &tail) { rest in
            var offset = 0
            while count - offset >= 8 {
                hash ^= Self.round(0, UInt64(littleEndian: rest.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
                hash = Self.rotate(hash, 27) &* Self.prime1 &+ Self.prime4
                offset += 8
            }
            if count - offset >= 4 {
                hash ^= UInt64(UInt32(littleEndian: rest.loadUnaligned(fromByteOffset: offset, as: UInt32.self))) &* Self.prime1
                hash = Self.rotate(hash, 23) &* Self.prime2 &+ Self.prime3
                offset += 4
            }
            while offset < count {
                hash ^= UInt64(rest[offset]) &* Self.prime5
                hash = Self.rotate(hash, 11) &* Self.prime1
                offset += 1
            }
        }
        hash ^= hash >> 33
        hash &*= Self.prime2
        hash ^= hash >> 29
        hash &*= Self.prime3
        hash ^= hash >> 32
        return hash
    }
}
