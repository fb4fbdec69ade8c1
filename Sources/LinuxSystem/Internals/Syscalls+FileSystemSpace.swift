#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// statvfs(3), for the free-space rule (see Syscalls.swift for the rules).
extension Syscall {
    /// The file system holding `path`: bytes an unprivileged writer may still use
    /// (`f_bavail * f_frsize`), its size (`f_blocks * f_frsize`) and its id (`f_fsid`).
    static func fileSystemSpace(_ path: String) throws(Errno) -> (available: Int64, total: Int64, identifier: UInt64) {
        var info = statvfs()
        try valueOrErrno { statvfs(path, &info) }
        // Saturating: a file system reporting absurd counts must not trap the multiplication.
        func bytes(_ blocks: UInt, _ size: UInt) -> Int64 {
            let (product, overflow) = blocks.multipliedReportingOverflow(by: size)
            return overflow || product > UInt(Int64.max) ? .max : Int64(product)
        }
        return (bytes(UInt(info.f_bavail), UInt(info.f_frsize)), bytes(UInt(info.f_blocks), UInt(info.f_frsize)),
                UInt64(info.f_fsid))
    }
}
