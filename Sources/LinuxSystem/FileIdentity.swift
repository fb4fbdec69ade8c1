/// What tells one file from another, and a file from itself changed: device, inode, size and
/// modification time (in nanoseconds). Device and inode alone are not enough: a file deleted and
/// created again often gets the same inode number back. The one such value of the package: an
/// upload's source file and a URL session's partial file are both checked with it.
package struct FileIdentity: Codable, Sendable, Hashable {
    package var size: Int64
    /// Modification time in nanoseconds since 1970.
    package var modified: Int64
    package var device: UInt64
    package var inode: UInt64

    /// The identity `fstat` gives.
    package init(_ status: FileStatus) {
        size = status.size
        modified = status.modified
        device = status.device
        inode = status.inode
    }

    /// An identity from its parts.
    package init(size: Int64, modified: Int64, device: UInt64, inode: UInt64) {
        self.size = size
        self.modified = modified
        self.device = device
        self.inode = inode
    }

    /// How `status` differs from this identity, nil when it is the same file, unchanged.
    package func change(to status: FileStatus) -> String? {
        if status.device != device || status.inode != inode { return "it was replaced by another file" }
        if status.size != size { return "its size went from \(size) to \(status.size) bytes" }
        if status.modified != modified { return "it was modified" }
        return nil
    }
}
