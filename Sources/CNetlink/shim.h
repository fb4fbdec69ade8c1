/*
 * CNetlink: the only place the project touches netlink.
 *
 * libnl-3 owns the socket (allocation, binding, group membership, buffer sizes, sending).
 * Messages are parsed in Swift from raw bytes, because libnl's cache manager does not scale
 * (1M routes: 361 s, 432 MB) and misses routes the kernel flushes without RTM_DELROUTE.
 * Every helper here is prefixed `cnl_` and exists because Swift cannot import a macro, a
 * variadic call, or needs a constant from a kernel header.
 */
#ifndef CNETLINK_SHIM_H
#define CNETLINK_SHIM_H

#ifdef __linux__
#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <netlink/msg.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

/* rtnetlink multicast groups, re-exported because RTMGRP_* / RTNLGRP_* are enum or macro mixes. */
static const int CNL_GROUP_LINK = RTNLGRP_LINK;
static const int CNL_GROUP_IPV4_IFADDR = RTNLGRP_IPV4_IFADDR;
static const int CNL_GROUP_IPV6_IFADDR = RTNLGRP_IPV6_IFADDR;
static const int CNL_GROUP_IPV4_ROUTE = RTNLGRP_IPV4_ROUTE;
static const int CNL_GROUP_IPV6_ROUTE = RTNLGRP_IPV6_ROUTE;
static const int CNL_GROUP_IPV4_RULE = RTNLGRP_IPV4_RULE;
static const int CNL_GROUP_IPV6_RULE = RTNLGRP_IPV6_RULE;

/* libnl reports every error as a negative NLE_* code. */
static const int CNL_NLE_NOMEM = NLE_NOMEM;

/*
 * Opens a non-blocking NETLINK_ROUTE socket with a receive buffer of `rcvbuf` bytes.
 * SO_RCVBUFFORCE is tried first because rmem_max (often 208 KiB) silently caps SO_RCVBUF and
 * rtnetlink storms then overflow with ENOBUFS; unprivileged callers fall back to SO_RCVBUF.
 * Sequence checks are disabled: event sockets receive unsolicited messages with seq 0.
 * Returns NULL and sets *err to a negative libnl code on failure.
 */
static inline struct nl_sock *cnl_socket_open(int rcvbuf, int *err) {
    struct nl_sock *sk = nl_socket_alloc();
    if (!sk) { *err = -NLE_NOMEM; return NULL; }
    nl_socket_disable_seq_check(sk);
    nl_socket_disable_auto_ack(sk);
    int rc = nl_connect(sk, NETLINK_ROUTE);
    if (rc < 0) { nl_socket_free(sk); *err = rc; return NULL; }
    int fd = nl_socket_get_fd(sk);
    if (rcvbuf > 0) {
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
            (void)nl_socket_set_buffer_size(sk, rcvbuf, 0);
    }
    /* Ask the kernel to report ENOBUFS instead of silently dropping (the default), and to
       include strict checking of dump requests where supported; failures are harmless. */
    int one = 1;
    (void)setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
    *err = 0;
    return sk;
}

/* Joins multicast groups given as RTNLGRP_* numbers; nl_socket_add_memberships is variadic. */
static inline int cnl_socket_join(struct nl_sock *sk, int group) {
    return nl_socket_add_membership(sk, group);
}

/* The effective receive buffer size, for diagnostics. */
static inline int cnl_socket_rcvbuf(struct nl_sock *sk) {
    int v = 0; socklen_t l = sizeof v;
    if (getsockopt(nl_socket_get_fd(sk), SOL_SOCKET, SO_RCVBUF, &v, &l) < 0) return -1;
    return v;
}

/*
 * Receives one datagram into `buf` without blocking. Returns the byte count, 0 when nothing is
 * queued, or -errno (ENOBUFS means the kernel dropped messages: the caller must resynchronise).
 * recv() is used instead of nl_recv() so the hot path reuses one buffer instead of malloc per
 * message; MSG_TRUNC reports a datagram larger than `len` as -EMSGSIZE.
 */
static inline long cnl_recv(struct nl_sock *sk, void *buf, unsigned long len) {
    for (;;) {
        ssize_t n = recv(nl_socket_get_fd(sk), buf, len, MSG_DONTWAIT | MSG_TRUNC);
        if (n >= 0) return (unsigned long)n > len ? -EMSGSIZE : (long)n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return -errno;
    }
}

/* Sets the receive timeout once, so request/response reads need no extra syscall each time. */
static inline int cnl_socket_set_timeout(struct nl_sock *sk, int timeout_ms) {
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    return setsockopt(nl_socket_get_fd(sk), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ? -errno : 0;
}

/* Blocking receive bounded by the socket's timeout (-EAGAIN when it expires). */
static inline long cnl_recv_blocking(struct nl_sock *sk, void *buf, unsigned long len) {
    for (;;) {
        ssize_t n = recv(nl_socket_get_fd(sk), buf, len, MSG_TRUNC);
        if (n >= 0) return (unsigned long)n > len ? -EMSGSIZE : (long)n;
        if (errno == EINTR) continue;
        return -errno;
    }
}

/* Sends a request built in Swift; returns bytes sent or a negative libnl code. */
static inline int cnl_send(struct nl_sock *sk, const void *buf, unsigned long len) {
    return nl_sendto(sk, (void *)buf, (size_t)len);
}

/* Makes the socket blocking again (libnl's nl_socket_set_nonblocking has no inverse). */
static inline int cnl_socket_set_blocking(struct nl_sock *sk, int blocking) {
    int fd = nl_socket_get_fd(sk);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -errno;
    fl = blocking ? (fl & ~O_NONBLOCK) : (fl | O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

/* Enters a network namespace on the calling thread only (setns is per-thread). */
/* Called through syscall() because glibc declares setns() only under _GNU_SOURCE, which a module
   header cannot define without diverging from the Glibc module. 0x40000000 is CLONE_NEWNET. */
static inline int cnl_setns_net(int fd) {
    return syscall(SYS_setns, fd, 0x40000000) < 0 ? -errno : 0;
}

/*
 * Mounts a private, detached sysfs instance that shows the calling thread's *current* network
 * namespace, and returns an O_PATH directory fd to it. After setns(), /sys still shows the
 * namespace sysfs was mounted in, so /sys/class/net would describe the wrong interfaces; the
 * new mount API (fsopen/fsmount, Linux 5.2) gives a fresh view without touching any mount table.
 * Returns -errno on failure.
 */
static inline int cnl_open_private_sysfs(void) {
    int fs = fsopen("sysfs", FSOPEN_CLOEXEC);
    if (fs < 0) return -errno;
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) { int e = errno; close(fs); return -e; }
    int mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    int e = errno;
    close(fs);
    return mnt < 0 ? -e : mnt;
}

/* An eventfd that wakes the monitor thread out of poll(2) on cancel; Glibc's Swift module does
   not export <sys/eventfd.h>. Returns -errno on failure. */
static inline int cnl_wake_fd(void) {
    int fd = eventfd(0, EFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/*
 * Attaches a classic BPF program to a netlink socket (SO_ATTACH_FILTER), so notifications the
 * caller never needs are dropped in the kernel before they wake it. `code` points at `len`
 * struct sock_filter entries built in Swift. Returns 0 or -errno.
 */
static inline int cnl_socket_attach_filter(struct nl_sock *sk, const struct sock_filter *code, unsigned short len) {
    struct sock_fprog program = { .len = len, .filter = (struct sock_filter *)code };
    return setsockopt(nl_socket_get_fd(sk), SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) < 0 ? -errno : 0;
}

/* Human-readable libnl error text. */
static inline const char *cnl_strerror(int code) { return nl_geterror(code); }

static inline void cnl_socket_close(struct nl_sock *sk) { nl_socket_free(sk); }
static inline int cnl_socket_fd(struct nl_sock *sk) { return nl_socket_get_fd(sk); }
static inline unsigned int cnl_socket_port(struct nl_sock *sk) { return nl_socket_get_local_port(sk); }

#endif /* __linux__ */
#endif /* CNETLINK_SHIM_H */
