/*
 * The tcp bootstrap: a star through rank 0 (see tcp.h for the behaviour and
 * wire.h for the messages).
 */
#include "transport/bootstrap/tcp.h"

#include "common/log.h"
#include "common/timer.h"
#include "transport/bootstrap/sock.h"
#include "transport/bootstrap/wire.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ADDR_MAX 80
#define MSG_MAX 512
/* Connections rank 0 holds while it waits for their hello; more close the oldest. */
#define PENDING_MAX 64

typedef struct peer_rx {
    uint8_t hdr[ZC_BS_HDR_LEN];
    size_t hdr_got;
    size_t payload_got;
    int checked;
    int done;
} peer_rx_t;

typedef struct tcp_bs {
    int rank;
    int size;
    int timeout_s;
    uint64_t job;
    char root_addr[ZC_BOOTSTRAP_HOST_MAX + 16]; /* "host:port", for messages */
    /* rank 0: fds[r] is rank r's connection (fds[0] = -1); other ranks: fds[0] is rank 0's */
    int *fds;
    char (*peer_addr)[ADDR_MAX]; /* rank 0: where each rank connected from */
    peer_rx_t *rx;               /* rank 0: per-rank receive state of the current gather */
    struct pollfd *pfd;          /* rank 0: size + 1 + PENDING_MAX entries ... */
    int *pfd_rank;               /* ... and which rank (or connection) each one is */
    uint32_t seq;                /* number of the current (or last) operation */
    char op[32];                 /* "allgather #3" or "the handshake", for messages */
    zc_status_t failed;          /* sticky: the first error, returned by every later call */
    char reason[MSG_MAX];        /* rank 0: what it sends in ABORT */
} tcp_bs_t;

static uint64_t deadline_after(int seconds)
{
    return zc_time_ns() + (uint64_t)seconds * 1000000000ull;
}

static void set_nodelay(int fd)
{
    int one = 1;
    /* frames are small and answered at once: Nagle would add delayed-ACK stalls */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/*
 * What happened to the connection of rank @p rank (at @p addr) @p when ("during
 * allgather #3"): @p err 0 is an orderly close, ECONNRESET and EPIPE a process
 * that died or closed with data unread, anything else a failing connection.
 */
static void io_message(char *buf, size_t len, int rank, const char *addr, int err, const char *when)
{
    char text[128];
    snprintf(text, sizeof(text), "%s", strerror(err));
    text[0] = (char)tolower((unsigned char)text[0]);
    if (err == 0)
        snprintf(buf, len, "rank %d (%s) closed its connection %s", rank, addr, when);
    else if (err == ECONNRESET || err == EPIPE)
        snprintf(buf, len, "rank %d (%s) closed its connection %s (%s)", rank, addr, when, text);
    else
        snprintf(buf, len, "the connection to rank %d (%s) failed %s: %s", rank, addr, when, text);
}

/* Sends a header and its payload as one segment where possible. */
static zc_status_t send_frame(int fd, const zc_bs_frame_t *frame, const void *payload,
                              uint64_t deadline, int *errno_p)
{
    uint8_t hdr[ZC_BS_HDR_LEN];
    zc_bs_frame_encode(frame, hdr);
    if (frame->len == 0)
        return zc_bs_send_all(fd, hdr, sizeof(hdr), deadline, errno_p);
    int more = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &more, sizeof(more));
    zc_status_t status = zc_bs_send_all(fd, hdr, sizeof(hdr), deadline, errno_p);
    if (status == ZC_OK)
        status = zc_bs_send_all(fd, payload, (size_t)frame->len, deadline, errno_p);
    more = 0;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &more, sizeof(more));
    return status;
}

/* Best effort, 100 ms at most: a REJECT or ABORT to a peer that may be gone or not reading. */
static void send_reason(int fd, uint64_t job, zc_bs_msg_t type, uint32_t seq, zc_status_t status,
                        const char *reason)
{
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    size_t len = zc_bs_reason_encode(status, reason, payload);
    zc_bs_frame_t f = zc_bs_frame_make(job, type, 0, seq, len, 0);
    int err;
    (void)send_frame(fd, &f, payload, zc_time_ns() + 100000000ull, &err);
}

/* ---- failure: log once, remember, tell the others ------------------------------------------- */

/*
 * Rank 0's failure of the whole job: logs @p fmt once, makes it sticky and sends
 * it to every connected rank as an ABORT of operation t->seq.
 */
static zc_status_t root_fail(tcp_bs_t *t, zc_status_t status, const char *fmt, ...) ZC_PRINTF(3, 4);

static zc_status_t root_fail(tcp_bs_t *t, zc_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->reason, sizeof(t->reason), fmt, ap);
    va_end(ap);
    ZC_ERROR("bootstrap: %s", t->reason);
    t->failed = status;
    for (int r = 1; r < t->size; r++) {
        if (t->fds[r] >= 0) {
            send_reason(t->fds[r], t->job, ZC_BS_MSG_ABORT, t->seq, status, t->reason);
            (void)shutdown(t->fds[r], SHUT_WR);
        }
    }
    return status;
}

/* A non-root rank's failure: logged once, sticky; rank 0 sees the connection close at once. */
static zc_status_t rank_fail(tcp_bs_t *t, zc_status_t status, const char *fmt, ...) ZC_PRINTF(3, 4);

static zc_status_t rank_fail(tcp_bs_t *t, zc_status_t status, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ZC_ERROR("bootstrap: %s", msg);
    t->failed = status;
    if (t->fds && t->fds[0] >= 0)
        (void)shutdown(t->fds[0], SHUT_RDWR);
    return status;
}

/*
 * "2, 5, 7": the ranks rank 0 still waits for (at most 16, then "and N more"):
 * those without a connection (@p by_fd), else those whose gather is not done.
 */
static void missing_ranks(const tcp_bs_t *t, int by_fd, char *buf, size_t len)
{
    size_t used = 0;
    int listed = 0, more = 0;
    buf[0] = '\0';
    for (int r = 1; r < t->size; r++) {
        if (by_fd ? t->fds[r] >= 0 : t->rx[r].done)
            continue;
        if (listed == 16) {
            more++;
            continue;
        }
        int n = snprintf(buf + used, len - used, "%s%d", listed ? ", " : "", r);
        if (n < 0 || (size_t)n >= len - used)
            return;
        used += (size_t)n;
        listed++;
    }
    if (more)
        snprintf(buf + used, len - used, " and %d more", more);
}

/* ---- non-root: one connection to rank 0 ------------------------------------------------------ */

/*
 * Receives rank 0's frame for operation @p type #t->seq into @p buf (@p len bytes):
 * an ABORT or REJECT becomes the status it carries, a frame of another type, sender,
 * operation or length ZC_ERR_MISMATCH, bytes that are not our protocol ZC_ERR_CORRUPT.
 */
/* Receives @p len bytes from rank 0; a timeout or a broken connection fails the job, named. */
static zc_status_t recv_from_root(tcp_bs_t *t, void *buf, size_t len, uint64_t deadline,
                                  const char *doing)
{
    int err = 0;
    zc_status_t status = zc_bs_recv_all(t->fds[0], buf, len, deadline, &err);
    if (status == ZC_ERR_TIMEOUT)
        return rank_fail(t, status, "rank %d timed out after %d s in %s %s rank 0", t->rank,
                         t->timeout_s, t->op, doing);
    if (status != ZC_OK) {
        char why[MSG_MAX], when[64];
        snprintf(when, sizeof(when), "during %s", t->op);
        io_message(why, sizeof(why), 0, t->root_addr, err, when);
        return rank_fail(t, status, "%s", why);
    }
    return ZC_OK;
}

static zc_status_t rank_recv(tcp_bs_t *t, zc_bs_msg_t type, uint32_t arg, void *buf, size_t len,
                             uint64_t deadline)
{
    int fd = t->fds[0], err = 0;
    uint8_t hdr[ZC_BS_HDR_LEN];
    zc_bs_frame_t f;
    char why[MSG_MAX];

    zc_status_t status = recv_from_root(t, hdr, sizeof(hdr), deadline, "waiting for");
    if (status != ZC_OK)
        return status;
    zc_bs_frame_decode(hdr, &f);

    if (zc_bs_frame_check_job(&f, t->job, NULL, 0) == ZC_OK &&
        (f.type == ZC_BS_MSG_ABORT || f.type == ZC_BS_MSG_REJECT) && f.rank == 0 &&
        f.len <= 4 + ZC_BS_REASON_MAX) {
        uint8_t payload[4 + ZC_BS_REASON_MAX];
        char reason[ZC_BS_REASON_MAX + 1];
        zc_status_t carried;
        status = zc_bs_recv_all(fd, payload, (size_t)f.len, deadline, &err);
        if (status == ZC_OK)
            status = zc_bs_reason_decode(payload, (size_t)f.len, &carried, reason);
        if (status != ZC_OK)
            return rank_fail(t, ZC_ERR_IO, "rank 0 (%s) sent a truncated %s during %s",
                             t->root_addr, zc_bs_msg_name(f.type), t->op);
        if (f.type == ZC_BS_MSG_REJECT)
            return rank_fail(t, carried, "rank 0 at %s rejected rank %d: %s", t->root_addr, t->rank,
                             reason);
        return rank_fail(t, carried, "%s failed at rank 0: %s", t->op, reason);
    }

    zc_bs_expect_t e = {
        .job = t->job, .type = type, .rank = 0, .seq = t->seq, .len = len, .arg = arg};
    status = zc_bs_frame_check(&f, &e, why, sizeof(why));
    if (status != ZC_OK)
        return rank_fail(t, status, "rank 0 (%s) in %s: %s", t->root_addr, t->op, why);
    if (len == 0)
        return ZC_OK;
    return recv_from_root(t, buf, len, deadline, "receiving from");
}

static zc_status_t rank_send(tcp_bs_t *t, zc_bs_msg_t type, uint32_t arg, const void *buf,
                             size_t len, uint64_t deadline)
{
    zc_bs_frame_t f = zc_bs_frame_make(t->job, type, (uint32_t)t->rank, t->seq, len, arg);
    int err = 0;
    char why[MSG_MAX];
    zc_status_t status = send_frame(t->fds[0], &f, buf, deadline, &err);
    if (status == ZC_ERR_TIMEOUT)
        return rank_fail(t, status, "rank %d timed out after %d s in %s sending to rank 0", t->rank,
                         t->timeout_s, t->op);
    if (status != ZC_OK) {
        char when[64];
        snprintf(when, sizeof(when), "during %s", t->op);
        io_message(why, sizeof(why), 0, t->root_addr, err, when);
        return rank_fail(t, status, "%s", why);
    }
    return ZC_OK;
}

/* ---- rank 0: gather from several ranks at once, send to each --------------------------------- */

/*
 * Receives a frame of @p type #t->seq with @p len bytes from rank @p only (or from
 * every rank when @p only is -1) into @p dst + r * @p stride. All connections are
 * polled together, so a rank that disconnects is reported as soon as it does.
 */
static zc_status_t root_gather(tcp_bs_t *t, zc_bs_msg_t type, uint32_t arg, int only, void *dst,
                               size_t len, size_t stride, uint64_t deadline)
{
    int pending = 0;
    for (int r = 1; r < t->size; r++) {
        memset(&t->rx[r], 0, sizeof(t->rx[r]));
        t->rx[r].done = only >= 0 && r != only;
        pending += !t->rx[r].done;
    }

    while (pending > 0) {
        int n = 0;
        for (int r = 1; r < t->size; r++) {
            if (t->rx[r].done)
                continue;
            t->pfd[n] = (struct pollfd){.fd = t->fds[r], .events = POLLIN};
            t->pfd_rank[n++] = r;
        }
        int ready = poll(t->pfd, (nfds_t)n, zc_bs_poll_timeout_ms(deadline));
        if (ready < 0 && errno != EINTR)
            return root_fail(t, ZC_ERR_IO, "poll failed in %s: %s", t->op, strerror(errno));
        if (ready <= 0) {
            if (zc_time_ns() < deadline)
                continue;
            char list[256];
            missing_ranks(t, 0, list, sizeof(list));
            return root_fail(t, ZC_ERR_TIMEOUT,
                             "rank 0 timed out after %d s in %s waiting for rank%s %s",
                             t->timeout_s, t->op, pending > 1 ? "s" : "", list);
        }
        for (int i = 0; i < n; i++) {
            if (!t->pfd[i].revents)
                continue;
            int r = t->pfd_rank[i], err = 0;
            peer_rx_t *rx = &t->rx[r];
            char why[MSG_MAX];
            zc_status_t status =
                zc_bs_recv_some(t->fds[r], rx->hdr, sizeof(rx->hdr), &rx->hdr_got, &err);
            if (status == ZC_OK && rx->hdr_got == sizeof(rx->hdr) && !rx->checked) {
                zc_bs_frame_t f;
                zc_bs_expect_t e = {.job = t->job,
                                    .type = type,
                                    .rank = (uint32_t)r,
                                    .seq = t->seq,
                                    .len = len,
                                    .arg = arg};
                zc_bs_frame_decode(rx->hdr, &f);
                status = zc_bs_frame_check(&f, &e, why, sizeof(why));
                if (status != ZC_OK)
                    return root_fail(t, status, "rank %d in %s: %s", r, t->op, why);
                rx->checked = 1;
            }
            if (status == ZC_OK && rx->checked && rx->payload_got < len)
                status = zc_bs_recv_some(t->fds[r], (char *)dst + (size_t)r * stride, len,
                                         &rx->payload_got, &err);
            if (status != ZC_OK) {
                char when[64];
                snprintf(when, sizeof(when), "during %s", t->op);
                io_message(why, sizeof(why), r, t->peer_addr[r], err, when);
                return root_fail(t, ZC_ERR_IO, "%s", why);
            }
            if (rx->checked && rx->payload_got == len) {
                rx->done = 1;
                pending--;
            }
        }
    }
    return ZC_OK;
}

/* Sends @p len bytes of @p buf as a @p type frame to every rank but rank 0 and @p skip. */
static zc_status_t root_send_all(tcp_bs_t *t, zc_bs_msg_t type, uint32_t arg, int skip,
                                 const void *buf, size_t len, uint64_t deadline)
{
    zc_bs_frame_t f = zc_bs_frame_make(t->job, type, 0, t->seq, len, arg);
    for (int r = 1; r < t->size; r++) {
        if (r == skip)
            continue;
        int err = 0;
        char why[MSG_MAX];
        zc_status_t status = send_frame(t->fds[r], &f, buf, deadline, &err);
        if (status == ZC_ERR_TIMEOUT)
            return root_fail(t, status, "rank 0 timed out after %d s in %s sending to rank %d",
                             t->timeout_s, t->op, r);
        if (status != ZC_OK) {
            char when[64];
            snprintf(when, sizeof(when), "during %s", t->op);
            io_message(why, sizeof(why), r, t->peer_addr[r], err, when);
            return root_fail(t, status, "%s", why);
        }
    }
    return ZC_OK;
}

/* ---- the operations ------------------------------------------------------------------------ */

static zc_status_t op_begin(tcp_bs_t *t, zc_bs_msg_t type)
{
    if (t->failed)
        return t->failed;
    t->seq++;
    snprintf(t->op, sizeof(t->op), "%s #%u", zc_bs_msg_name(type), t->seq);
    return ZC_OK;
}

static zc_status_t tcp_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    tcp_bs_t *t = ctx;
    if ((len && (!mine || !all)) || len > SIZE_MAX / (size_t)t->size)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(op_begin(t, ZC_BS_MSG_ALLGATHER));
    uint64_t deadline = deadline_after(t->timeout_s);
    size_t total = len * (size_t)t->size;

    if (t->rank != 0) {
        ZC_CHECK(rank_send(t, ZC_BS_MSG_ALLGATHER, 0, mine, len, deadline));
        return rank_recv(t, ZC_BS_MSG_ALLGATHER, 0, all, total, deadline);
    }
    if (len)
        memmove(all, mine, len);
    ZC_CHECK(root_gather(t, ZC_BS_MSG_ALLGATHER, 0, -1, all, len, len, deadline));
    return root_send_all(t, ZC_BS_MSG_ALLGATHER, 0, -1, all, total, deadline);
}

static zc_status_t tcp_broadcast(void *ctx, void *buf, size_t len, int root)
{
    tcp_bs_t *t = ctx;
    if ((len && !buf) || root < 0 || root >= t->size)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(op_begin(t, ZC_BS_MSG_BROADCAST));
    uint64_t deadline = deadline_after(t->timeout_s);
    uint32_t arg = (uint32_t)root;

    if (t->rank != 0) {
        if (t->rank == root)
            return rank_send(t, ZC_BS_MSG_BROADCAST, arg, buf, len, deadline);
        return rank_recv(t, ZC_BS_MSG_BROADCAST, arg, buf, len, deadline);
    }
    if (root != 0)
        ZC_CHECK(root_gather(t, ZC_BS_MSG_BROADCAST, arg, root, buf, len, 0, deadline));
    return root_send_all(t, ZC_BS_MSG_BROADCAST, arg, root, buf, len, deadline);
}

static zc_status_t tcp_barrier(void *ctx)
{
    tcp_bs_t *t = ctx;
    ZC_CHECK(op_begin(t, ZC_BS_MSG_BARRIER));
    uint64_t deadline = deadline_after(t->timeout_s);

    if (t->rank != 0) {
        ZC_CHECK(rank_send(t, ZC_BS_MSG_BARRIER, 0, NULL, 0, deadline));
        return rank_recv(t, ZC_BS_MSG_BARRIER, 0, NULL, 0, deadline);
    }
    ZC_CHECK(root_gather(t, ZC_BS_MSG_BARRIER, 0, -1, NULL, 0, 0, deadline));
    return root_send_all(t, ZC_BS_MSG_BARRIER, 0, -1, NULL, 0, deadline);
}

static void tcp_destroy(void *ctx)
{
    tcp_bs_t *t = ctx;
    if (!t)
        return;
    for (int r = 0; t->fds && r < t->size; r++) {
        if (t->fds[r] >= 0)
            close(t->fds[r]);
    }
    free(t->fds);
    free(t->peer_addr);
    free(t->rx);
    free(t->pfd);
    free(t->pfd_rank);
    free(t);
}

static const zc_bootstrap_ops_t tcp_ops = {
    .name = "tcp",
    .allgather = tcp_allgather,
    .broadcast = tcp_broadcast,
    .barrier = tcp_barrier,
    .destroy = tcp_destroy,
};

/* ---- joining: rank 0 accepts ---------------------------------------------------------------- */

typedef struct pending_conn {
    int fd;
    uint8_t hdr[ZC_BS_HDR_LEN];
    size_t got;
    char addr[ADDR_MAX];
} pending_conn_t;

static void pending_drop(pending_conn_t *pend, int *npend, int i)
{
    close(pend[i].fd);
    pend[i] = pend[--*npend];
}

/*
 * Judges a complete hello from pend[i]: joins it, drops or rejects a stranger
 * (returns ZC_OK, not counted), or fails the job.
 */
static zc_status_t root_hello(tcp_bs_t *t, pending_conn_t *pend, int *npend, int i, int *joined)
{
    pending_conn_t *c = &pend[i];
    zc_bs_frame_t f;
    char why[MSG_MAX];

    zc_bs_frame_decode(c->hdr, &f);
    zc_status_t status = zc_bs_frame_check_job(&f, t->job, why, sizeof(why));
    if (status == ZC_ERR_CORRUPT) {
        ZC_WARN("bootstrap: rank 0 dropped a connection from %s: %s", c->addr, why);
        pending_drop(pend, npend, i);
        return ZC_OK;
    }
    if (status == ZC_OK && (f.type != ZC_BS_MSG_HELLO || f.seq != 0 || f.len != 0)) {
        snprintf(why, sizeof(why), "expected a hello, got a %s message of %llu bytes",
                 zc_bs_msg_name(f.type), (unsigned long long)f.len);
        status = ZC_ERR_MISMATCH;
    }
    if (status != ZC_OK) {
        ZC_WARN("bootstrap: rank 0 rejected a connection from %s: %s", c->addr, why);
        send_reason(c->fd, f.job, ZC_BS_MSG_REJECT, 0, status, why);
        pending_drop(pend, npend, i);
        return ZC_OK;
    }

    /* a process of this job: anything wrong now is the job's failure */
    if (f.arg != (uint32_t)t->size) {
        snprintf(why, sizeof(why),
                 "rank %u (from %s) says the job has %u ranks, rank 0 says %d (ZIPCCL_SIZE or the "
                 "launcher's size differs)",
                 f.rank, c->addr, f.arg, t->size);
    } else if (f.rank == 0 || f.rank >= (uint32_t)t->size) {
        snprintf(why, sizeof(why), "a process from %s claims rank %u, outside 1..%d", c->addr,
                 f.rank, t->size - 1);
    } else if (t->fds[f.rank] >= 0) {
        snprintf(why, sizeof(why), "rank %u connected twice: from %s and from %s", f.rank,
                 t->peer_addr[f.rank], c->addr);
    } else {
        t->fds[f.rank] = c->fd;
        snprintf(t->peer_addr[f.rank], ADDR_MAX, "%s", c->addr);
        (*joined)++;
        pend[i] = pend[--*npend];
        ZC_DEBUG("bootstrap: rank %u joined from %s (%d of %d)", f.rank, c->addr, *joined,
                 t->size - 1);
        return ZC_OK;
    }
    send_reason(c->fd, t->job, ZC_BS_MSG_REJECT, 0, ZC_ERR_MISMATCH, why);
    pending_drop(pend, npend, i);
    return root_fail(t, ZC_ERR_MISMATCH, "%s", why);
}

/* Accepts the ranks on @p lfd (a listening socket it closes), or on @p port when @p lfd is -1. */
static zc_status_t root_accept(tcp_bs_t *t, int port, int lfd, uint64_t deadline)
{
    pending_conn_t pend[PENDING_MAX];
    struct pollfd *pfd = t->pfd;
    int *pfd_what = t->pfd_rank; /* -1 listener, >= 0 pending index, else -rank-2 */
    int npend = 0, joined = 0, err = 0;
    zc_status_t status = ZC_OK;

    if (lfd >= 0 && zc_bs_set_nonblock(lfd) < 0) {
        ZC_ERROR("bootstrap: rank 0 cannot use the listening socket it was given (port %d): %s",
                 port, strerror(errno));
        close(lfd);
        return ZC_ERR_IO;
    }
    if (lfd < 0 && zc_bs_listen(port, &lfd, &err) != ZC_OK) {
        ZC_ERROR("bootstrap: rank 0 cannot listen on port %d: %s (is another job or rank 0 using "
                 "it? ZIPCCL_ROOT names the port)",
                 port, strerror(err));
        return ZC_ERR_IO;
    }

    while (joined < t->size - 1) {
        int n = 0;
        pfd[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
        pfd_what[n++] = -1;
        for (int i = 0; i < npend; i++) {
            pfd[n] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
            pfd_what[n++] = i;
        }
        for (int r = 1; r < t->size; r++) {
            if (t->fds[r] >= 0) {
                pfd[n] = (struct pollfd){.fd = t->fds[r], .events = POLLIN};
                pfd_what[n++] = -r - 2;
            }
        }
        int ready = poll(pfd, (nfds_t)n, zc_bs_poll_timeout_ms(deadline));
        if (ready < 0 && errno != EINTR) {
            status = root_fail(t, ZC_ERR_IO, "poll failed while ranks joined: %s", strerror(errno));
            goto out_close_pending;
        }
        if (ready <= 0) {
            if (zc_time_ns() < deadline)
                continue;
            char list[256];
            missing_ranks(t, 1, list, sizeof(list));
            status = root_fail(t, ZC_ERR_TIMEOUT,
                               "rank%s %s did not connect to rank 0 (port %d) within %d s",
                               t->size - 1 - joined > 1 ? "s" : "", list, port, t->timeout_s);
            goto out_close_pending;
        }
        /* joined ranks first: pend indices below stay valid until the pending loop */
        for (int k = n - 1; k >= 0; k--) {
            if (!pfd[k].revents)
                continue;
            int what = pfd_what[k];
            if (what <= -2) {
                int r = -what - 2;
                char byte;
                ssize_t got = recv(t->fds[r], &byte, 1, MSG_PEEK | MSG_DONTWAIT);
                if (got < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                status = root_fail(t, got == 0 ? ZC_ERR_IO : ZC_ERR_MISMATCH,
                                   "rank %d (%s) %s before every rank joined", r, t->peer_addr[r],
                                   got > 0 ? "sent data" : "closed its connection");
                goto out_close_pending;
            }
            if (what >= 0) {
                pending_conn_t *c = &pend[what];
                zc_status_t s = zc_bs_recv_some(c->fd, c->hdr, sizeof(c->hdr), &c->got, &err);
                if (s != ZC_OK) {
                    ZC_DEBUG("bootstrap: a connection from %s closed before its hello", c->addr);
                    pending_drop(pend, &npend, what);
                } else if (c->got == sizeof(c->hdr)) {
                    ZC_CHECK_GOTO(root_hello(t, pend, &npend, what, &joined), status,
                                  out_close_pending);
                }
                continue;
            }
            for (;;) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof(ss);
                int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break; /* EAGAIN; or a connection reset before we took it */
                if (npend == PENDING_MAX) {
                    ZC_WARN("bootstrap: rank 0 holds %d connections that sent no hello; dropping "
                            "the one from %s",
                            PENDING_MAX, pend[0].addr);
                    pending_drop(pend, &npend, 0);
                }
                set_nodelay(fd);
                pend[npend].fd = fd;
                pend[npend].got = 0;
                zc_bs_addr_string((struct sockaddr *)&ss, sl, pend[npend].addr, ADDR_MAX);
                npend++;
            }
        }
    }

    zc_bs_frame_t welcome = zc_bs_frame_make(t->job, ZC_BS_MSG_WELCOME, 0, 0, 0, 0);
    for (int r = 1; r < t->size; r++) {
        char why[MSG_MAX];
        zc_status_t s = send_frame(t->fds[r], &welcome, NULL, deadline, &err);
        if (s != ZC_OK) {
            if (s == ZC_ERR_TIMEOUT)
                snprintf(why, sizeof(why), "rank %d (%s) stopped reading before every rank joined",
                         r, t->peer_addr[r]);
            else
                io_message(why, sizeof(why), r, t->peer_addr[r], err, "before every rank joined");
            status = root_fail(t, s, "%s", why);
            goto out_close_pending;
        }
    }

out_close_pending:
    while (npend > 0)
        pending_drop(pend, &npend, 0);
    close(lfd);
    return status;
}

/* ---- joining: other ranks connect ------------------------------------------------------------ */

static void sleep_until(uint64_t when_ns)
{
    uint64_t now = zc_time_ns();
    if (now >= when_ns)
        return;
    struct timespec ts = {.tv_sec = (time_t)((when_ns - now) / 1000000000ull),
                          .tv_nsec = (long)((when_ns - now) % 1000000000ull)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* One attempt at @p ai: a connected socket, or -1 with the errno in @p err_p. */
static int connect_once(const struct addrinfo *ai, uint64_t deadline, int *err_p)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err_p = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            *err_p = errno;
            close(fd);
            return -1;
        }
        for (;;) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n = poll(&p, 1, zc_bs_poll_timeout_ms(deadline));
            if (n > 0)
                break;
            if ((n < 0 && errno != EINTR) || (n == 0 && zc_time_ns() >= deadline)) {
                *err_p = n < 0 ? errno : ETIMEDOUT;
                close(fd);
                return -1;
            }
        }
        int so_err = 0;
        socklen_t sl = sizeof(so_err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &sl) < 0 || so_err) {
            *err_p = so_err ? so_err : errno;
            close(fd);
            return -1;
        }
    }
    /*
     * Linux connects a socket to itself when the target port is free and in the
     * ephemeral range (TCP simultaneous open): that is "nobody listening" here.
     */
    struct sockaddr_storage a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    if (getsockname(fd, (struct sockaddr *)&a, &la) == 0 &&
        getpeername(fd, (struct sockaddr *)&b, &lb) == 0 && la == lb && memcmp(&a, &b, la) == 0) {
        *err_p = ECONNREFUSED;
        close(fd);
        return -1;
    }
    set_nodelay(fd);
    return fd;
}

static zc_status_t rank_connect(tcp_bs_t *t, const char *host, int port, uint64_t deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ais = NULL;
    char port_text[16];
    int err = 0, attempts = 0;
    const char *last = "no attempt";
    char last_buf[160];

    snprintf(port_text, sizeof(port_text), "%d", port);
    for (;;) {
        uint64_t attempt_start = zc_time_ns();
        attempts++;
        if (!ais) {
            int rc = getaddrinfo(host, port_text, &hints, &ais);
            if (rc == EAI_AGAIN || (rc == EAI_SYSTEM && errno == EINTR)) {
                ais = NULL;
                snprintf(last_buf, sizeof(last_buf), "resolving '%s': %s", host, gai_strerror(rc));
                last = last_buf;
            } else if (rc != 0) {
                ZC_ERROR("bootstrap: rank %d cannot resolve the root host '%s' (ZIPCCL_ROOT or "
                         "MASTER_ADDR): %s",
                         t->rank, host, gai_strerror(rc));
                return ZC_ERR_INVALID_CONFIG;
            }
        }
        for (struct addrinfo *ai = ais; ai; ai = ai->ai_next) {
            int fd = connect_once(ai, deadline, &err);
            if (fd >= 0) {
                freeaddrinfo(ais);
                t->fds[0] = fd;
                ZC_DEBUG("bootstrap: rank %d connected to %s after %d attempts", t->rank,
                         t->root_addr, attempts);
                return ZC_OK;
            }
            snprintf(last_buf, sizeof(last_buf), "%s", strerror(err));
            last = last_buf;
        }
        if (zc_time_ns() >= deadline)
            break;
        sleep_until(ZC_MIN(attempt_start + ZC_BOOTSTRAP_RETRY_MS * 1000000ull, deadline));
    }
    if (ais)
        freeaddrinfo(ais);
    ZC_ERROR("bootstrap: rank %d could not connect to rank 0 at %s within %d s (%d attempts, last "
             "error: %s)",
             t->rank, t->root_addr, t->timeout_s, attempts, last);
    return ZC_ERR_TIMEOUT;
}

static zc_status_t rank_join(tcp_bs_t *t, const char *host, int port, uint64_t deadline)
{
    ZC_CHECK(rank_connect(t, host, port, deadline));
    ZC_CHECK(rank_send(t, ZC_BS_MSG_HELLO, (uint32_t)t->size, NULL, 0, deadline));

    /* the welcome comes once every rank joined */
    struct pollfd p = {.fd = t->fds[0], .events = POLLIN};
    while (poll(&p, 1, zc_bs_poll_timeout_ms(deadline)) <= 0) {
        if (zc_time_ns() >= deadline)
            return rank_fail(t, ZC_ERR_TIMEOUT,
                             "rank %d joined rank 0 at %s, but not every rank joined within %d s",
                             t->rank, t->root_addr, t->timeout_s);
    }
    return rank_recv(t, ZC_BS_MSG_WELCOME, 0, NULL, 0, deadline);
}

/* Both variants; @p listen_fd is rank 0's listening socket (taken) or -1. */
static zc_status_t tcp_create(int rank, int size, const char *host, int port, int listen_fd,
                              const char *job_id, int timeout_s, zc_bootstrap_t **bs_p)
{
    zc_bootstrap_t *bs;
    tcp_bs_t *t;
    zc_status_t status;

    if (!bs_p || !job_id || size < 1 || rank < 0 || rank >= size || timeout_s < 1 ||
        (size > 1 && (port < 1 || port > 65535 || (rank > 0 && (!host || !*host))))) {
        ZC_ERROR("bootstrap: invalid arguments: rank %d, size %d, root %s:%d, timeout %d s", rank,
                 size, host ? host : "(null)", port, timeout_s);
        if (listen_fd >= 0)
            close(listen_fd);
        return ZC_ERR_INVALID_ARG;
    }
    if (listen_fd >= 0 && size == 1) {
        close(listen_fd);
        listen_fd = -1;
    }

    bs = calloc(1, sizeof(*bs));
    t = calloc(1, sizeof(*t));
    if (!bs || !t)
        goto err_no_memory;
    bs->ops = &tcp_ops;
    bs->ctx = t;
    bs->rank = t->rank = rank;
    bs->size = t->size = size;
    t->timeout_s = timeout_s;
    t->job = zc_bs_job_hash(job_id);
    snprintf(t->op, sizeof(t->op), "the handshake");
    zc_bs_hostport_string(host && *host ? host : "*", port, t->root_addr, sizeof(t->root_addr));
    t->fds = malloc(sizeof(*t->fds) * (size_t)size);
    if (!t->fds)
        goto err_no_memory;
    for (int r = 0; r < size; r++)
        t->fds[r] = -1;
    if (rank == 0) {
        t->peer_addr = calloc((size_t)size, sizeof(*t->peer_addr));
        t->rx = calloc((size_t)size, sizeof(*t->rx));
        /* room for the listener, the pending connections and the ranks while they join */
        t->pfd = calloc((size_t)size + 1 + PENDING_MAX, sizeof(*t->pfd));
        t->pfd_rank = calloc((size_t)size + 1 + PENDING_MAX, sizeof(*t->pfd_rank));
        if (!t->peer_addr || !t->rx || !t->pfd || !t->pfd_rank)
            goto err_no_memory;
    }

    if (size > 1) {
        uint64_t deadline = deadline_after(timeout_s);
        if (rank == 0)
            ZC_CHECK_GOTO(root_accept(t, port, listen_fd, deadline), status, err_destroy);
        else
            ZC_CHECK_GOTO(rank_join(t, host, port, deadline), status, err_destroy);
    }
    *bs_p = bs;
    return ZC_OK;

err_no_memory:
    ZC_ERROR("bootstrap: out of memory for %d ranks", size);
    status = ZC_ERR_NO_MEMORY;
    if (listen_fd >= 0)
        close(listen_fd);
err_destroy:
    tcp_destroy(t);
    free(bs);
    return status;
}

zc_status_t zc_bootstrap_tcp_create_explicit(int rank, int size, const char *host, int port,
                                             const char *job_id, int timeout_s,
                                             zc_bootstrap_t **bs_p)
{
    return tcp_create(rank, size, host, port, -1, job_id, timeout_s, bs_p);
}

zc_status_t zc_bootstrap_tcp_create_listener(int rank, int size, const char *host, int port,
                                             int listen_fd, const char *job_id, int timeout_s,
                                             zc_bootstrap_t **bs_p)
{
    if ((rank == 0 && size > 1) != (listen_fd >= 0)) {
        ZC_ERROR("bootstrap: rank %d of %d given listening socket %d: rank 0 of a job of several "
                 "ranks needs one, other ranks none",
                 rank, size, listen_fd);
        if (listen_fd >= 0)
            close(listen_fd);
        return ZC_ERR_INVALID_ARG;
    }
    return tcp_create(rank, size, host, port, listen_fd, job_id, timeout_s, bs_p);
}
