#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What `fstat` says about a file, as a Swift value.
package struct FileStatus: Sendable, Hashable {
    /// The kind of file.
    package enum Kind: Sendable, Hashable {
        case regular, directory, symbolicLink, fifo, socket, characterDevice, blockDevice, unknown
    }

    package var kind: Kind
    /// Permission bits plus setuid/setgid/sticky (`st_mode & 07777`).
    package var permissions: UInt32
    package var ownerID: UInt32
    package var groupID: UInt32
    package var linkCount: UInt64
    package var size: Int64
    package var device: UInt64
    package var inode: UInt64
    /// Last modification, in nanoseconds since 1970 (with device and inode it tells a file
    /// rewritten or replaced since it was last seen: inode numbers are reused at once).
    package var modified: Int64

    init(_ info: stat) {
        switch info.st_mode & S_IFMT {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        case S_IFIFO: kind = .fifo
        case S_IFSOCK: kind = .socket
        case S_IFCHR: kind = .characterDevice
        case S_IFBLK: kind = .blockDevice
        default: kind = .unknown
        }
        permissions = UInt32(info.st_mode & 0o7777)
        ownerID = info.st_uid
        groupID = info.st_gid
        linkCount = UInt64(info.st_nlink)
        size = Int64(info.st_size)
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
    }

    /// Whether both describe the same file (device and inode).
    package func isSameFile(as other: FileStatus) -> Bool { device == other.device && inode == other.inode }

    /// Writable by users other than the owner (group or other write bit).
    package var isWritableByOthers: Bool { permissions & 0o022 != 0 }
    /// The sticky bit: only an entry's owner (or the directory's) may rename or remove it.
    package var isSticky: Bool { permissions & 0o1000 != 0 }

    /// "a symbolic link", "a FIFO", ... for messages.
    package var kindDescription: String {
        switch kind {
        case .regular: "a regular file"
        case .directory: "a directory"
        case .symbolicLink: "a symbolic link"
        case .fifo: "a FIFO"
        case .socket: "a socket"
        case .characterDevice: "a character device"
        case .blockDevice: "a block device"
        case .unknown: "an unknown kind of file"
        }
    }
}

/// An open file descriptor. A value: whoever opened it closes it (`close()`), once.
package struct FileDescriptor: Sendable, Hashable {
    package let rawValue: Int32

    package init(rawValue: Int32) { self.rawValue = rawValue }

    package func close() { Syscall.close(rawValue) }

    package func status() throws(Errno) -> FileStatus { FileStatus(try Syscall.fstat(rawValue)) }

    package func sync() throws(Errno) { try Syscall.fsync(rawValue) }

    /// fdatasync: the data and what is needed to read it back (the size), not timestamps.
    package func syncData() throws(Errno) { try Syscall.fdatasync(rawValue) }

    /// Starts write-back of `count` bytes at `offset` without waiting (sync_file_range WRITE).
    /// Not a durability barrier: `syncData()` still is, but has little left to write.
    package func startWriteBack(offset: Int64, count: Int64) throws(Errno) {
        try Syscall.syncFileRange(rawValue, offset, count, waiting: false)
    }

    /// Writes back `count` bytes at `offset` and waits until they have reached the device
    /// (sync_file_range WAIT_BEFORE | WRITE | WAIT_AFTER), which bounds the dirty page cache.
    package func waitForWriteBack(offset: Int64, count: Int64) throws(Errno) {
        try Syscall.syncFileRange(rawValue, offset, count, waiting: true)
    }

    package func truncate(to length: Int64) throws(Errno) { try Syscall.ftruncate(rawValue, length) }

    package func setPermissions(_ mode: UInt32) throws(Errno) { try Syscall.fchmod(rawValue, mode_t(mode)) }

    /// Reads up to `buffer.count` bytes at `offset`; 0 means end of file.
    package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        try Syscall.pread(rawValue, buffer, offset)
    }

    /// Fills `buffer` from `offset` unless the file ends first; returns the count read.
    package func readFully(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        var total = 0
        while total < buffer.count {
            let count = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]), at: offset + Int64(total))
            if count == 0 { break }
            total += count
        }
        return total
    }

    /// The standard streams, for writes that must not go through stdio's buffers.
    package static let standardOutput = FileDescriptor(rawValue: 1)
    package static let standardError = FileDescriptor(rawValue: 2)

    /// The one write-everything loop: hands `writeSome` what is left until every byte is out (a
    /// short write is followed by another; EINTR is retried below it, in `valueOrErrno`). A
    /// write of nothing is EIO. Returns the count written before any error, and the error.
    package static func writeAll(_ bytes: UnsafeRawBufferPointer,
                                 _ writeSome: (_ rest: UnsafeRawBufferPointer, _ offset: Int) throws(Errno) -> Int)
        -> (written: Int, error: Errno?) {
        var written = 0
        while written < bytes.count {
            do {
                let count = try writeSome(UnsafeRawBufferPointer(rebasing: bytes[written...]), written)
                if count == 0 { return (written, .ioError) }
                written += count
            } catch {
                return (written, error)
            }
        }
        return (written, nil)
    }

    /// Writes all of `bytes` at `offset`; on failure, the bytes written before it and the error.
    package func writeAll(_ bytes: UnsafeRawBufferPointer, at offset: Int64) -> (written: Int, error: Errno?) {
        Self.writeAll(bytes) { rest, done throws(Errno) in try Syscall.pwrite(rawValue, rest, offset + Int64(done)) }
    }

    /// Writes all of `bytes` at the current position.
    package func writeAll(_ bytes: UnsafeRawBufferPointer) throws(Errno) {
        if let error = Self.writeAll(bytes, { rest, _ throws(Errno) in try Syscall.write(rawValue, rest) }).error { throw error }
    }

    /// Writes all of `bytes` at the current position.
    package func writeAll(_ bytes: [UInt8]) throws(Errno) {
        try bytes.withUnsafeBytes { raw in Result { () throws(Errno) in try writeAll(raw) } }.get()
    }

    /// Takes an exclusive `flock` without waiting; false when another open file description holds it.
    package func tryLockExclusive() throws(Errno) -> Bool {
        do {
            try Syscall.fileLock(rawValue, LOCK_EX | LOCK_NB)
            return true
        } catch where error == .wouldBlock {
            return false
        }
    }
}
