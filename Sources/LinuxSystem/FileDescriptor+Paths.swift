#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Opening by path, for what is not a state file (those go through `CheckedDirectory`): sysfs,
/// /run/netns, a finished download read back for stdout.
extension FileDescriptor {
    /// Opens `path` read-only and close-on-exec; relative paths resolve against `directory`
    /// (the working directory when nil). Without `followingLinks`, a final symbolic link is
    /// refused (ELOOP); `nonBlocking` never waits for a FIFO's writer or a device.
    package static func openForReading(_ path: String, relativeTo directory: FileDescriptor? = nil,
                                       followingLinks: Bool = true, isDirectory: Bool = false,
                                       nonBlocking: Bool = false) throws(Errno) -> FileDescriptor {
        let flags = O_RDONLY | O_CLOEXEC | (followingLinks ? 0 : O_NOFOLLOW) | (isDirectory ? O_DIRECTORY : 0)
            | (nonBlocking ? O_NONBLOCK : 0)
        return FileDescriptor(rawValue: try Syscall.openat(directory?.rawValue ?? AT_FDCWD, path, flags, 0))
    }

    /// Whether the descriptor was opened for reading (O_RDONLY or O_RDWR, not O_PATH): one
    /// another process passed may be write-only or a bare path handle, which `pread` refuses.
    package var isOpenForReading: Bool {
        guard let flags = try? Syscall.fcntlGetFlags(rawValue) else { return false }
        let mode = flags & O_ACCMODE
        let pathOnly: Int32 = 0o10000000   // O_PATH, declared by glibc only with _GNU_SOURCE
        return flags & pathOnly == 0 && (mode == O_RDONLY || mode == O_RDWR)
    }

    /// Reads up to `buffer.count` bytes at the current position; 0 at the end of the file.
    package func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try Syscall.read(rawValue, buffer)
    }

    /// The target of the symbolic link at `path` relative to this directory.
    package func readLink(at path: String) throws(Errno) -> String {
        try Syscall.readlink(rawValue, path)
    }

    /// Whether `path` relative to this directory exists (following links).
    package func exists(at path: String) -> Bool {
        (try? Syscall.faccessat(rawValue, path)) != nil
    }

    /// Whether this is a terminal.
    package var isTerminal: Bool { Syscall.isTerminal(rawValue) }

    /// The terminal's width in columns; nil when this is not a terminal (or says 0).
    package var terminalColumns: Int? {
        guard let columns = try? Syscall.terminalColumns(rawValue), columns > 0 else { return nil }
        return columns
    }

    /// Moves the calling thread (only: setns is per thread) into the network namespace this
    /// descriptor names (/run/netns/NAME).
    package func enterNetworkNamespace() throws(Errno) {
        try Syscall.setNetworkNamespace(rawValue)
    }

    /// A directory descriptor onto a private, read-only sysfs that shows the calling thread's
    /// network namespace (after `enterNetworkNamespace`, /sys still shows the old one).
    package static func openPrivateSysfs() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try Syscall.openPrivateSysfs())
    }
}

/// Path operations outside a checked directory.
package enum FileSystem {
    /// The status of `path`; nil when it does not exist. `followingLinks` false: the link itself.
    package static func status(ofPath path: String, followingLinks: Bool) throws(Errno) -> FileStatus? {
        do {
            return FileStatus(try Syscall.statPath(path, followingSymlinks: followingLinks))
        } catch where error == .noSuchFile {
            return nil
        }
    }

    /// Removes the file (or link) at `path`; a missing one is not an error.
    package static func remove(_ path: String) throws(Errno) {
        do { try Syscall.unlinkat(AT_FDCWD, path, removingDirectory: false) } catch where error == .noSuchFile {}
    }

    /// Removes the empty directory at `path`; false when it is not empty or missing.
    @discardableResult
    package static func removeDirectory(_ path: String) -> Bool {
        (try? Syscall.unlinkat(AT_FDCWD, path, removingDirectory: true)) != nil
    }
}
