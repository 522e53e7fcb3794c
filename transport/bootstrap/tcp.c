/*
 * The tcp bootstrap: a star through rank 0 (see tcp.h for the behaviour and
 * wire.h for the messages).
 */
#include "transport/bootstrap/tcp.h"

#include "common/log.h"
#include "common/timer.h"
#include "transport/bootstrap/auth.h"
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
    int has_secret;              /* membership is proven with key (auth.h) */
    uint8_t key[ZC_BS_KEY_LEN];
    char reason[MSG_MAX]; /* rank 0: what it sends in ABORT */
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
static void send_reason(int fd, uint64_t job, zc_bs_msg_t type, uint32_t seq, uint32_t arg,
                        zc_status_t status, const char *reason)
{
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    size_t len = zc_bs_reason_encode(status, reason, payload);
    zc_bs_frame_t f = zc_bs_frame_make(job, type, 0, seq, len, arg);
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
            send_reason(t->fds[r], t->job, ZC_BS_MSG_ABORT, t->seq, 0, status, t->reason);
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
    zc_bs_key_wipe(t->key);
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

/* Connections accepted per poll round, so that pending hellos are read between bursts. */
#define ACCEPT_BURST 128

typedef enum pending_state {
    PENDING_HELLO, /* connected; its hello has not all arrived */
    PENDING_PROOF, /* challenged; its proof has not all arrived */
} pending_state_t;

typedef struct pending_conn {
    int fd;
    pending_state_t state;
    uint8_t buf[ZC_BS_HDR_LEN + ZC_BS_PROOF_LEN]; /* the hello, or the proof frame */
    size_t got;
    uint64_t expires;      /* closed then, unless it moved on */
    zc_bs_transcript_t tr; /* PENDING_PROOF: the claim and rank 0's nonce */
    char addr[ADDR_MAX];
} pending_conn_t;

typedef struct accept_state {
    pending_conn_t pend[ZC_BOOTSTRAP_PENDING_MAX];
    int npend;
    int joined;
} accept_state_t;

/*
 * A refused connection is worth a warning, but a stranger (or a rank retrying a
 * taken slot) may knock many times a second: once per second per message.
 */
#define REFUSAL_WARN(...) ZC_LOG_RATELIMIT(ZC_LOG_WARN, 1000, __VA_ARGS__)

/* Closes pend[i]; the last entry takes its place. */
static void pending_drop(accept_state_t *a, int i)
{
    close(a->pend[i].fd);
    a->pend[i] = a->pend[--a->npend];
}

/*
 * Refuses pend[i] with a REJECT carrying @p reason (for the peer: nothing of this
 * job) and closes it; @p retry says whether the claim may pass later.
 */
static void pending_refuse(accept_state_t *a, int i, uint64_t job, int retry, const char *reason)
{
    send_reason(a->pend[i].fd, job, ZC_BS_MSG_REJECT, 0, retry ? ZC_BS_REJECT_RETRY : 0,
                ZC_ERR_MISMATCH, reason);
    pending_drop(a, i);
}

/* Rank @p r's claim on pend[i] is accepted: it leaves the pending list for fds[r]. */
static void pending_join(tcp_bs_t *t, accept_state_t *a, int i, uint32_t r)
{
    pending_conn_t *c = &a->pend[i];
    uint8_t mac[ZC_BS_MAC_LEN];
    size_t len = 0;
    int err;
    if (t->has_secret) {
        zc_bs_mac(t->key, ZC_BS_ROLE_ROOT, &c->tr, mac);
        len = sizeof(mac);
    }
    zc_bs_frame_t f = zc_bs_frame_make(t->job, ZC_BS_MSG_JOINED, 0, 0, len, 0);
    if (send_frame(c->fd, &f, mac, zc_time_ns() + 100000000ull, &err) != ZC_OK) {
        ZC_DEBUG("bootstrap: rank %u (%s) went away before it was told it joined", r, c->addr);
        pending_drop(a, i);
        return;
    }
    t->fds[r] = c->fd;
    snprintf(t->peer_addr[r], ADDR_MAX, "%s", c->addr);
    a->joined++;
    a->pend[i] = a->pend[--a->npend];
    ZC_DEBUG("bootstrap: rank %u joined from %s (%d of %d)", r, t->peer_addr[r], a->joined,
             t->size - 1);
}

/* Judges the complete hello of pend[i]: refuses it, challenges it, or (no secret) joins it. */
static void root_hello(tcp_bs_t *t, accept_state_t *a, int i)
{
    pending_conn_t *c = &a->pend[i];
    zc_bs_frame_t f;
    char why[MSG_MAX];

    zc_bs_frame_decode(c->buf, &f);
    zc_status_t status = zc_bs_frame_check_job(&f, t->job, why, sizeof(why));
    if (status == ZC_ERR_CORRUPT) {
        REFUSAL_WARN("bootstrap: rank 0 dropped a connection from %s: %s", c->addr, why);
        pending_drop(a, i);
        return;
    }
    if (status != ZC_OK) {
        REFUSAL_WARN("bootstrap: rank 0 rejected a connection from %s: %s", c->addr, why);
        pending_refuse(a, i, f.job, 0,
                       "rank 0 belongs to another job: the job ids differ (ZIPCCL_JOB_ID or the "
                       "launcher's job id)");
        return;
    }
    if (f.type != ZC_BS_MSG_HELLO || f.seq != 0 || f.len != 0) {
        snprintf(why, sizeof(why), "expected a hello, got a %s message of %llu bytes",
                 zc_bs_msg_name(f.type), (unsigned long long)f.len);
        REFUSAL_WARN("bootstrap: rank 0 rejected a connection from %s: %s", c->addr, why);
        pending_refuse(a, i, f.job, 0, why);
        return;
    }
    /* a claim of this job: refused alone when wrong, whoever sent it */
    int retry = 0;
    if (f.arg != (uint32_t)t->size)
        snprintf(why, sizeof(why),
                 "rank %u says the job has %u ranks, rank 0 says %d (ZIPCCL_SIZE or the "
                 "launcher's size differs)",
                 f.rank, f.arg, t->size);
    else if (f.rank == 0 || f.rank >= (uint32_t)t->size)
        snprintf(why, sizeof(why), "rank %u is outside 1..%d", f.rank, t->size - 1);
    else if (t->fds[f.rank] >= 0 && !t->has_secret)
        retry = snprintf(why, sizeof(why), "rank %u has already joined", f.rank) > 0;
    else
        why[0] = '\0';
    if (why[0]) {
        if (retry)
            REFUSAL_WARN(
                "bootstrap: rank 0 refused a connection from %s: %s from %s (a stranger, or "
                "two processes with the same rank)",
                c->addr, why, t->peer_addr[f.rank]);
        else
            REFUSAL_WARN("bootstrap: rank 0 refused a connection from %s: %s", c->addr, why);
        pending_refuse(a, i, f.job, retry, why);
        return;
    }
    if (!t->has_secret) {
        pending_join(t, a, i, f.rank);
        return;
    }

    int err;
    c->tr = (zc_bs_transcript_t){.job = t->job, .rank = f.rank, .size = (uint32_t)t->size};
    zc_bs_frame_t ch = zc_bs_frame_make(t->job, ZC_BS_MSG_CHALLENGE, 0, 0, ZC_BS_NONCE_LEN, 0);
    if (zc_bs_random(c->tr.nonce_root, sizeof(c->tr.nonce_root)) != ZC_OK ||
        send_frame(c->fd, &ch, c->tr.nonce_root, zc_time_ns() + 100000000ull, &err) != ZC_OK) {
        ZC_DEBUG("bootstrap: cannot challenge the connection from %s", c->addr);
        pending_drop(a, i);
        return;
    }
    c->state = PENDING_PROOF;
    c->got = 0;
    c->expires = zc_time_ns() + ZC_BOOTSTRAP_STEP_MS * 1000000ull;
}

/* Judges the complete proof of pend[i]: joins it, refuses it, or fails the job. */
static zc_status_t root_proof(tcp_bs_t *t, accept_state_t *a, int i)
{
    pending_conn_t *c = &a->pend[i];
    zc_bs_frame_t f;
    char why[MSG_MAX];
    zc_bs_expect_t e = {.job = t->job,
                        .type = ZC_BS_MSG_PROOF,
                        .rank = c->tr.rank,
                        .seq = 0,
                        .len = ZC_BS_PROOF_LEN,
                        .arg = 0};

    zc_bs_frame_decode(c->buf, &f);
    if (zc_bs_frame_check(&f, &e, why, sizeof(why)) != ZC_OK) {
        REFUSAL_WARN("bootstrap: rank 0 refused a connection from %s claiming rank %u: %s", c->addr,
                     c->tr.rank, why);
        pending_refuse(a, i, t->job, 0, why);
        return ZC_OK;
    }
    const uint8_t *payload = c->buf + ZC_BS_HDR_LEN;
    memcpy(c->tr.nonce_rank, payload, ZC_BS_NONCE_LEN);
    if (!zc_bs_mac_verify(t->key, ZC_BS_ROLE_RANK, &c->tr, payload + ZC_BS_NONCE_LEN)) {
        REFUSAL_WARN(
            "bootstrap: rank 0 refused a connection from %s claiming rank %u: wrong proof of "
            "the job secret (a process of another job or no process of this one)",
            c->addr, c->tr.rank);
        pending_refuse(a, i, t->job, 0,
                       "wrong proof of the job secret (ZIPCCL_JOB_SECRET must be the same on "
                       "every rank)");
        return ZC_OK;
    }
    uint32_t r = c->tr.rank;
    if (t->fds[r] >= 0) {
        /* proven: two processes of this job think they are rank r */
        snprintf(why, sizeof(why), "rank %u connected twice: from %s and from %s", r,
                 t->peer_addr[r], c->addr);
        pending_refuse(a, i, t->job, 0, why);
        return root_fail(t, ZC_ERR_MISMATCH, "%s", why);
    }
    pending_join(t, a, i, r);
    return ZC_OK;
}

/* Reads what pend[i] sent; judges a complete hello or proof. */
static zc_status_t pending_read(tcp_bs_t *t, accept_state_t *a, int i)
{
    pending_conn_t *c = &a->pend[i];
    size_t want = ZC_BS_HDR_LEN + (c->state == PENDING_PROOF ? ZC_BS_PROOF_LEN : 0);
    int err = 0;
    if (zc_bs_recv_some(c->fd, c->buf, want, &c->got, &err) != ZC_OK) {
        ZC_DEBUG("bootstrap: a connection from %s closed before its %s", c->addr,
                 c->state == PENDING_PROOF ? "proof" : "hello");
        pending_drop(a, i);
        return ZC_OK;
    }
    if (c->got < want)
        return ZC_OK;
    if (c->state == PENDING_HELLO) {
        root_hello(t, a, i);
        return ZC_OK;
    }
    return root_proof(t, a, i);
}

/*
 * Makes room for one more pending connection: evicts the oldest that sent no
 * hello (warned about once, in *@p flood_p); 0 if every slot holds a challenged claim.
 */
static int pending_make_room(accept_state_t *a, int *flood_p)
{
    if (a->npend < ZC_BOOTSTRAP_PENDING_MAX)
        return 1;
    int oldest = -1;
    for (int i = 0; i < a->npend; i++) {
        if (a->pend[i].state == PENDING_HELLO &&
            (oldest < 0 || a->pend[i].expires < a->pend[oldest].expires))
            oldest = i;
    }
    if (oldest < 0)
        return 0; /* they expire within ZC_BOOTSTRAP_STEP_MS */
    if (!*flood_p)
        ZC_WARN("bootstrap: rank 0 holds %d connections that have not joined; each new one now "
                "closes the oldest that sent no hello (the first from %s)",
                ZC_BOOTSTRAP_PENDING_MAX, a->pend[oldest].addr);
    *flood_p = 1;
    pending_drop(a, oldest);
    return 1;
}

/* Accepts what waits on @p lfd (ACCEPT_BURST at most) and reads the hellos already there. */
static zc_status_t root_accept_burst(tcp_bs_t *t, accept_state_t *a, int lfd, int *flood_p)
{
    for (int n = 0; n < ACCEPT_BURST; n++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break; /* EAGAIN; or a connection reset before we took it */
        if (!pending_make_room(a, flood_p)) {
            close(fd);
            continue;
        }
        set_nodelay(fd);
        pending_conn_t *c = &a->pend[a->npend++];
        *c = (pending_conn_t){.fd = fd,
                              .state = PENDING_HELLO,
                              .expires = zc_time_ns() + ZC_BOOTSTRAP_STEP_MS * 1000000ull};
        zc_bs_addr_string((struct sockaddr *)&ss, sl, c->addr, ADDR_MAX);
        /* a rank sends its hello with its connect: judge it before the next accept */
        ZC_CHECK(pending_read(t, a, a->npend - 1));
    }
    return ZC_OK;
}

/*
 * A joined rank's connection became readable before every rank joined: it hung
 * up or sent early. With a secret it was proven, and the job fails; without one
 * it may have been anyone, and its rank is free again.
 */
static zc_status_t root_joined_event(tcp_bs_t *t, accept_state_t *a, int r)
{
    char byte;
    ssize_t got = recv(t->fds[r], &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR))
        return ZC_OK;
    const char *what = got > 0 ? "sent data" : "closed its connection";
    if (t->has_secret)
        return root_fail(t, got == 0 ? ZC_ERR_IO : ZC_ERR_MISMATCH,
                         "rank %d (%s) %s before every rank joined", r, t->peer_addr[r], what);
    ZC_WARN("bootstrap: rank %d (%s) %s before every rank joined; rank %d is free again", r,
            t->peer_addr[r], what, r);
    close(t->fds[r]);
    t->fds[r] = -1;
    a->joined--;
    return ZC_OK;
}

/* Accepts the ranks on @p lfd (a listening socket it closes), or on @p port when @p lfd is -1. */
static zc_status_t root_accept(tcp_bs_t *t, int port, int lfd, uint64_t deadline)
{
    accept_state_t *a = calloc(1, sizeof(*a));
    struct pollfd *pfd = t->pfd;
    int *pfd_what = t->pfd_rank; /* -1 listener, >= 0 pending index, else -rank-2 */
    int err = 0, flood = 0;
    zc_status_t status = ZC_OK;

    if (!a) {
        ZC_ERROR("bootstrap: out of memory for rank 0's pending connections");
        if (lfd >= 0)
            close(lfd);
        return ZC_ERR_NO_MEMORY;
    }
    if (lfd >= 0 && zc_bs_set_nonblock(lfd) < 0) {
        ZC_ERROR("bootstrap: rank 0 cannot use the listening socket it was given (port %d): %s",
                 port, strerror(errno));
        status = ZC_ERR_IO;
        goto out_close_listener;
    }
    if (lfd < 0 && zc_bs_listen(port, &lfd, &err) != ZC_OK) {
        ZC_ERROR("bootstrap: rank 0 cannot listen on port %d: %s (is another job or rank 0 using "
                 "it? ZIPCCL_ROOT names the port)",
                 port, strerror(err));
        lfd = -1;
        status = ZC_ERR_IO;
        goto out_close_listener;
    }

    while (a->joined < t->size - 1) {
        uint64_t now = zc_time_ns(), wake = deadline;
        for (int i = a->npend - 1; i >= 0; i--) {
            if (a->pend[i].expires <= now) {
                ZC_DEBUG("bootstrap: the connection from %s sent no %s within %d ms; closed",
                         a->pend[i].addr, a->pend[i].state == PENDING_PROOF ? "proof" : "hello",
                         ZC_BOOTSTRAP_STEP_MS);
                pending_drop(a, i);
            }
        }
        int n = 0;
        pfd[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
        pfd_what[n++] = -1;
        for (int i = 0; i < a->npend; i++) {
            pfd[n] = (struct pollfd){.fd = a->pend[i].fd, .events = POLLIN};
            pfd_what[n++] = i;
            wake = ZC_MIN(wake, a->pend[i].expires);
        }
        for (int r = 1; r < t->size; r++) {
            if (t->fds[r] >= 0) {
                pfd[n] = (struct pollfd){.fd = t->fds[r], .events = POLLIN};
                pfd_what[n++] = -r - 2;
            }
        }
        int ready = poll(pfd, (nfds_t)n, zc_bs_poll_timeout_ms(wake));
        if (ready < 0 && errno != EINTR) {
            status = root_fail(t, ZC_ERR_IO, "poll failed while ranks joined: %s", strerror(errno));
            goto out_close_listener;
        }
        if (ready <= 0) {
            if (zc_time_ns() < deadline)
                continue;
            char list[256];
            missing_ranks(t, 1, list, sizeof(list));
            status = root_fail(t, ZC_ERR_TIMEOUT,
                               "rank%s %s did not connect to rank 0 (port %d) within %d s",
                               t->size - 1 - a->joined > 1 ? "s" : "", list, port, t->timeout_s);
            goto out_close_listener;
        }
        /* joined ranks, then pending ones from the last: a drop moves only entries seen already */
        for (int k = n - 1; k >= 1; k--) {
            if (!pfd[k].revents)
                continue;
            int what = pfd_what[k];
            if (what <= -2)
                ZC_CHECK_GOTO(root_joined_event(t, a, -what - 2), status, out_close_listener);
            else
                ZC_CHECK_GOTO(pending_read(t, a, what), status, out_close_listener);
        }
        if (pfd[0].revents)
            ZC_CHECK_GOTO(root_accept_burst(t, a, lfd, &flood), status, out_close_listener);
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
            goto out_close_listener;
        }
    }

out_close_listener:
    while (a->npend > 0)
        pending_drop(a, 0);
    free(a);
    if (lfd >= 0)
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

/*
 * Connects t->fds[0] to rank 0, retrying until @p deadline. @p earlier (or NULL):
 * why an earlier connection of this rank did not join, for the message.
 */
static zc_status_t rank_connect(tcp_bs_t *t, const char *host, int port, uint64_t deadline,
                                const char *earlier)
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
             "error: %s)%s%s",
             t->rank, t->root_addr, t->timeout_s, attempts, last,
             earlier ? "; before that it could not join: " : "", earlier ? earlier : "");
    return ZC_ERR_TIMEOUT;
}

/*
 * Reads rank 0's next handshake frame into @p f, and its payload (at most @p max
 * bytes) into @p payload. A REJECT returns the status it carries, with rank 0's
 * reason in @p why and whether the claim may pass later in *@p retry_p; a
 * connection that closes before rank 0 accepted this rank is retried too. Does
 * not log: the caller decides whether this attempt was the last.
 */
static zc_status_t hs_recv(tcp_bs_t *t, zc_bs_frame_t *f, uint8_t *payload, size_t max,
                           uint64_t deadline, char *why, size_t why_len, int *retry_p)
{
    uint8_t hdr[ZC_BS_HDR_LEN], reject[4 + ZC_BS_REASON_MAX];
    char text[256], reason[ZC_BS_REASON_MAX + 1];
    zc_status_t carried;
    int err = 0;

    zc_status_t status = zc_bs_recv_all(t->fds[0], hdr, sizeof(hdr), deadline, &err);
    if (status == ZC_OK) {
        zc_bs_frame_decode(hdr, f);
        status = zc_bs_frame_check_job(f, t->job, text, sizeof(text));
        if (status != ZC_OK) {
            snprintf(why, why_len, "rank 0 at %s in the handshake: %s", t->root_addr, text);
            return status;
        }
        if (f->type == ZC_BS_MSG_REJECT ? f->len < 4 || f->len > sizeof(reject) : f->len > max) {
            snprintf(why, why_len, "rank 0 at %s sent a %s of %llu bytes in the handshake",
                     t->root_addr, zc_bs_msg_name(f->type), (unsigned long long)f->len);
            return ZC_ERR_CORRUPT;
        }
        uint8_t *dst = f->type == ZC_BS_MSG_REJECT ? reject : payload;
        status = zc_bs_recv_all(t->fds[0], dst, (size_t)f->len, deadline, &err);
    }
    if (status == ZC_ERR_TIMEOUT) {
        snprintf(why, why_len, "rank %d timed out after %d s in the handshake with rank 0 at %s",
                 t->rank, t->timeout_s, t->root_addr);
        return status;
    }
    if (status != ZC_OK) {
        snprintf(text, sizeof(text), "before it accepted rank %d", t->rank);
        io_message(why, why_len, 0, t->root_addr, err, text);
        *retry_p = 1;
        return status;
    }
    if (f->type != ZC_BS_MSG_REJECT)
        return ZC_OK;
    if (zc_bs_reason_decode(reject, (size_t)f->len, &carried, reason) != ZC_OK)
        carried = ZC_ERR_INTERNAL; /* the length was checked above */
    snprintf(why, why_len, "rank 0 at %s rejected rank %d: %s", t->root_addr, t->rank, reason);
    *retry_p = f->arg == ZC_BS_REJECT_RETRY;
    return carried;
}

/* Checks a handshake frame from rank 0 against what comes next; the mismatch in @p why. */
static zc_status_t hs_expect(tcp_bs_t *t, const zc_bs_frame_t *f, zc_bs_msg_t type, uint64_t len,
                             char *why, size_t why_len)
{
    char text[256];
    zc_bs_expect_t e = {.job = t->job, .type = type, .rank = 0, .seq = 0, .len = len, .arg = 0};
    zc_status_t status = zc_bs_frame_check(f, &e, text, sizeof(text));
    if (status != ZC_OK)
        snprintf(why, why_len, "rank 0 at %s in the handshake: %s", t->root_addr, text);
    return status;
}

/*
 * Sends @p f (with @p payload), then reads rank 0's answer into @p f and @p reply
 * (hs_recv). @p payload and @p reply may be the same buffer. A connection that
 * fails is worth another attempt (*@p retry_p).
 */
static zc_status_t hs_send_recv(tcp_bs_t *t, zc_bs_frame_t *f, const void *payload, uint8_t *reply,
                                size_t max, uint64_t deadline, char *why, size_t why_len,
                                int *retry_p)
{
    char when[64];
    int err = 0;
    zc_status_t status = send_frame(t->fds[0], f, payload, deadline, &err);
    if (status == ZC_OK)
        status = hs_recv(t, f, reply, max, deadline, why, why_len, retry_p);
    else if (status == ZC_ERR_TIMEOUT)
        snprintf(why, why_len, "rank %d timed out after %d s in the handshake with rank 0 at %s",
                 t->rank, t->timeout_s, t->root_addr);
    else {
        snprintf(when, sizeof(when), "before it accepted rank %d", t->rank);
        io_message(why, why_len, 0, t->root_addr, err, when);
    }
    *retry_p |= status == ZC_ERR_IO;
    return status;
}

/*
 * One attempt at joining over t->fds[0]: hello, then (with a secret) challenge
 * and proof, until rank 0 says JOINED. A failure is described in @p why;
 * *@p retry_p says whether another connection may succeed.
 */
static zc_status_t rank_handshake(tcp_bs_t *t, uint64_t deadline, char *why, size_t why_len,
                                  int *retry_p)
{
    uint8_t payload[ZC_BS_PROOF_LEN];
    zc_bs_transcript_t tr = {.job = t->job, .rank = (uint32_t)t->rank, .size = (uint32_t)t->size};
    zc_bs_frame_t f;

    *retry_p = 0;
    f = zc_bs_frame_make(t->job, ZC_BS_MSG_HELLO, (uint32_t)t->rank, 0, 0, (uint32_t)t->size);
    ZC_CHECK(hs_send_recv(t, &f, NULL, payload, ZC_BS_NONCE_LEN, deadline, why, why_len, retry_p));

    if (t->has_secret) {
        if (f.type == ZC_BS_MSG_JOINED) {
            snprintf(why, why_len,
                     "rank 0 at %s has no job secret and rank %d has one (set ZIPCCL_JOB_SECRET "
                     "on every rank or on none)",
                     t->root_addr, t->rank);
            return ZC_ERR_MISMATCH;
        }
        ZC_CHECK(hs_expect(t, &f, ZC_BS_MSG_CHALLENGE, ZC_BS_NONCE_LEN, why, why_len));
        memcpy(tr.nonce_root, payload, ZC_BS_NONCE_LEN);
        if (zc_bs_random(tr.nonce_rank, sizeof(tr.nonce_rank)) != ZC_OK) {
            snprintf(why, why_len, "rank %d cannot draw a nonce (libsodium failed to start)",
                     t->rank);
            return ZC_ERR_INTERNAL;
        }
        memcpy(payload, tr.nonce_rank, ZC_BS_NONCE_LEN);
        zc_bs_mac(t->key, ZC_BS_ROLE_RANK, &tr, payload + ZC_BS_NONCE_LEN);
        f = zc_bs_frame_make(t->job, ZC_BS_MSG_PROOF, (uint32_t)t->rank, 0, ZC_BS_PROOF_LEN, 0);
        ZC_CHECK(
            hs_send_recv(t, &f, payload, payload, ZC_BS_MAC_LEN, deadline, why, why_len, retry_p));
    } else if (f.type == ZC_BS_MSG_CHALLENGE) {
        snprintf(why, why_len,
                 "rank 0 at %s requires a job secret and rank %d has none (set ZIPCCL_JOB_SECRET "
                 "on every rank or on none)",
                 t->root_addr, t->rank);
        return ZC_ERR_MISMATCH;
    }
    ZC_CHECK(hs_expect(t, &f, ZC_BS_MSG_JOINED, t->has_secret ? ZC_BS_MAC_LEN : 0, why, why_len));
    if (t->has_secret && !zc_bs_mac_verify(t->key, ZC_BS_ROLE_ROOT, &tr, payload)) {
        snprintf(why, why_len,
                 "the process listening at %s cannot prove it knows the job secret: it is not "
                 "rank 0 of this job",
                 t->root_addr);
        return ZC_ERR_MISMATCH;
    }
    return ZC_OK;
}

static zc_status_t rank_join(tcp_bs_t *t, const char *host, int port, uint64_t deadline)
{
    char why[2 * MSG_MAX];
    int retry, attempts = 0;

    for (;;) {
        ZC_CHECK(rank_connect(t, host, port, deadline, attempts ? why : NULL));
        attempts++;
        zc_status_t status = rank_handshake(t, deadline, why, sizeof(why), &retry);
        if (status == ZC_OK)
            break;
        if (retry && zc_time_ns() >= deadline)
            return rank_fail(t, ZC_ERR_TIMEOUT,
                             "rank %d could not join rank 0 at %s within %d s (%d attempts, last: "
                             "%s)",
                             t->rank, t->root_addr, t->timeout_s, attempts, why);
        if (!retry)
            return rank_fail(t, status, "%s", why);
        ZC_DEBUG("bootstrap: rank %d tries again: %s", t->rank, why);
        close(t->fds[0]);
        t->fds[0] = -1;
        sleep_until(ZC_MIN(zc_time_ns() + ZC_BOOTSTRAP_RETRY_MS * 1000000ull, deadline));
    }

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

/* Joins the job; @p a->listen_fd is rank 0's listening socket (taken) or -1. */
static zc_status_t tcp_create(const zc_bootstrap_tcp_args_t *a, zc_bootstrap_t **bs_p)
{
    zc_bootstrap_t *bs;
    tcp_bs_t *t;
    zc_status_t status;
    int rank = a->rank, size = a->size, port = a->port, listen_fd = a->listen_fd;
    const char *host = a->host;

    if (!bs_p || !a->job_id || size < 1 || rank < 0 || rank >= size || a->timeout_s < 1 ||
        (a->secret && a->secret_len < ZC_BS_SECRET_MIN) ||
        (size > 1 && (port < 1 || port > 65535 || (rank > 0 && (!host || !*host))))) {
        ZC_ERROR("bootstrap: invalid arguments: rank %d, size %d, root %s:%d, timeout %d s%s", rank,
                 size, host ? host : "(null)", port, a->timeout_s,
                 a->secret && a->secret_len < ZC_BS_SECRET_MIN ? ", a secret too short" : "");
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
    t->timeout_s = a->timeout_s;
    t->job = zc_bs_job_hash(a->job_id);
    if (a->secret) {
        status = zc_bs_key_derive(a->secret, a->secret_len, t->key);
        if (status != ZC_OK) {
            ZC_ERROR("bootstrap: cannot derive a key from the job secret (libsodium failed to "
                     "start)");
            if (listen_fd >= 0)
                close(listen_fd);
            goto err_destroy;
        }
        t->has_secret = 1;
    }
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
        t->pfd = calloc((size_t)size + 1 + ZC_BOOTSTRAP_PENDING_MAX, sizeof(*t->pfd));
        t->pfd_rank = calloc((size_t)size + 1 + ZC_BOOTSTRAP_PENDING_MAX, sizeof(*t->pfd_rank));
        if (!t->peer_addr || !t->rx || !t->pfd || !t->pfd_rank)
            goto err_no_memory;
    }

    if (size > 1) {
        uint64_t deadline = deadline_after(a->timeout_s);
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

zc_status_t zc_bootstrap_tcp_join(const zc_bootstrap_tcp_args_t *args, zc_bootstrap_t **bs_p)
{
    if (!args)
        return ZC_ERR_INVALID_ARG;
    if (args->listen_fd >= 0 && args->rank != 0) {
        ZC_ERROR("bootstrap: rank %d given listening socket %d: only rank 0 listens", args->rank,
                 args->listen_fd);
        close(args->listen_fd);
        return ZC_ERR_INVALID_ARG;
    }
    return tcp_create(args, bs_p);
}

/* The secret-less shorthands' common part. */
static zc_status_t create_without_secret(int rank, int size, const char *host, int port,
                                         int listen_fd, const char *job_id, int timeout_s,
                                         zc_bootstrap_t **bs_p)
{
    zc_bootstrap_tcp_args_t a = {.rank = rank,
                                 .size = size,
                                 .host = host,
                                 .port = port,
                                 .listen_fd = listen_fd,
                                 .job_id = job_id,
                                 .timeout_s = timeout_s};
    return tcp_create(&a, bs_p);
}

zc_status_t zc_bootstrap_tcp_create_explicit(int rank, int size, const char *host, int port,
                                             const char *job_id, int timeout_s,
                                             zc_bootstrap_t **bs_p)
{
    return create_without_secret(rank, size, host, port, -1, job_id, timeout_s, bs_p);
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
    return create_without_secret(rank, size, host, port, listen_fd, job_id, timeout_s, bs_p);
}
