/* CLinuxSystem: the Linux-only file-system calls Swift's Glibc module does not declare.
 *
 * Glibc declares renameat2 only with _GNU_SOURCE, which the Swift Glibc module is built
 * without, and `syscall` is variadic (Swift cannot call it). The helpers below fix the
 * argument types. Only Sources/LinuxSystem/Syscalls.swift includes this module.
 */
#ifndef CLINUXSYSTEM_SHIM_H
#define CLINUXSYSTEM_SHIM_H
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* linux/fs.h: fail with EEXIST instead of replacing the target (Linux 3.15; ext4, xfs, btrfs,
 * tmpfs, f2fs...; other file systems answer EINVAL and callers fall back to link + unlink). */
static const unsigned int CLINUX_RENAME_NOREPLACE = 1U << 0;

/* renameat2(2) through the raw system call, which exists on every kernel that has the flag
 * (glibc's own wrapper needs _GNU_SOURCE and glibc 2.28). Returns -1 with errno on failure. */
static inline int clinux_renameat2(int old_directory, const char *old_name, int new_directory,
                                   const char *new_name, unsigned int flags) {
    return (int)syscall(SYS_renameat2, old_directory, old_name, new_directory, new_name, flags);
}

/* sync_file_range(2) flags (fcntl.h declares them only with _GNU_SOURCE). */
static const unsigned int CLINUX_SYNC_FILE_RANGE_WAIT_BEFORE = 1U;
static const unsigned int CLINUX_SYNC_FILE_RANGE_WRITE = 2U;
static const unsigned int CLINUX_SYNC_FILE_RANGE_WAIT_AFTER = 4U;

/* sync_file_range(2) through the raw system call (glibc declares it only with _GNU_SOURCE):
 * starts or waits for write-back of a byte range. Not a durability barrier (no metadata, no
 * disk cache flush): fsync still is; this only moves the bulk of the writing before it. */
static inline int clinux_sync_file_range(int descriptor, long long offset, long long count, unsigned int flags) {
    return (int)syscall(SYS_sync_file_range, descriptor, offset, count, flags);
}

/* fcntl(2) with an int argument (variadic in C). */
static inline int clinux_fcntl_int(int descriptor, int command, int value) {
    return fcntl(descriptor, command, value);
}

/* openat(2) with a mode (variadic in C; Swift's overlay hides the mode for some flag sets). */
static inline int clinux_openat(int directory, const char *name, int flags, unsigned int mode) {
    return openat(directory, name, flags, (mode_t)mode);
}

#endif
