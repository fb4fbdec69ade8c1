/* CLinuxSystem: the Linux-only calls Swift's Glibc module does not declare, and the variadic
 * ones it cannot call.
 *
 * Glibc declares renameat2, accept4, setns and the new mount API only with _GNU_SOURCE (or
 * not at all in the module), which the Swift Glibc module is built without; `syscall`, `fcntl`
 * and `openat` are variadic. The helpers below fix the argument types and return -1 with errno
 * like the calls they wrap, so LinuxSystem's one EINTR and errno rule applies to them too.
 * Only Sources/LinuxSystem/Internals/Syscalls*.swift include this module.
 */
#ifndef CLINUXSYSTEM_SHIM_H
#define CLINUXSYSTEM_SHIM_H
#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <linux/filter.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
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

/* accept4(2) with SOCK_CLOEXEC: the accepted descriptor is never inherited by a child. */
static inline int clinux_accept_cloexec(int descriptor) {
    return (int)syscall(SYS_accept4, descriptor, (void *)0, (void *)0, O_CLOEXEC);  /* SOCK_CLOEXEC == O_CLOEXEC */
}

/* setns(2) into a network namespace, for the calling thread only (glibc declares setns only
 * with _GNU_SOURCE). 0x40000000 is CLONE_NEWNET. */
static inline int clinux_setns_net(int descriptor) {
    return (int)syscall(SYS_setns, descriptor, 0x40000000);
}

/* eventfd(2), close-on-exec (Glibc's Swift module does not export <sys/eventfd.h>). */
static inline int clinux_eventfd(void) {
    return eventfd(0, EFD_CLOEXEC);
}

/* A private, detached, read-only sysfs instance that shows the calling thread's current network
 * namespace, as an O_PATH directory descriptor. After setns(), /sys still shows the namespace
 * sysfs was mounted in, so /sys/class/net would describe the wrong interfaces; the new mount API
 * (fsopen/fsmount, Linux 5.2) gives a fresh view without touching any mount table. -1 and errno
 * on failure. */
static inline int clinux_open_private_sysfs(void) {
    int fs = fsopen("sysfs", FSOPEN_CLOEXEC);
    if (fs < 0) return -1;
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) { int e = errno; close(fs); errno = e; return -1; }
    int mount = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    int e = errno;
    close(fs);
    errno = e;
    return mount;
}

/* Glibc's `struct ucred` is declared only with _GNU_SOURCE; SO_PEERCRED fills this layout. */
struct clinux_peer_credentials { int pid; unsigned int uid; unsigned int gid; };

/* The terminal's width in columns (TIOCGWINSZ; ioctl is variadic), or -1 with errno. */
static inline int clinux_terminal_columns(int descriptor) {
    struct winsize size;
    if (ioctl(descriptor, TIOCGWINSZ, &size) < 0) return -1;
    return size.ws_col;
}

#endif
