import Foundation
import LinuxSystem
import Testing
@testable import ResumableDownloads
import TestSupport

/// The project's one SHA-256 (libcrypto): FIPS 180-4 vectors, incremental feeding, files.
@Suite("SHA-256")
struct SHA256Tests {
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ])
    func vectors(_ text: String, _ digest: String) throws {
        #expect(SHA256.hex(Array(text.utf8)) == digest)
        #expect(SHA256.hex(Data(text.utf8)) == digest)
    }

    /// Issue 20: the command line, the control protocol and records read back checked digests
    /// three ways (one accepted fullwidth digits, one only lowercase). Now one rule: 64 ASCII
    /// hex digits in either case, kept in lowercase.
    @Test func oneHexDigestRule() {
        let lower = String(repeating: "ab", count: 32)
        #expect(SHA256.normalizedHexDigest(lower) == lower)
        #expect(SHA256.normalizedHexDigest(lower.uppercased()) == lower)
        #expect(SHA256.normalizedHexDigest("Ab" + String(lower.dropFirst(2))) == lower)
        for bad in ["", String(lower.dropFirst()), lower + "a", String(repeating: "g", count: 64),
                    String(repeating: "０", count: 64), " " + String(lower.dropFirst()), String(lower.dropLast()) + "\n"] {
            #expect(SHA256.normalizedHexDigest(bad) == nil, "\(bad)")
        }
    }

    @Test func millionAsInPiecesOfOddSizes() throws {
        let hasher = SHA256()
        var remaining = 1_000_000
        var piece = 1
        while remaining > 0 {
            let count = min(piece, remaining)
            hasher.update([UInt8](repeating: UInt8(ascii: "a"), count: count))
            remaining -= count
            piece = piece * 3 + 7
        }
        #expect(hasher.hashedLength == 1_000_000)
        #expect(hasher.currentHex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        #expect(hasher.finalize() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test func currentHexLeavesTheDigestOpen() throws {
        let hasher = SHA256()
        hasher.update(Array("ab".utf8))
        #expect(hasher.currentHex() == SHA256.hex(Array("ab".utf8)))
        hasher.update(Array("c".utf8))
        #expect(hasher.finalize() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func filesAndCatchUp() throws {
        let scratch = try ScratchDirectory("sha")
        let directory = scratch.url
        let path = directory.appendingPathComponent("f").path
        let bytes = (0..<(3 << 20) + 123).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let expected = SHA256.hex(bytes)
        #expect(SHA256.hex(ofFileAt: path) == expected)
        #expect(SHA256.hex(ofFileAt: path + ".missing") == nil)
        #expect(SHA256.hex(ofFileAt: directory.path) == nil)   // not a regular file

        // A final symlink is never followed.
        let link = directory.appendingPathComponent("link").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        #expect(SHA256.hex(ofFileAt: link) == nil)

        let fd = open(path, O_RDONLY | O_CLOEXEC)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(try SHA256.hex(file: FileDescriptor(rawValue: fd), length: Int64(bytes.count), path: path) == expected)
        #expect(try SHA256.hex(file: FileDescriptor(rawValue: fd), length: 3, path: path) == SHA256.hex(Array(bytes[0..<3])))

        // Fed bytes, then the rest from the file.
        let hasher = SHA256()
        hasher.update(Array(bytes[0..<1000]))
        try hasher.catchUp(file: FileDescriptor(rawValue: fd), to: Int64(bytes.count) + 50, path: path)   // stops at EOF
        #expect(hasher.hashedLength == Int64(bytes.count))
        #expect(hasher.finalize() == expected)
    }
}
