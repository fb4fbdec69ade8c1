/// The space on the file system that holds a path (statvfs(3)): what the free-space rule reads.
package struct FileSystemSpace: Sendable, Hashable {
    /// Bytes an unprivileged writer may still use (root's reserved blocks left out).
    package var availableBytes: Int64
    /// The file system's size.
    package var totalBytes: Int64
    /// Tells file systems apart (`f_fsid`): jobs writing to one share its free space.
    package var identifier: UInt64

    package init(availableBytes: Int64, totalBytes: Int64, identifier: UInt64 = 0) {
        self.availableBytes = availableBytes
        self.totalBytes = totalBytes
        self.identifier = identifier
    }

    /// The space of the file system holding `path` (a directory or a file; links followed).
    package static func of(_ path: String) throws(Errno) -> FileSystemSpace {
        let space = try Syscall.fileSystemSpace(path)
        return FileSystemSpace(availableBytes: space.available, totalBytes: space.total, identifier: space.identifier)
    }
}
