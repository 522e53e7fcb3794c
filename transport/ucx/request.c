/* Tagged send and receive, progress, completion, deadlines and peer failures. */
#include "common/log.h"
#include "common/timer.h"
#include "transport/ucx/ucx_int.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>

/* "recv of 4096 bytes tag 0x5 from peer 3" */
static void describe(const zc_ucx_req_t *req, char *buf, size_t len)
{
    snprintf(buf, len, "%s of %zu bytes tag 0x%" PRIx64 " %s peer %d",
             req->is_recv ? "recv" : "send", req->len, req->tag, req->is_recv ? "from" : "to",
             req->peer);
}

/* Logs why @p req failed, once per dead peer: its other requests fail for the same reason. */
static void log_failure(zc_ucx_comm_t *comm, const zc_ucx_req_t *req, zc_status_t status,
                        const char *reason)
{
    zc_ucx_peer_t *peer = &comm->peers[req->peer];
    const char *in = comm->what ? " in " : "", *what = comm->what ? comm->what : "";

    if (comm->quiet)
        return;
    if (status == ZC_ERR_PEER) {
        if (peer->reported)
            return;
        peer->reported = 1;
        ZC_ERROR("ucx: peer %d failed (%s) during %s of %zu bytes tag 0x%" PRIx64 "%s%s", req->peer,
                 reason, req->is_recv ? "recv" : "send", req->len, req->tag, in, what);
        return;
    }
    char op[128];
    describe(req, op, sizeof(op));
    if (status == ZC_ERR_BUFFER_TOO_SMALL)
        ZC_ERROR("ucx: %s failed: the message is longer than the buffer%s%s", op, in, what);
    else
        ZC_ERROR("ucx: %s failed: %s%s%s", op, reason ? reason : zc_status_string(status), in,
                 what);
}

/* Makes @p req final and runs its callback; @p req may be gone when this returns. */
static void complete(zc_ucx_comm_t *comm, zc_ucx_req_t *req, zc_status_t status, const char *reason,
                     size_t length)
{
    zc_ucx_peer_t *peer = &comm->peers[req->peer];

    /* UCX may report the requests of a failed endpoint as cancelled or reset: it is the peer */
    if (status < 0 && peer->error != ZC_OK) {
        status = ZC_ERR_PEER;
        reason = peer->reason;
    }
    req->length = status == ZC_OK ? length : 0;
    req->status = status;
    comm->completed += status == ZC_OK;
    if (status < 0) {
        comm->saw_failure |= status == ZC_ERR_PEER;
        log_failure(comm, req, status, reason);
    }
    if (req->done)
        req->done(req, req->done_arg);
}

/* The operation underneath @p req completed (zc_ucx_op_fn). */
static void op_done(zc_ucx_op_t *op, void *arg)
{
    zc_ucx_req_t *req = arg;

    complete(req->comm, req, op->status, op->reason, op->length);
}

/*
 * Detaches @p req from its operation, which completes later without it (a
 * receive is cancelled; a send cannot be), and gives it @p status. No callback.
 */
static void abandon(zc_ucx_comm_t *comm, zc_ucx_req_t *req, zc_status_t status)
{
    zc_ucx_op_detach(&req->op);
    req->status = status;
    comm->saw_failure = 1;
}

void zc_ucx_abandon(zc_ucx_comm_t *comm, zc_ucx_req_t *req, zc_status_t status)
{
    if (req->status == ZC_INPROGRESS)
        abandon(comm, req, status);
}

/* zc_ucx_worker_fail_ops: the requests of a peer UCX reported dead */
static int of_failed_peer(zc_ucx_op_t *op, void *arg)
{
    zc_ucx_comm_t *comm = arg;
    const zc_ucx_req_t *req = op->done_arg;

    return op->done == op_done && comm->peers[req->peer].error != ZC_OK;
}

/*
 * Fails every request to or from a peer UCX reported dead. Receives are not
 * tied to an endpoint, so UCX itself would leave them waiting forever. The
 * operations complete with ZC_ERR_PEER; complete() then gives each its peer's
 * reason.
 */
void zc_ucx_fail_peers(zc_ucx_comm_t *comm)
{
    zc_ucx_worker_fail_ops(comm->worker, of_failed_peer, comm, ZC_ERR_PEER, NULL);
}

uint64_t zc_ucx_completed(const zc_ucx_comm_t *comm)
{
    return comm->completed;
}

uint64_t zc_ucx_posted(const zc_ucx_comm_t *comm)
{
    return comm->posted;
}

zc_ucx_worker_t *zc_ucx_comm_worker(const zc_ucx_comm_t *comm)
{
    return comm->worker;
}

void zc_ucx_set_quiet(zc_ucx_comm_t *comm)
{
    comm->quiet = 1;
}

int zc_ucx_peer_failed(const zc_ucx_comm_t *comm, int peer)
{
    return peer >= 0 && peer < comm->size && comm->peers[peer].error != ZC_OK;
}

unsigned zc_ucx_progress(zc_ucx_comm_t *comm)
{
    unsigned events = zc_ucx_worker_progress(comm->worker);
    if (ZC_UNLIKELY(comm->failure_pending)) {
        comm->failure_pending = 0;
        zc_ucx_fail_peers(comm);
    }
    return events;
}

static zc_status_t post(zc_ucx_comm_t *comm, int is_recv, int peer, uint64_t tag, void *buf,
                        size_t len, zc_ucx_done_fn done, void *arg, zc_ucx_req_t *req)
{
    if (!comm || !req || (!buf && len > 0) || peer < 0 || peer >= comm->size ||
        tag > ZC_UCX_TAG_MAX)
        return ZC_ERR_INVALID_ARG;

    zc_ucx_req_t r = {
        .status = ZC_INPROGRESS,
        .comm = comm,
        .done = done,
        .done_arg = arg,
        .tag = tag,
        .len = len,
        .peer = peer,
        .is_recv = is_recv,
    };
    zc_ucx_peer_t *p = &comm->peers[peer];
    if (p->error != ZC_OK) {
        log_failure(comm, &r, ZC_ERR_PEER, p->reason);
        return ZC_ERR_PEER;
    }

    /*
     * @p req is written before the operation starts: it may complete, and its
     * callback run, inside the call.
     */
    *req = r;
    comm->posted++;
    zc_status_t status =
        is_recv
            ? zc_ucx_op_recv(comm->worker, zc_ucx_tag(peer, tag), buf, len, op_done, req, &req->op)
            : zc_ucx_op_send(p->ep, zc_ucx_tag(comm->rank, tag), buf, len, op_done, req, &req->op);
    if (status == ZC_OK)
        return ZC_OK;
    const char *reason = req->op.reason;
    if (p->error != ZC_OK) {
        status = ZC_ERR_PEER;
        reason = p->reason;
    }
    req->status = status;
    log_failure(comm, &r, status, reason);
    return status;
}

zc_status_t zc_ucx_isend_cb(zc_ucx_comm_t *comm, int peer, uint64_t tag, const void *buf,
                            size_t len, zc_ucx_done_fn done, void *arg, zc_ucx_req_t *req)
{
    /* UCX takes a non-const buffer for sends too; it does not write to it */
    return post(comm, 0, peer, tag, (void *)buf, len, done, arg, req);
}

zc_status_t zc_ucx_irecv_cb(zc_ucx_comm_t *comm, int peer, uint64_t tag, void *buf, size_t len,
                            zc_ucx_done_fn done, void *arg, zc_ucx_req_t *req)
{
    return post(comm, 1, peer, tag, buf, len, done, arg, req);
}

zc_status_t zc_ucx_isend(zc_ucx_comm_t *comm, int peer, uint64_t tag, const void *buf, size_t len,
                         zc_ucx_req_t *req)
{
    return zc_ucx_isend_cb(comm, peer, tag, buf, len, NULL, NULL, req);
}

zc_status_t zc_ucx_irecv(zc_ucx_comm_t *comm, int peer, uint64_t tag, void *buf, size_t len,
                         zc_ucx_req_t *req)
{
    return zc_ucx_irecv_cb(comm, peer, tag, buf, len, NULL, NULL, req);
}

zc_status_t zc_ucx_test(zc_ucx_comm_t *comm, zc_ucx_req_t *req)
{
    if (!comm || !req)
        return ZC_ERR_INVALID_ARG;
    if (req->status == ZC_INPROGRESS)
        zc_ucx_progress(comm);
    return req->status;
}

zc_status_t zc_ucx_wait(zc_ucx_comm_t *comm, zc_ucx_req_t *req, const char *what)
{
    return zc_ucx_waitall(comm, req, req ? 1 : 0, what);
}

static void log_timeout(zc_ucx_comm_t *comm, const zc_ucx_req_t *req, size_t incomplete, size_t n,
                        const char *what)
{
    char op[128];
    describe(req, op, sizeof(op));
    if (n > 1)
        ZC_ERROR("ucx: %s timed out after %" PRId64 " s%s%s (%zu of %zu requests incomplete)", op,
                 comm->timeout_s, what ? " in " : "", what ? what : "", incomplete, n);
    else
        ZC_ERROR("ucx: %s timed out after %" PRId64 " s%s%s", op, comm->timeout_s,
                 what ? " in " : "", what ? what : "");
}

zc_status_t zc_ucx_waitall(zc_ucx_comm_t *comm, zc_ucx_req_t *reqs, size_t n, const char *what)
{
    if (!comm || (!reqs && n > 0))
        return ZC_ERR_INVALID_ARG;

    uint64_t deadline = 0; /* read the clock only once there is something to wait for */
    zc_status_t status = ZC_OK;
    size_t first = 0;     /* reqs[0..first) completed successfully */
    uint64_t busy_ns = 0; /* the last round of progress that moved something */

    comm->what = what;
    for (;;) {
        size_t incomplete = 0, oldest = n;
        for (size_t i = first; i < n; i++) {
            zc_status_t s = reqs[i].status;
            if (s == ZC_INPROGRESS) {
                incomplete++;
                oldest = ZC_MIN(oldest, i);
            } else if (s < 0) {
                status = s;
                goto out_abandon;
            } else if (i == first) {
                first++;
            }
        }
        if (incomplete == 0)
            break;
        uint64_t now = zc_time_ns();
        if (deadline == 0) {
            deadline = now + (uint64_t)comm->timeout_s * 1000000000ull;
            busy_ns = now;
        } else if (now > deadline) {
            log_timeout(comm, &reqs[oldest], incomplete, n, what);
            status = ZC_ERR_TIMEOUT;
            goto out_abandon;
        }
        /* poll, yielding the core between empty rounds (ranks may share it), then sleep */
        if (zc_ucx_progress(comm) > 0)
            busy_ns = now;
        else if (now - busy_ns < ZC_UCX_SPIN_NS ||
                 zc_ucx_worker_sleep(&comm->worker, 1,
                                     ZC_MIN(deadline - now, ZC_UCX_SLEEP_MAX_NS)) != ZC_OK)
            sched_yield();
    }
    comm->what = NULL;
    return ZC_OK;

out_abandon:
    for (size_t i = first; i < n; i++)
        if (reqs[i].status == ZC_INPROGRESS)
            abandon(comm, &reqs[i], status);
    comm->what = NULL;
    return status;
}
