import FoundationEssentials
import LinuxSystem
import Synchronization
import ReachabilityEvents

/// Appends lines to `agent.log` (0600) and rotates it at `maximumSize` bytes to `agent.log.1`,
/// keeping `keep` old files. Thread-safe; a failed write is dropped (stdout still has the line).
/// Every file is reached relative to the checked state directory, never through a link.
package final class RotatingLogFile: Sendable {
    package let directory: CheckedDirectory
    package let name: String
    package let maximumSize: Int
    package let keep: Int
    private struct State { var descriptor: FileDescriptor?; var size: Int }
    private let state: Mutex<State>

    /// The log's path, for messages.
    package var path: String { directory.child(name) }

    package init(directory: CheckedDirectory, name: String = "agent.log", maximumSize: Int = 1 << 20, keep: Int = 3) throws {
        self.directory = directory
        self.name = name
        self.maximumSize = max(1024, maximumSize)
        self.keep = max(1, keep)
        let opened: CheckedDirectory.OpenedFile
        do {
            opened = try directory.openOwnedFile(name, creating: .openOrCreate, mode: 0o600, appending: true)
        } catch {
            throw AgentFailure("cannot open \(directory.child(name)): \(error)", kind: error.isUnsafe ? .configuration : .unavailable)
        }
        state = Mutex(State(descriptor: opened.descriptor, size: Int(opened.status.size)))
    }

    /// Appends `line` and a newline in one write(2).
    package func append(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        state.withLock { state in
            if state.size > 0, state.size + bytes.count > maximumSize { rotate(&state) }
            guard let descriptor = state.descriptor else { return }
            if (try? bytes.withUnsafeBytes { raw in try Result { () throws(Errno) in try descriptor.writeAll(raw) }.get() }) != nil {
                state.size += bytes.count
            }
        }
    }

    private func rotate(_ state: inout State) {
        state.descriptor?.close()
        try? directory.remove("\(name).\(keep)")
        for index in stride(from: keep - 1, through: 1, by: -1) {
            try? directory.rename("\(name).\(index)", to: "\(name).\(index + 1)", replacing: true)
        }
        try? directory.rename(name, to: "\(name).1", replacing: true)
        state.descriptor = try? directory.openOwnedFile(name, creating: .openOrCreate, mode: 0o600, appending: true).descriptor
        state.size = 0
    }

    deinit { state.withLock { $0.descriptor?.close() } }
}
