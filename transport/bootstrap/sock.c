#include "transport/bootstrap/sock.h"

#include "common/timer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int zc_bs_poll_timeout_ms(uint64_t deadline_ns)
{
    uint64_t now = zc_time_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    /* capped so that a caller looping on poll re-reads the clock now and then */
    return ms > 1000 ? 1000 : (int)ms;
}

int zc_bs_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0)
        return -1;
    return 0;
}

/* Waits until @p fd is ready for @p events or the deadline passes. */
static zc_status_t wait_ready(int fd, short events, uint64_t deadline_ns, int *errno_p)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int timeout = zc_bs_poll_timeout_ms(deadline_ns);
        int n = poll(&p, 1, timeout);
        if (n > 0)
            return ZC_OK; /* ready, or an error/hang-up the next call reports */
        if (n < 0 && errno != EINTR) {
            *errno_p = errno;
            return ZC_ERR_IO;
        }
        if (n == 0 && zc_time_ns() >= deadline_ns)
            return ZC_ERR_TIMEOUT;
    }
}

zc_status_t zc_bs_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns, int *errno_p)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            *errno_p = errno;
            return ZC_ERR_IO;
        }
        zc_status_t status = wait_ready(fd, POLLOUT, deadline_ns, errno_p);
        if (status != ZC_OK)
            return status;
    }
    return ZC_OK;
}

/*
 * The loop of send_some and recv_some: moves bytes between @p buf + *@p done_p
 * and @p fd until @p len are done or the socket would block. A receive of 0
 * bytes is the peer's close; a send of 0 bytes is retried.
 */
static zc_status_t transfer_some(int fd, int sending, char *buf, size_t len, size_t *done_p,
                                 int *errno_p)
{
    while (*done_p < len) {
        ssize_t n = sending ? send(fd, buf + *done_p, len - *done_p, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, buf + *done_p, len - *done_p, MSG_DONTWAIT);
        if (n > 0 || (n == 0 && sending)) {
            *done_p += (size_t)n;
            continue;
        }
        if (n == 0) {
            *errno_p = 0;
            return ZC_ERR_IO;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return ZC_OK;
        *errno_p = errno;
        return ZC_ERR_IO;
    }
    return ZC_OK;
}

zc_status_t zc_bs_recv_some(int fd, void *buf, size_t len, size_t *got_p, int *errno_p)
{
    return transfer_some(fd, 0, buf, len, got_p, errno_p);
}

zc_status_t zc_bs_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns, int *errno_p)
{
    size_t got = 0;
    for (;;) {
        zc_status_t status = zc_bs_recv_some(fd, buf, len, &got, errno_p);
        if (status != ZC_OK || got == len)
            return status;
        status = wait_ready(fd, POLLIN, deadline_ns, errno_p);
        if (status != ZC_OK)
            return status;
    }
}

zc_status_t zc_bs_send_some(int fd, const void *buf, size_t len, size_t *sent_p, int *errno_p)
{
    /* transfer_some only reads buf when sending */
    return transfer_some(fd, 1, (char *)buf, len, sent_p, errno_p);
}

void zc_bs_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

zc_status_t zc_bs_connect_start(const struct sockaddr *sa, socklen_t len, int *fd_p, int *errno_p)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *errno_p = errno;
        return ZC_ERR_IO;
    }
    zc_bs_set_nodelay(fd);
    if (connect(fd, sa, len) != 0 && errno != EINPROGRESS) {
        *errno_p = errno;
        close(fd);
        return ZC_ERR_IO;
    }
    *fd_p = fd;
    return ZC_OK;
}

zc_status_t zc_bs_connect_test(int fd, int *errno_p)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);

    if (poll(&p, 1, 0) == 0)
        return ZC_INPROGRESS;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        *errno_p = err;
        return ZC_ERR_IO;
    }
    return ZC_OK;
}

zc_status_t zc_bs_listen_at(const struct sockaddr *sa, socklen_t len, int backlog, int *fd_p,
                            struct sockaddr_storage *bound, int *errno_p)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t blen = sizeof(*bound);
    if (fd < 0 || bind(fd, sa, len) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, (struct sockaddr *)bound, &blen) != 0) {
        *errno_p = errno;
        if (fd >= 0)
            close(fd);
        return ZC_ERR_IO;
    }
    *fd_p = fd;
    return ZC_OK;
}

zc_status_t zc_bs_accept(int listen_fd, int *fd_p, struct sockaddr_storage *from, int *errno_p)
{
    socklen_t len = sizeof(*from);
    int fd = accept4(listen_fd, (struct sockaddr *)from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
            return ZC_INPROGRESS;
        *errno_p = errno;
        return ZC_ERR_IO;
    }
    zc_bs_set_nodelay(fd);
    *fd_p = fd;
    return ZC_OK;
}

static int listen_on(int family, int port, int *errno_p)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *errno_p = errno;
        return -1;
    }
    int one = 1, zero = 0;
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_any;
        a->sin6_port = htons((uint16_t)port);
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        a->sin_port = htons((uint16_t)port);
        len = sizeof(*a);
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero))) ||
        bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, SOMAXCONN) < 0) {
        *errno_p = errno;
        close(fd);
        return -1;
    }
    return fd;
}

zc_status_t zc_bs_listen(int port, int *fd_p, int *errno_p)
{
    int fd = listen_on(AF_INET6, port, errno_p);
    /* no IPv6 in this kernel or container: IPv4 only */
    if (fd < 0 && (*errno_p == EAFNOSUPPORT || *errno_p == EADDRNOTAVAIL))
        fd = listen_on(AF_INET, port, errno_p);
    if (fd < 0)
        return ZC_ERR_IO;
    *fd_p = fd;
    return ZC_OK;
}

void zc_bs_addr_string(const struct sockaddr *sa, socklen_t len, char *buf, size_t buf_len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
    } else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        port = ntohs(a->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], host, sizeof(host));
        } else {
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            snprintf(buf, buf_len, "[%s]:%d", host, port);
            return;
        }
    } else {
        snprintf(buf, buf_len, "?");
        return;
    }
    snprintf(buf, buf_len, "%s:%d", host, port);
}

void zc_bs_peer_string(int fd, char *buf, size_t buf_len)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0) {
        snprintf(buf, buf_len, "?");
        return;
    }
    zc_bs_addr_string((struct sockaddr *)&ss, len, buf, buf_len);
}

void zc_bs_hostport_string(const char *host, int port, char *buf, size_t buf_len)
{
    if (strchr(host, ':'))
        snprintf(buf, buf_len, "[%s]:%d", host, port);
    else
        snprintf(buf, buf_len, "%s:%d", host, port);
}
