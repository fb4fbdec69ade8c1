#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// poll(2) over a few descriptors: the monitor thread's one wait, for netlink, its wake signal,
/// the connectivity probe's socket and the system bus's (which can want both directions).
package struct PollEntry: Sendable {
    /// What to wait for.
    package enum Interest: Sendable { case readable, writable, readableOrWritable }

    package var descriptor: FileDescriptor
    package var interest: Interest
    /// After `Poll.wait`: whether the descriptor is ready, or has an error or hang-up to read.
    package var isReady = false

    package init(_ descriptor: FileDescriptor, _ interest: Interest) {
        self.descriptor = descriptor
        self.interest = interest
    }
}

package enum Poll {
    /// Waits until one of `entries` is ready or `timeoutMilliseconds` pass (-1: no limit), and
    /// marks the ready ones. An interrupted wait is retried with the same timeout (the callers
    /// recompute their deadlines on every return).
    package static func wait(_ entries: inout [PollEntry], timeoutMilliseconds: Int32) throws(Errno) {
        var descriptors = entries.map { entry -> pollfd in
            let events = switch entry.interest {
            case .readable: POLLIN
            case .writable: POLLOUT
            case .readableOrWritable: POLLIN | POLLOUT
            }
            return pollfd(fd: entry.descriptor.rawValue, events: Int16(events), revents: 0)
        }
        _ = try Syscall.poll(&descriptors, timeoutMilliseconds)
        for index in entries.indices { entries[index].isReady = descriptors[index].revents != 0 }
    }
}
