/*
 * CNetlink: libnl and netlink's constants, nothing else.
 *
 * libnl-3 owns the socket (allocation, binding, group membership, buffer sizes, sending).
 * Messages are read with LinuxSystem's recv(2) wrapper on the socket's descriptor and parsed in
 * Swift from raw bytes, because libnl's cache manager does not scale (1M routes: 361 s, 432 MB)
 * and misses routes the kernel flushes without RTM_DELROUTE. Every other system call (socket
 * options, namespaces, the sysfs mount, eventfd) is LinuxSystem's. Every helper here is prefixed
 * `cnl_` and exists because Swift cannot import a macro, a variadic call, or needs a constant
 * from a kernel header.
 */
#ifndef CNETLINK_SHIM_H
#define CNETLINK_SHIM_H

#ifdef __linux__
#include <errno.h>
#include <sys/socket.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <netlink/msg.h>
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

/* Socket option levels and names for LinuxSystem's setsockopt on the netlink descriptor. */
static const int CNL_SOL_NETLINK = SOL_NETLINK;
static const int CNL_NETLINK_EXT_ACK = NETLINK_EXT_ACK;

/*
 * Opens a non-blocking NETLINK_ROUTE socket. Sequence checks are disabled: event sockets receive
 * unsolicited messages with seq 0. Returns NULL and sets *err to a negative libnl code on failure.
 */
static inline struct nl_sock *cnl_socket_open(int *err) {
    struct nl_sock *sk = nl_socket_alloc();
    if (!sk) { *err = -NLE_NOMEM; return NULL; }
    nl_socket_disable_seq_check(sk);
    nl_socket_disable_auto_ack(sk);
    int rc = nl_connect(sk, NETLINK_ROUTE);
    if (rc < 0) { nl_socket_free(sk); *err = rc; return NULL; }
    *err = 0;
    return sk;
}

/* libnl's SO_RCVBUF setting (capped by rmem_max), for callers that may not force a size. */
static inline int cnl_socket_set_receive_buffer(struct nl_sock *sk, int bytes) {
    return nl_socket_set_buffer_size(sk, bytes, 0);
}

/* Joins multicast groups given as RTNLGRP_* numbers; nl_socket_add_memberships is variadic. */
static inline int cnl_socket_join(struct nl_sock *sk, int group) {
    return nl_socket_add_membership(sk, group);
}

/* Sends a request built in Swift; returns bytes sent or a negative libnl code. */
static inline int cnl_send(struct nl_sock *sk, const void *buf, unsigned long len) {
    return nl_sendto(sk, (void *)buf, (size_t)len);
}

/* Human-readable libnl error text. */
static inline const char *cnl_strerror(int code) { return nl_geterror(code); }

static inline void cnl_socket_close(struct nl_sock *sk) { nl_socket_free(sk); }
static inline int cnl_socket_fd(struct nl_sock *sk) { return nl_socket_get_fd(sk); }
static inline unsigned int cnl_socket_port(struct nl_sock *sk) { return nl_socket_get_local_port(sk); }

#endif /* __linux__ */
#endif /* CNETLINK_SHIM_H */
