import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An eventfd that wakes a thread blocked in poll(2): the monitor's `cancel()`, a finished
/// host-name lookup, a check to start. Closed once, under the same lock as every signal, so a
/// thread that signals after the owner has finished can never write into a descriptor number
/// reused by then.
package final class WakeSignal: Sendable {
    private let descriptor: Mutex<FileDescriptor?>
    /// For poll(2) on the owning thread, which alone closes it.
    package let pollDescriptor: FileDescriptor

    package init() throws(Errno) {
        let opened = FileDescriptor(rawValue: try Syscall.eventfd())
        descriptor = Mutex(opened)
        pollDescriptor = opened
    }

    /// Adds one to the counter, waking whoever polls it.
    package func signal() {
        descriptor.withLock { descriptor in
            guard let descriptor else { return }
            var one: UInt64 = 1
            _ = withUnsafeBytes(of: &one) { try? Syscall.write(descriptor.rawValue, $0) }
        }
    }

    /// Resets the counter after poll(2) reported it readable (the read cannot block then).
    package func reset() {
        descriptor.withLock { descriptor in
            guard let descriptor else { return }
            var value: UInt64 = 0
            _ = withUnsafeMutableBytes(of: &value) { try? Syscall.read(descriptor.rawValue, $0) }
        }
    }

    package func close() {
        descriptor.withLock { descriptor in
            descriptor?.close()
            descriptor = nil
        }
    }
}
