/* Tagged send and receive, progress, completion, deadlines and peer failures. */
#include "common/log.h"
#include "common/timer.h"
#include "transport/ucx/ucx_int.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>

/* Idle progress calls before a waiting rank yields its core to the others on it. */
#define ZC_UCX_IDLE_SPINS 1024

static void inflight_link(zc_ucx_comm_t *comm, zc_ucx_ureq_t *ureq)
{
    ureq->prev = NULL;
    ureq->next = comm->inflight;
    if (comm->inflight)
        comm->inflight->prev = ureq;
    comm->inflight = ureq;
}

static void inflight_unlink(zc_ucx_ureq_t *ureq)
{
    if (ureq->prev)
        ureq->prev->next = ureq->next;
    else
        ureq->comm->inflight = ureq->next;
    if (ureq->next)
        ureq->next->prev = ureq->prev;
    ureq->prev = ureq->next = NULL;
}

/* "recv of 4096 bytes tag 0x5 from peer 3" */
static void describe(const zc_ucx_req_t *req, char *buf, size_t len)
{
    snprintf(buf, len, "%s of %zu bytes tag 0x%" PRIx64 " %s peer %d",
             req->is_recv ? "recv" : "send", req->len, req->tag, req->is_recv ? "from" : "to",
             req->peer);
}

/* Logs why @p req failed, once per dead peer: its other requests fail for the same reason. */
static void log_failure(zc_ucx_comm_t *comm, const zc_ucx_req_t *req, zc_status_t status,
                        ucs_status_t ustatus)
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
                 ucs_status_string(ustatus), req->is_recv ? "recv" : "send", req->len, req->tag, in,
                 what);
        return;
    }
    char op[128];
    describe(req, op, sizeof(op));
    if (status == ZC_ERR_BUFFER_TOO_SMALL)
        ZC_ERROR("ucx: %s failed: the message is longer than the buffer%s%s", op, in, what);
    else
        ZC_ERROR("ucx: %s failed: %s%s%s", op, ucs_status_string(ustatus), in, what);
}

/* Makes @p req final and runs its callback; @p req may be gone when this returns. */
static void complete(zc_ucx_comm_t *comm, zc_ucx_req_t *req, ucs_status_t ustatus, size_t length)
{
    zc_status_t status = zc_ucx_status(ustatus);
    zc_ucx_peer_t *peer = &comm->peers[req->peer];

    /* UCX may report the requests of a failed endpoint as cancelled or reset: it is the peer */
    if (status < 0 && peer->error != UCS_OK) {
        status = ZC_ERR_PEER;
        ustatus = peer->error;
    }
    req->handle = NULL;
    req->length = status == ZC_OK ? length : 0;
    req->status = status;
    comm->completed += status == ZC_OK;
    if (status < 0) {
        comm->saw_failure |= status == ZC_ERR_PEER;
        log_failure(comm, req, status, ustatus);
    }
    if (req->done)
        req->done(req, req->done_arg);
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    zc_ucx_ureq_t *ureq = request;
    zc_ucx_comm_t *comm = ureq->comm;
    zc_ucx_req_t *req = ureq->owner;

    inflight_unlink(ureq);
    ureq->owner = NULL;
    ucp_request_free(request);
    if (req)
        complete(comm, req, status, req->len);
}

static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data)
{
    zc_ucx_comm_t *comm = user_data;
    zc_ucx_ureq_t *ureq = request;
    zc_ucx_req_t *req;

    if (comm->posting) {
        /* completed inside ucp_tag_recv_nbx: not linked yet (post_recv) */
        req = comm->posting;
        comm->posting = NULL;
    } else {
        req = ureq->owner;
        inflight_unlink(ureq);
        ureq->owner = NULL;
    }
    ucp_request_free(request);
    if (req)
        complete(comm, req, status, status == UCS_OK ? info->length : 0);
}

/*
 * Detaches @p req from its UCX request, which completes later without it (a
 * receive is cancelled; a send cannot be), and gives it @p status. No callback.
 */
static void abandon(zc_ucx_comm_t *comm, zc_ucx_req_t *req, zc_status_t status)
{
    zc_ucx_ureq_t *ureq = req->handle;

    req->handle = NULL;
    req->status = status;
    comm->saw_failure = 1;
    if (!ureq)
        return;
    ureq->owner = NULL;
    if (req->is_recv)
        ucp_request_cancel(comm->worker, ureq); /* may call recv_done, which frees ureq */
}

void zc_ucx_abandon(zc_ucx_comm_t *comm, zc_ucx_req_t *req, zc_status_t status)
{
    if (req->status == ZC_INPROGRESS)
        abandon(comm, req, status);
}

void zc_ucx_abandon_all(zc_ucx_comm_t *comm)
{
    zc_ucx_ureq_t *ureq = comm->inflight, *next;

    for (; ureq; ureq = next) {
        next = ureq->next;
        if (!ureq->owner)
            continue;
        /* the caller's storage may be gone: do not write to it */
        ureq->owner = NULL;
        comm->saw_failure = 1;
        if (ureq->is_recv)
            ucp_request_cancel(comm->worker, ureq);
    }
}

/*
 * Fails every request to or from a peer UCX reported dead. Receives are not
 * tied to an endpoint, so UCX itself would leave them waiting forever.
 */
void zc_ucx_fail_peers(zc_ucx_comm_t *comm)
{
    zc_ucx_req_t *failed = NULL;
    zc_ucx_ureq_t *ureq = comm->inflight, *next;

    /* detach first, run callbacks after: a callback may post or progress */
    for (; ureq; ureq = next) {
        next = ureq->next;
        zc_ucx_req_t *req = ureq->owner;
        if (!req || comm->peers[ureq->peer].error == UCS_OK)
            continue;
        ureq->owner = NULL;
        req->handle = failed;
        failed = req;
        if (ureq->is_recv)
            ucp_request_cancel(comm->worker, ureq);
    }
    while (failed) {
        zc_ucx_req_t *req = failed;
        failed = req->handle;
        complete(comm, req, comm->peers[req->peer].error, 0);
    }
}

uint64_t zc_ucx_completed(const zc_ucx_comm_t *comm)
{
    return comm->completed;
}

void zc_ucx_set_quiet(zc_ucx_comm_t *comm)
{
    comm->quiet = 1;
}

int zc_ucx_peer_failed(const zc_ucx_comm_t *comm, int peer)
{
    return peer >= 0 && peer < comm->size && comm->peers[peer].error != UCS_OK;
}

unsigned zc_ucx_progress(zc_ucx_comm_t *comm)
{
    unsigned events = ucp_worker_progress(comm->worker);
    if (ZC_UNLIKELY(comm->failure_pending)) {
        comm->failure_pending = 0;
        zc_ucx_fail_peers(comm);
    }
    return events;
}

/*
 * UCX 1.13 does not fill recv_info when a receive completes at once, so
 * receives deny immediate completion and learn the length in the callback.
 * That callback may then run inside ucp_tag_recv_nbx, before the request is
 * known to us: comm->posting holds the caller's request meanwhile.
 */
static zc_status_t post_recv(zc_ucx_comm_t *comm, const zc_ucx_req_t *r, void *buf,
                             ucp_request_param_t *param, zc_ucx_req_t *req)
{
    *req = *r;
    comm->posting = req;
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param->user_data = comm;
    param->cb.recv = recv_done;
    ucs_status_ptr_t sp =
        ucp_tag_recv_nbx(comm->worker, buf, r->len, zc_ucx_tag(r->peer, r->tag), UINT64_MAX, param);
    if (!comm->posting)
        return ZC_OK; /* completed (and freed) in the call: @p req may be reused by now */
    comm->posting = NULL;
    if (UCS_PTR_IS_PTR(sp)) {
        zc_ucx_ureq_t *ureq = sp;
        ureq->owner = req;
        ureq->comm = comm;
        ureq->peer = r->peer;
        ureq->is_recv = 1;
        inflight_link(comm, ureq);
        req->handle = ureq;
        return ZC_OK;
    }
    ucs_status_t ustatus = UCS_PTR_STATUS(sp);
    zc_status_t status = zc_ucx_status(ustatus);
    req->status = status;
    log_failure(comm, r, status, ustatus);
    return status;
}

static zc_status_t post(zc_ucx_comm_t *comm, int is_recv, int peer, uint64_t tag, void *buf,
                        size_t len, zc_ucx_done_fn done, void *arg, zc_ucx_req_t *req)
{
    ucs_status_ptr_t sp;

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
    if (p->error != UCS_OK) {
        log_failure(comm, &r, ZC_ERR_PEER, p->error);
        return ZC_ERR_PEER;
    }

    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE,
        .datatype = ucp_dt_make_contig(1),
    };
    if (is_recv)
        return post_recv(comm, &r, buf, &param, req);

    param.cb.send = send_done;
    sp = ucp_tag_send_nbx(p->ep, buf, len, zc_ucx_tag(comm->rank, tag), &param);
    if (UCS_PTR_IS_PTR(sp)) {
        /* no callback can run before we return: progress happens only in our calls */
        zc_ucx_ureq_t *ureq = sp;
        ureq->owner = req;
        ureq->comm = comm;
        ureq->peer = peer;
        ureq->is_recv = 0;
        inflight_link(comm, ureq);
        *req = r;
        req->handle = ureq;
        return ZC_OK;
    }
    ucs_status_t ustatus = UCS_PTR_STATUS(sp);
    if (ustatus == UCS_OK) {
        *req = r;
        complete(comm, req, ustatus, len);
        return ZC_OK;
    }
    zc_status_t status = p->error != UCS_OK ? ZC_ERR_PEER : zc_ucx_status(ustatus);
    log_failure(comm, &r, status, p->error != UCS_OK ? p->error : ustatus);
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
    size_t first = 0; /* reqs[0..first) completed successfully */
    unsigned idle = 0;

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
        } else if (now > deadline) {
            log_timeout(comm, &reqs[oldest], incomplete, n, what);
            status = ZC_ERR_TIMEOUT;
            goto out_abandon;
        }
        if (zc_ucx_progress(comm) > 0) {
            idle = 0;
        } else if (++idle == ZC_UCX_IDLE_SPINS) {
            idle = 0;
            sched_yield();
        }
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
