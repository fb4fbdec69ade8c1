#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension CheckedDirectory {
    /// Whether `openOwnedFile` may create the file.
    package enum Creation: Sendable, Hashable {
        /// It must exist.
        case existing
        /// It must not exist: created with `O_EXCL`.
        case exclusive
        /// Open it if it exists, else create it with `O_EXCL` (never through a planted name).
        case openOrCreate
    }

    /// A file opened by `openOwnedFile`.
    package struct OpenedFile: Sendable {
        package var descriptor: FileDescriptor
        package var status: FileStatus
        /// Whether this call created it.
        package var wasCreated: Bool
    }

    /// Opens `name` (one path component) with `O_NOFOLLOW`, and keeps it only when it is a
    /// regular file that the effective user owns with a single link: never a symbolic link, a
    /// FIFO or device, someone else's file, or a hard link to a file elsewhere.
    package func openOwnedFile(_ name: String, creating: Creation, mode: UInt32 = 0o644,
                               writable: Bool = true, appending: Bool = false) throws(FileTrustError) -> OpenedFile {
        try Self.checkName(name, in: path)
        let here = child(name)
        // O_NONBLOCK: opening a planted FIFO must not hang; it is refused right after.
        let flags = (writable ? O_RDWR : O_RDONLY) | (appending ? O_APPEND : 0) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY
        var opened: (FileDescriptor, Bool)?
        for _ in 0..<8 where opened == nil {
            do {
                if creating != .exclusive {
                    opened = (FileDescriptor(rawValue: try Syscall.openat(descriptor.rawValue, name, flags, 0)), false)
                    break
                }
            } catch where error == .noSuchFile && creating == .openOrCreate {
                // Fall through to an exclusive create.
            } catch where error == .tooManySymbolicLinks {
                throw .unsafe(here, "is a symbolic link; it is not followed", fix: "remove it")
            } catch {
                throw .system(here, "open", error)
            }
            do {
                opened = (FileDescriptor(rawValue: try Syscall.openat(descriptor.rawValue, name, flags | O_CREAT | O_EXCL, mode_t(mode))), true)
            } catch where error == .exists && creating == .openOrCreate {
                continue   // appeared meanwhile: open it (and check it) instead
            } catch where error == .exists {
                throw .system(here, "create", .exists)
            } catch {
                throw .system(here, "create", error)
            }
        }
        guard let (file, wasCreated) = opened else { throw .unsafe(here, "keeps changing while it is being opened") }
        do throws(FileTrustError) {
            let status: FileStatus
            do { status = try file.status() } catch { throw .system(here, "stat", error) }
            try Self.checkOwnedFile(status, at: here)
            return OpenedFile(descriptor: file, status: status, wasCreated: wasCreated)
        } catch {
            file.close()
            throw error
        }
    }

    /// A file we act on must be a regular file of ours with one link.
    static func checkOwnedFile(_ status: FileStatus, at path: String) throws(FileTrustError) {
        guard status.kind == .regular else {
            throw .unsafe(path, "is \(status.kindDescription), not a regular file", fix: "remove it")
        }
        let euid = Syscall.effectiveUserID
        guard status.ownerID == euid else {
            throw .unsafe(path, "is owned by uid \(status.ownerID), not by you (uid \(euid))", fix: "remove it")
        }
        guard status.linkCount == 1 else {
            throw .unsafe(path, "has \(status.linkCount) hard links (it may be another file's)", fix: "remove it")
        }
    }

    /// The status of `name` without following a link; nil when it does not exist.
    package func status(of name: String) throws(FileTrustError) -> FileStatus? {
        try Self.checkName(name, in: path)
        do {
            return FileStatus(try Syscall.fstatat(descriptor.rawValue, name, followingSymlinks: false))
        } catch where error == .noSuchFile {
            return nil
        } catch {
            throw .system(child(name), "stat", error)
        }
    }

    /// Removes `name` (a link itself, never its target); a missing name is not an error.
    package func remove(_ name: String) throws(FileTrustError) {
        try Self.checkName(name, in: path)
        do { try Syscall.unlinkat(descriptor.rawValue, name, removingDirectory: false) }
        catch where error == .noSuchFile {}
        catch { throw .system(child(name), "unlink", error) }
    }

    /// Removes `name` only while it still is `file` (another file put there meanwhile is left alone).
    package func remove(_ name: String, ifSameAs file: FileStatus) throws(FileTrustError) {
        guard let current = try status(of: name), current.isSameFile(as: file) else { return }
        try remove(name)
    }

    /// Removes the empty subdirectory `name`; false when it is not empty or missing.
    @discardableResult
    package func removeDirectory(_ name: String) -> Bool {
        guard (try? Self.checkName(name, in: path)) != nil else { return false }
        return (try? Syscall.unlinkat(descriptor.rawValue, name, removingDirectory: true)) != nil
    }

    /// Renames `from` to `to` in this directory. Without `replacing`, an existing `to` is never
    /// replaced (`renameat2(RENAME_NOREPLACE)`, or link + unlink where the file system lacks it)
    /// and the error says it exists.
    package func rename(_ from: String, to: String, replacing: Bool) throws(FileTrustError) {
        try Self.checkName(from, in: path)
        try Self.checkName(to, in: path)
        do {
            if replacing {
                try Syscall.renameat(descriptor.rawValue, from, descriptor.rawValue, to)
                return
            }
            do {
                try Syscall.renameatNoReplace(descriptor.rawValue, from, descriptor.rawValue, to)
            } catch where error == .invalidArgument || error == .noSystemCall || error == .notSupported {
                // No RENAME_NOREPLACE here (some network and FUSE file systems): link(2) also
                // refuses an existing target.
                try Syscall.linkat(descriptor.rawValue, from, descriptor.rawValue, to)
                try Syscall.unlinkat(descriptor.rawValue, from, removingDirectory: false)
            }
        } catch {
            throw .system(child(to), "rename \(from) to", error)
        }
    }

    /// Makes `to` a second hard link to the file `from` in this directory (linkat(2), never
    /// following a symbolic link `from`); an existing `to` is an `isAlreadyExisting` error.
    package func link(_ from: String, to: String) throws(FileTrustError) {
        try Self.checkName(from, in: path)
        try Self.checkName(to, in: path)
        do { try Syscall.linkat(descriptor.rawValue, from, descriptor.rawValue, to) }
        catch { throw .system(child(to), "link \(from) to", error) }
    }

    /// Bytes an unprivileged writer may still use on this directory's file system (statvfs).
    package func availableBytes() throws(FileTrustError) -> Int64 {
        do { return try Syscall.availableBytes(descriptor.rawValue) } catch { throw .system(path, "statvfs", error) }
    }

    /// Makes renames and removals in this directory durable.
    package func sync() throws(FileTrustError) {
        do { try descriptor.sync() } catch { throw .system(path, "fsync", error) }
    }

    /// The names in this directory (not `.` and `..`).
    package func entries() throws(FileTrustError) -> [String] {
        do { return try Syscall.directoryEntries(descriptor.rawValue) } catch { throw .system(path, "read directory", error) }
    }

    /// The one atomic write: replaces (or, without `replacing`, creates) `name` durably. A
    /// temporary file is created with `O_EXCL`, given exactly `mode` (whatever the umask),
    /// written, fsynced, renamed over `name` (without `replacing`: `renameat2(RENAME_NOREPLACE)`,
    /// and an existing `name` is an `isAlreadyExisting` error), and the directory is fsynced. A
    /// crash leaves the old or the new contents, never a torn file.
    ///
    /// The temporary name is `name.tmp` unless given: a planted one is removed, never followed.
    /// Writers that may race each other, or whose directory is read by others (a metrics
    /// collector), pass a unique, hidden one.
    package func writeAtomically(_ bytes: [UInt8], to name: String, mode: UInt32 = 0o600, replacing: Bool = true,
                                 temporaryName: String? = nil) throws(FileTrustError) {
        let temporary = temporaryName ?? name + ".tmp"
        if temporaryName == nil { try remove(temporary) }
        let file = try openOwnedFile(temporary, creating: .exclusive, mode: mode).descriptor
        do throws(FileTrustError) {
            do throws(Errno) {
                // Closed exactly once, here: a second close could close a descriptor another
                // thread has opened under the same number meanwhile.
                defer { file.close() }
                try file.setPermissions(mode)
                try file.writeAll(bytes)
                try file.sync()
            } catch {
                throw .system(child(temporary), "write", error)
            }
            try rename(temporary, to: name, replacing: replacing)
        } catch {
            try? remove(temporary)
            throw error
        }
        try sync()
    }

    /// A temporary name for `writeAtomically` no other writer picks: hidden, unique, and short
    /// enough for NAME_MAX (`.agent.prom.3f9c...tmp`).
    package static func uniqueTemporaryName(for name: String) -> String {
        var generator = SystemRandomNumberGenerator()
        return ".\(name.prefix(200)).\(String(UInt64.random(in: 0...UInt64.max, using: &generator), radix: 16)).tmp"
    }

    /// Reads `name` when it is a regular file of ours (or root's) of at most `limit` bytes.
    package func readOwnedFile(_ name: String, limit: Int) throws(FileTrustError) -> [UInt8] {
        try Self.checkName(name, in: path)
        let here = child(name)
        let file: FileDescriptor
        do {
            file = FileDescriptor(rawValue: try Syscall.openat(descriptor.rawValue, name,
                                                               O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0))
        } catch where error == .tooManySymbolicLinks {
            throw .unsafe(here, "is a symbolic link; it is not followed", fix: "remove it")
        } catch {
            throw .system(here, "open", error)
        }
        defer { file.close() }
        let status: FileStatus
        do { status = try file.status() } catch { throw .system(here, "stat", error) }
        guard status.kind == .regular else { throw .unsafe(here, "is \(status.kindDescription), not a regular file", fix: "remove it") }
        guard status.ownerID == Syscall.effectiveUserID || status.ownerID == 0 else {
            throw .unsafe(here, "is owned by uid \(status.ownerID)", fix: "remove it")
        }
        guard status.size <= Int64(limit) else { throw .unsafe(here, "is larger than \(limit) bytes") }
        var bytes = [UInt8](repeating: 0, count: Int(status.size) + 1)
        let count: Int
        do throws(Errno) {
            count = try bytes.withUnsafeMutableBytes { raw in
                Result { () throws(Errno) in try file.readFully(into: raw, at: 0) }
            }.get()
        } catch {
            throw .system(here, "read", error)
        }
        guard count <= limit else { throw .unsafe(here, "is larger than \(limit) bytes") }
        return Array(bytes.prefix(count))
    }
}
