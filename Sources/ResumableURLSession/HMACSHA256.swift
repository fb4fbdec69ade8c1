import Foundation
import ResumableDownloads

/// HMAC-SHA256 (RFC 2104) over the project's one SHA-256 (libcrypto's, in `ResumableDownloads`).
/// It authenticates resume data with the state directory's key, so a blob that was altered or
/// made elsewhere is refused before any field of it is believed.
enum HMACSHA256 {
    static let blockSize = 64
    static let length = 32

    static func authenticationCode(key: [UInt8], message: [Data]) -> [UInt8] {
        var block = key.count > blockSize ? digest([Data(key)]) : key
        block += [UInt8](repeating: 0, count: blockSize - block.count)
        let inner = digest([Data(block.map { $0 ^ 0x36 })] + message)
        return digest([Data(block.map { $0 ^ 0x5c }), Data(inner)])
    }

    /// Compares in time independent of where the first difference is.
    static func isEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }

    private static func digest(_ parts: [Data]) -> [UInt8] {
        let sha = SHA256()
        for part in parts { sha.update(part) }
        // The digest API speaks hex; two nibbles per byte back to bytes.
        let hex = Array(sha.finalize().utf8)
        return stride(from: 0, to: hex.count, by: 2).map { nibble(hex[$0]) << 4 | nibble(hex[$0 + 1]) }
    }

    private static func nibble(_ digit: UInt8) -> UInt8 {
        digit >= UInt8(ascii: "a") ? digit - UInt8(ascii: "a") + 10 : digit - UInt8(ascii: "0")
    }
}
