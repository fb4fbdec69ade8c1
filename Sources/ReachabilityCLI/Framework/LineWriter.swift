#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes whole lines to a destination, each one immediately, so `watch | grep` sees every line
/// as it happens (stdio would block-buffer stdout when it is a pipe).
struct LineWriter: Sendable {
    /// Receives text that already ends in a newline.
    let write: @Sendable (String) -> Void

    /// Writes `text` plus a newline.
    func line(_ text: String) { write(text + "\n") }

    /// Writes text that already ends in newlines (help blocks).
    func text(_ text: String) { write(text) }

    /// Unbuffered writes to file descriptor 1.
    static let standardOutput = LineWriter(fileDescriptor: 1)
    /// Unbuffered writes to file descriptor 2.
    static let standardError = LineWriter(fileDescriptor: 2)

    /// Writes with write(2) in one loop; retries on EINTR and short writes. Other errors
    /// (EPIPE when the reader went away with SIGPIPE ignored) drop the line: there is nobody to tell.
    init(fileDescriptor: Int32) {
        write = { text in
            var bytes = Array(text.utf8)[...]
            while !bytes.isEmpty {
                let written = bytes.withUnsafeBytes { systemWrite(fileDescriptor, $0.baseAddress, $0.count) }
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                bytes = bytes.dropFirst(written)
            }
        }
    }

    /// A writer that hands every chunk to `write`.
    init(_ write: @escaping @Sendable (String) -> Void) {
        self.write = write
    }
}

/// write(2), named apart from `LineWriter.write`.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer?, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}
