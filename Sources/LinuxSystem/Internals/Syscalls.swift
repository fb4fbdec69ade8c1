// The package's raw system calls (swift-system's Internals/Syscalls.swift shape), in this file
// (files) and its two siblings (sockets; processes, threads, signals, namespaces): each wrapper
// turns -1 into a thrown `Errno`, and EINTR is retried in one place, `valueOrErrno`, for every
// call but close(2). Nothing outside LinuxSystem calls Glibc for these (a test greps for it).
import CLinuxSystem
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Runs `call` until it is not interrupted; a negative result throws the `errno`.
@inline(__always) @discardableResult
func valueOrErrno<T: FixedWidthInteger>(_ call: () -> T) throws(Errno) -> T {
    while true {
        let result = call()
        if result >= 0 { return result }
        let number = errno
        if number == EINTR { continue }
        throw Errno(number)
    }
}

enum Syscall {
    static func openat(_ directory: Int32, _ name: String, _ flags: Int32, _ mode: mode_t) throws(Errno) -> Int32 {
        try valueOrErrno { clinux_openat(directory, name, flags, UInt32(mode)) }
    }

    static func close(_ descriptor: Int32) {
        // Never retried: on Linux the descriptor is gone even when close reports EINTR.
        _ = Glibc.close(descriptor)
    }

    static func fstat(_ descriptor: Int32) throws(Errno) -> stat {
        var info = stat()
        try valueOrErrno { Glibc.fstat(descriptor, &info) }
        return info
    }

    static func fstatat(_ directory: Int32, _ name: String, followingSymlinks: Bool) throws(Errno) -> stat {
        var info = stat()
        let flags = followingSymlinks ? 0 : AT_SYMLINK_NOFOLLOW
        try valueOrErrno { Glibc.fstatat(directory, name, &info, flags) }
        return info
    }

    static func mkdirat(_ directory: Int32, _ name: String, _ mode: mode_t) throws(Errno) {
        try valueOrErrno { Glibc.mkdirat(directory, name, mode) }
    }

    static func readlinkat(_ directory: Int32, _ name: String) throws(Errno) -> String {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = try valueOrErrno { buffer.withUnsafeMutableBytes { Glibc.readlinkat(directory, name, $0.baseAddress!, $0.count - 1) } }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    static func unlinkat(_ directory: Int32, _ name: String, removingDirectory: Bool) throws(Errno) {
        try valueOrErrno { Glibc.unlinkat(directory, name, removingDirectory ? AT_REMOVEDIR : 0) }
    }

    static func renameat(_ fromDirectory: Int32, _ from: String, _ toDirectory: Int32, _ to: String) throws(Errno) {
        try valueOrErrno { Glibc.renameat(fromDirectory, from, toDirectory, to) }
    }

    static func renameatNoReplace(_ fromDirectory: Int32, _ from: String, _ toDirectory: Int32, _ to: String) throws(Errno) {
        try valueOrErrno { clinux_renameat2(fromDirectory, from, toDirectory, to, CLINUX_RENAME_NOREPLACE) }
    }

    static func linkat(_ fromDirectory: Int32, _ from: String, _ toDirectory: Int32, _ to: String) throws(Errno) {
        try valueOrErrno { Glibc.linkat(fromDirectory, from, toDirectory, to, 0) }
    }

    static func fchmod(_ descriptor: Int32, _ mode: mode_t) throws(Errno) {
        try valueOrErrno { Glibc.fchmod(descriptor, mode) }
    }

    static func fsync(_ descriptor: Int32) throws(Errno) {
        try valueOrErrno { Glibc.fsync(descriptor) }
    }

    static func fdatasync(_ descriptor: Int32) throws(Errno) {
        try valueOrErrno { Glibc.fdatasync(descriptor) }
    }

    /// sync_file_range: WRITE only (start write-back), or WAIT_BEFORE | WRITE | WAIT_AFTER.
    static func syncFileRange(_ descriptor: Int32, _ offset: Int64, _ count: Int64, waiting: Bool) throws(Errno) {
        let flags = waiting
            ? CLINUX_SYNC_FILE_RANGE_WAIT_BEFORE | CLINUX_SYNC_FILE_RANGE_WRITE | CLINUX_SYNC_FILE_RANGE_WAIT_AFTER
            : CLINUX_SYNC_FILE_RANGE_WRITE
        try valueOrErrno { clinux_sync_file_range(descriptor, offset, count, flags) }
    }

    static func ftruncate(_ descriptor: Int32, _ length: Int64) throws(Errno) {
        try valueOrErrno { Glibc.ftruncate(descriptor, off_t(length)) }
    }

    static func pread(_ descriptor: Int32, _ buffer: UnsafeMutableRawBufferPointer, _ offset: Int64) throws(Errno) -> Int {
        try valueOrErrno { Glibc.pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    static func pwrite(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer, _ offset: Int64) throws(Errno) -> Int {
        try valueOrErrno { Glibc.pwrite(descriptor, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    static func write(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno { Glibc.write(descriptor, buffer.baseAddress, buffer.count) }
    }

    static func fileLock(_ descriptor: Int32, _ operation: Int32) throws(Errno) {
        try valueOrErrno { flock(descriptor, operation) }
    }

    static func dup(_ descriptor: Int32) throws(Errno) -> Int32 {
        try valueOrErrno { clinux_fcntl_int(descriptor, F_DUPFD_CLOEXEC, 0) }
    }

    /// Names in the directory (without `.` and `..`), read through a duplicate descriptor so the
    /// caller's stays open and positioned.
    static func directoryEntries(_ descriptor: Int32) throws(Errno) -> [String] {
        let copy = try dup(descriptor)
        guard let stream = fdopendir(copy) else {
            let number = errno
            close(copy)
            throw Errno(number)
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }

    static var effectiveUserID: UInt32 { geteuid() }
    static var effectiveGroupID: UInt32 { getegid() }

    static func read(_ descriptor: Int32, _ buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno { Glibc.read(descriptor, buffer.baseAddress, buffer.count) }
    }

    static func readlink(_ directory: Int32, _ path: String) throws(Errno) -> String {
        try readlinkat(directory, path)
    }

    static func faccessat(_ directory: Int32, _ path: String) throws(Errno) {
        try valueOrErrno { Glibc.faccessat(directory, path, F_OK, 0) }
    }

    static func statPath(_ path: String, followingSymlinks: Bool) throws(Errno) -> stat {
        try fstatat(AT_FDCWD, path, followingSymlinks: followingSymlinks)
    }

    static func setCloseOnExec(_ descriptor: Int32) throws(Errno) {
        try valueOrErrno { clinux_fcntl_int(descriptor, F_SETFD, FD_CLOEXEC) }
    }

    static func fcntlGetFlags(_ descriptor: Int32) throws(Errno) -> Int32 {
        try valueOrErrno { clinux_fcntl_int(descriptor, F_GETFL, 0) }
    }

    static func fcntlSetFlags(_ descriptor: Int32, _ flags: Int32) throws(Errno) {
        try valueOrErrno { clinux_fcntl_int(descriptor, F_SETFL, flags) }
    }

    static func terminalColumns(_ descriptor: Int32) throws(Errno) -> Int {
        Int(try valueOrErrno { clinux_terminal_columns(descriptor) })
    }

    static func isTerminal(_ descriptor: Int32) -> Bool { isatty(descriptor) == 1 }
}
