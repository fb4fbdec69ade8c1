import FoundationEssentials
import Glibc
import Synchronization

/// Appends lines to `agent.log` (0600) and rotates it at `maximumSize` bytes to `agent.log.1`,
/// keeping `keep` old files. Thread-safe; a failed write is dropped (stdout still has the line).
final class RotatingLogFile: Sendable {
    let path: String
    let maximumSize: Int
    let keep: Int
    private struct State { var descriptor: Int32; var size: Int }
    private let state: Mutex<State>

    init(path: String, maximumSize: Int = 1 << 20, keep: Int = 3) throws {
        self.path = path
        self.maximumSize = max(1024, maximumSize)
        self.keep = max(1, keep)
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CommandFailure(message: "cannot open \(path): \(String(cString: strerror(errno)))", exitCode: .failure)
        }
        var info = stat()
        fstat(descriptor, &info)
        state = Mutex(State(descriptor: descriptor, size: Int(info.st_size)))
    }

    /// Appends `line` and a newline in one write(2).
    func append(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        state.withLock { state in
            if state.size > 0, state.size + bytes.count > maximumSize { rotate(&state) }
            let written = bytes.withUnsafeBytes { write(state.descriptor, $0.baseAddress, $0.count) }
            if written > 0 { state.size += written }
        }
    }

    private func rotate(_ state: inout State) {
        close(state.descriptor)
        unlink("\(path).\(keep)")
        for index in stride(from: keep - 1, through: 1, by: -1) { rename("\(path).\(index)", "\(path).\(index + 1)") }
        rename(path, "\(path).1")
        state.descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        state.size = 0
    }

    deinit { _ = state.withLock { close($0.descriptor) } }
}
