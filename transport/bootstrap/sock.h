/*
 * Socket helpers of the tcp bootstrap: non-blocking sockets, every wait a poll()
 * bounded by an absolute deadline (CLOCK_MONOTONIC nanoseconds, common/timer.h).
 * They do not log: the caller knows which rank and operation a socket serves.
 */
#ifndef ZC_TRANSPORT_BOOTSTRAP_SOCK_H
#define ZC_TRANSPORT_BOOTSTRAP_SOCK_H

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Milliseconds from now to @p deadline_ns for poll(): 0 if past, rounded up, capped. */
int zc_bs_poll_timeout_ms(uint64_t deadline_ns);

/* Sets O_NONBLOCK and FD_CLOEXEC on @p fd; -1 with errno on failure. */
int zc_bs_set_nonblock(int fd);

/*
 * Sends all @p len bytes (MSG_NOSIGNAL: a closed peer is EPIPE, never SIGPIPE).
 * ZC_ERR_IO with the errno in @p errno_p, or ZC_ERR_TIMEOUT at @p deadline_ns.
 */
zc_status_t zc_bs_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns, int *errno_p);

/*
 * Receives exactly @p len bytes. ZC_ERR_IO when the peer closed (@p errno_p = 0)
 * or on an error (its errno), ZC_ERR_TIMEOUT at @p deadline_ns.
 */
zc_status_t zc_bs_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns, int *errno_p);

/*
 * Reads what is available, up to @p len - *got_p more bytes, into @p buf + *got_p,
 * and advances *got_p. ZC_OK also when nothing was available; ZC_ERR_IO as above.
 */
zc_status_t zc_bs_recv_some(int fd, void *buf, size_t len, size_t *got_p, int *errno_p);

/*
 * A listening socket on @p port of every address: [::] with IPv6 and IPv4 when
 * the system has IPv6, else 0.0.0.0. SO_REUSEADDR, non-blocking.
 * ZC_ERR_IO with the errno of the failed call in @p errno_p.
 */
zc_status_t zc_bs_listen(int port, int *fd_p, int *errno_p);

/* "127.0.0.1:5000" or "[::1]:5000" (IPv4-mapped IPv6 shown as IPv4). */
void zc_bs_addr_string(const struct sockaddr *sa, socklen_t len, char *buf, size_t buf_len);

/* The peer's address of a connected socket, as zc_bs_addr_string; "?" if unknown. */
void zc_bs_peer_string(int fd, char *buf, size_t buf_len);

/* "host:port", or "[host]:port" when host contains a colon. */
void zc_bs_hostport_string(const char *host, int port, char *buf, size_t buf_len);

#endif
