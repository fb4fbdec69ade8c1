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
#include <sys/resource.h>
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

/* setpriority(2) of the calling thread alone: Linux keeps the nice value per thread (a thread
 * id is a PRIO_PROCESS `who`), and threads it starts inherit it. glibc's gettid needs
 * _GNU_SOURCE and 2.30, hence the raw system call. */
static inline int clinux_set_thread_nice(int nice) {
    return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
}

/* getpriority(2) of the calling thread: its nice value (cannot fail for the calling thread, so
 * -1 is a nice value here, not an error). */
static inline int clinux_thread_nice(void) {
    return getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
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

/* posix_spawn(3) of a program the caller does not wait on through Foundation: the download
 * agent started on demand by a background session, and the programs the agent launches for
 * background events. In the child: a new session (POSIX_SPAWN_SETSID, _GNU_SOURCE in glibc)
 * when asked, so a terminal hang-up or the parent's process group signal does not reach it;
 * every descriptor above 2 closed (posix_spawn_file_actions_addclosefrom_np, glibc 2.34, also
 * _GNU_SOURCE), so it cannot hold the parent's pipes, sockets or locks open for its whole life;
 * stdin, stdout and stderr from the given descriptors (-1: /dev/null); an empty signal mask and
 * default dispositions, because Swift threads block signals and the mask is inherited.
 * `search_path` looks `path` up in the PATH of `envp` (posix_spawnp reads the caller's
 * environment instead, so the lookup is done here against the child's own PATH). `directory`,
 * when not NULL, is the child's working directory (posix_spawn_file_actions_addchdir_np, glibc
 * 2.29): a long-lived child in "/" does not hold the caller's directory (a mount point) busy.
 * Returns 0 and sets *pid, or the error number. */
#include <spawn.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <limits.h>
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *, int);
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *, const char *);
#ifndef POSIX_SPAWN_SETSID
#define POSIX_SPAWN_SETSID 0x80
#endif
static inline int clinux_spawn_at(const char *file, char *const argv[], char *const envp[], int new_session,
                                  const char *directory, int in, int out, int err, pid_t *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) { posix_spawn_file_actions_destroy(&actions); return result; }
    int descriptors[3] = { in, out, err };
    for (int target = 0; target < 3 && result == 0; target++) {
        if (descriptors[target] >= 0) {
            result = posix_spawn_file_actions_adddup2(&actions, descriptors[target], target);
        } else {
            result = posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0);
        }
    }
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (result == 0 && directory != NULL) result = posix_spawn_file_actions_addchdir_np(&actions, directory);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | (new_session ? POSIX_SPAWN_SETSID : 0);
    if (result == 0) result = posix_spawnattr_setsigmask(&attributes, &none);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &all);
    if (result == 0) result = posix_spawnattr_setflags(&attributes, flags);
    if (result == 0) result = posix_spawn(pid, file, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}

static inline int clinux_spawn(const char *path, char *const argv[], char *const envp[], int search_path,
                               int new_session, const char *directory, int in, int out, int err, pid_t *pid) {
    if (!search_path || strchr(path, '/') != NULL) {
        return clinux_spawn_at(path, argv, envp, new_session, directory, in, out, err, pid);
    }
    const char *search = NULL;
    for (char *const *entry = envp; *entry != NULL; entry++) {
        if (strncmp(*entry, "PATH=", 5) == 0) { search = *entry + 5; break; }
    }
    if (search == NULL) search = "/usr/local/bin:/usr/bin:/bin";
    int last = ENOENT;
    while (*search != '\0') {
        const char *end = strchr(search, ':');
        size_t length = end ? (size_t)(end - search) : strlen(search);
        char candidate[PATH_MAX];
        if (length > 0 && length + 1 + strlen(path) < sizeof candidate) {
            memcpy(candidate, search, length);
            candidate[length] = '/';
            strcpy(candidate + length + 1, path);
            if (access(candidate, X_OK) == 0) {
                return clinux_spawn_at(candidate, argv, envp, new_session, directory, in, out, err, pid);
            }
            if (errno == EACCES) last = EACCES;
        }
        if (end == NULL) break;
        search = end + 1;
    }
    return last;
}

/* Free bytes for an unprivileged writer on the file system of `descriptor` (fstatvfs(3):
 * f_bavail * f_frsize), or -1 with errno. */
#include <sys/statvfs.h>
static inline long long clinux_available_bytes(int descriptor) {
    struct statvfs info;
    if (fstatvfs(descriptor, &info) != 0) return -1;
    return (long long)info.f_bavail * (long long)info.f_frsize;
}

/* mallopt(3) parameters: negative macros the Swift Glibc module does not import (glibc only). */
#ifdef __GLIBC__
#include <malloc.h>
static const int CLINUX_M_ARENA_MAX = M_ARENA_MAX;
static const int CLINUX_M_MMAP_THRESHOLD = M_MMAP_THRESHOLD;
#endif

#endif
