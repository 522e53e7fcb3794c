/*
 * Socket helpers of the tcp bootstrap and of the NCCL net plugin's handshake
 * (plugin/nccl/net_shake.c): non-blocking sockets, every wait a poll() bounded
 * by an absolute deadline (CLOCK_MONOTONIC nanoseconds, common/timer.h), or
 * no wait at all for callers that come back later (the *_some, *_test and
 * accept helpers). They do not log: the caller knows which rank and operation
 * a socket serves.
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
 * Sends what the socket takes now, up to @p len - *sent_p more bytes from
 * @p buf + *sent_p, and advances *sent_p. ZC_OK also when nothing could be
 * sent; ZC_ERR_IO with the errno (MSG_NOSIGNAL: a closed peer is EPIPE).
 */
zc_status_t zc_bs_send_some(int fd, const void *buf, size_t len, size_t *sent_p, int *errno_p);

/* Sets TCP_NODELAY: small messages answered at once would wait for delayed ACKs. */
void zc_bs_set_nodelay(int fd);

/*
 * Starts a non-blocking connect to @p sa: *fd_p (TCP_NODELAY, close-on-exec)
 * is connected or connecting; zc_bs_connect_test says which. ZC_ERR_IO with
 * the errno when the socket cannot be made or the connect fails at once.
 */
zc_status_t zc_bs_connect_start(const struct sockaddr *sa, socklen_t len, int *fd_p, int *errno_p);

/*
 * Whether the connect on @p fd completed, without waiting: ZC_OK connected,
 * ZC_INPROGRESS not yet, ZC_ERR_IO with the errno (ECONNREFUSED ...).
 */
zc_status_t zc_bs_connect_test(int fd, int *errno_p);

/*
 * A non-blocking listening socket (@p backlog) on the address @p sa (port 0:
 * one the kernel picks); the address it got, port included, in *@p bound.
 * ZC_ERR_IO with the errno of the failed call.
 */
zc_status_t zc_bs_listen_at(const struct sockaddr *sa, socklen_t len, int backlog, int *fd_p,
                            struct sockaddr_storage *bound, int *errno_p);

/*
 * Takes a pending connection of @p listen_fd, without waiting: *fd_p
 * (non-blocking, TCP_NODELAY, close-on-exec) and the peer's address in
 * *@p from. ZC_INPROGRESS when none is pending (or it went away before it was
 * taken), ZC_ERR_IO with the errno.
 */
zc_status_t zc_bs_accept(int listen_fd, int *fd_p, struct sockaddr_storage *from, int *errno_p);

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
