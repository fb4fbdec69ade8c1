import LinuxSystem

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
    static let standardOutput = LineWriter(.standardOutput)
    /// Unbuffered writes to file descriptor 2.
    static let standardError = LineWriter(.standardError)

    /// Writes each text whole (`FileDescriptor.writeAll`). Errors (EPIPE when the reader went
    /// away with SIGPIPE ignored) drop the line: there is nobody to tell.
    init(_ descriptor: FileDescriptor) {
        write = { text in try? descriptor.writeAll(Array(text.utf8)) }
    }

    /// A writer that hands every chunk to `write`.
    init(_ write: @escaping @Sendable (String) -> Void) {
        self.write = write
    }
}
