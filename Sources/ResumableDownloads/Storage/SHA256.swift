// The only file that imports CCrypto: the project's one SHA-256, libcrypto's, so debug and release
// builds both hash at libcrypto speed. libcrypto is loaded on first use (CCrypto/shim.h). The C
// context stays in here; callers see Swift types.
import CCrypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LinuxSystem

/// An incremental SHA-256 over bytes in order (OpenSSL EVP).
///
/// Not thread-safe and not Sendable: one owner feeds it (`PartialFile` keeps it behind a lock used
/// only by its write queue).
package final class SHA256 {
    /// The loaded function table, or why libcrypto could not be loaded (once per process).
    private static let loaded: Result<Library, DownloadError> = {
        var table = ccrypto_api()
        if let failure = ccrypto_load(&table) {
            return .failure(DownloadError.fileSystem.with(description: "cannot load \(String(cString: ccrypto_library_name())) "
                + "for SHA-256 (\(String(cString: failure))); install OpenSSL (Debian: libssl3)"))
        }
        let api = UnsafeMutablePointer<ccrypto_api>.allocate(capacity: 1)   // never freed: the process's libcrypto
        api.initialize(to: table)
        return .success(Library(table: api))
    }()

    /// The loaded function table. Immutable once loaded, so it may be shared between threads.
    private struct Library: @unchecked Sendable {
        let table: UnsafeMutablePointer<ccrypto_api>
    }

    private let api: UnsafeMutablePointer<ccrypto_api>
    private let context: OpaquePointer
    private var isFinished = false
    /// How many bytes have been hashed (for a file: the prefix of the file covered so far).
    package private(set) var hashedLength: Int64 = 0

    /// Throws, with what to install, when libcrypto cannot be loaded. Call it before a digest is
    /// needed where a missing library must be a clean error (a download with --sha256).
    package static func checkAvailable() throws(DownloadError) {
        _ = try loaded.get()
    }

    /// A fresh digest. libcrypto is a dependency of the package (libcurl's TLS uses the same
    /// library), so a process without it traps here, naming the library; `checkAvailable()` turns
    /// that into an error up front. Creating the context fails only when it cannot allocate,
    /// which also traps, like any Swift allocation.
    package init() {
        let api: UnsafeMutablePointer<ccrypto_api>
        switch Self.loaded {
        case .success(let library): api = library.table
        case .failure(let error): fatalError("\(error)")
        }
        guard let context = ccrypto_sha256_new(api) else {
            fatalError("libcrypto could not create a SHA-256 context (out of memory)")
        }
        self.api = api
        self.context = context
    }

    deinit { ccrypto_sha256_free(api, context) }

    /// Hashes the next bytes.
    package func update(_ bytes: UnsafeRawBufferPointer) {
        guard !isFinished, let base = bytes.baseAddress, !bytes.isEmpty else { return }
        _ = ccrypto_sha256_update(api, context, base, bytes.count)
        hashedLength += Int64(bytes.count)
    }

    /// Hashes the next bytes.
    package func update(_ bytes: some ContiguousBytes) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Hashes a file's bytes from `hashedLength` up to `length`, read with pread so the
    /// descriptor's offset is untouched (catch-up after a resume, or a gap in what was fed).
    /// Stops early at the end of the file; compare `hashedLength` with `length` afterwards.
    package func catchUp(file: FileDescriptor, to length: Int64, path: String) throws {
        guard !isFinished else { throw DownloadError.fileSystem.with(description: "SHA-256 already finalised") }
        try Self.readChunks(file: file, from: hashedLength, to: length, path: path) { update($0) }
    }

    /// The lowercase hex digest of everything hashed; the digest cannot be fed afterwards.
    package func finalize() -> String {
        Self.hexString(finalizeBytes())
    }

    /// The 32 digest bytes of everything hashed; the digest cannot be fed afterwards.
    package func finalizeBytes() -> [UInt8] {
        isFinished = true
        var digest = [UInt8](repeating: 0, count: Int(CCRYPTO_SHA256_LENGTH))
        guard ccrypto_sha256_final(api, context, &digest) == 1 else {
            fatalError("libcrypto failed to finalise a SHA-256 digest")
        }
        return digest
    }

    /// The lowercase hex digest of what has been hashed so far, leaving this digest open for more.
    package func currentHex() -> String {
        guard !isFinished, let copy = ccrypto_sha256_copy(api, context) else { return "" }
        defer { ccrypto_sha256_free(api, copy) }
        var digest = [UInt8](repeating: 0, count: Int(CCRYPTO_SHA256_LENGTH))
        _ = ccrypto_sha256_final(api, copy, &digest)
        return Self.hexString(digest)
    }

    // MARK: one-shot helpers

    /// The one reading of a SHA-256 given as text (a command-line option, a control request,
    /// `DownloadOptions`, a record read back): exactly 64 ASCII hexadecimal digits in either case,
    /// returned in lowercase, the form records keep and digests are compared in; nil for anything
    /// else (fullwidth digits too, which `Character.isHexDigit` accepts).
    package static func normalizedHexDigest(_ text: String) -> String? {
        let utf8 = text.utf8
        guard utf8.count == 64, utf8.allSatisfy({ byte in
            (48...57).contains(byte) || (65...70).contains(byte) || (97...102).contains(byte)
        }) else { return nil }
        return text.lowercased()
    }

    /// The lowercase hex digest of `bytes`.
    package static func hex(_ bytes: some ContiguousBytes) -> String {
        let digest = SHA256()
        digest.update(bytes)
        return digest.finalize()
    }

    /// The lowercase hex digest of the first `length` bytes of an open file (pread: the
    /// descriptor's offset is untouched). A file shorter than `length` hashes what it has.
    package static func hex(file: FileDescriptor, length: Int64, path: String) throws -> String {
        let digest = SHA256()
        try digest.catchUp(file: file, to: length, path: path)
        return digest.finalize()
    }

    /// The lowercase hex digest of the whole regular file at `path`; nil when it is not a
    /// regular file, cannot be opened or read, or `isCancelled` (asked between 16 MiB pieces)
    /// says stop. Never follows a final symlink, and never waits for a FIFO's writer or a
    /// device (the open does not block; anything but a regular file is refused).
    package static func hex(ofFileAt path: String, isCancelled: () -> Bool = { false }) -> String? {
        guard (try? checkAvailable()) != nil else { return nil }
        guard let file = try? FileDescriptor.openForReading(path, followingLinks: false, nonBlocking: true) else { return nil }
        defer { file.close() }
        guard (try? file.status())?.kind == .regular else { return nil }
        let digest = SHA256()
        var end: Int64 = 0
        repeat {
            guard !isCancelled() else { return nil }
            end += 16 << 20
            guard (try? digest.catchUp(file: file, to: end, path: path)) != nil else { return nil }
        } while digest.hashedLength == end
        return digest.finalize()
    }

    // MARK: private

    private static let chunkSize = 1 << 20

    /// Calls `body` with successive chunks of the file in [start, end), stopping early at EOF.
    private static func readChunks(file: FileDescriptor, from start: Int64, to end: Int64, path: String,
                                   _ body: (UnsafeRawBufferPointer) -> Void) throws {
        guard start < end else { return }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset = start
        while offset < end {
            let wanted = Int(min(Int64(chunkSize), end - offset))
            let count: Int
            do {
                count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: offset)
            } catch {
                throw DownloadError.fileSystem("read", path: path, errno: error.rawValue)
            }
            if count == 0 { return }
            body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += Int64(count)
        }
    }

    private static func hexString(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
