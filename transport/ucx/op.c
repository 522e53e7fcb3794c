/* Tagged sends and receives on a worker: posting, completion, cancel, detach. */
#include "transport/ucx/ucx_int.h"

static void inflight_link(zc_ucx_worker_t *w, zc_ucx_ureq_t *ureq)
{
    ureq->worker = w;
    ureq->prev = NULL;
    ureq->next = w->inflight;
    if (w->inflight)
        w->inflight->prev = ureq;
    w->inflight = ureq;
}

static void inflight_unlink(zc_ucx_ureq_t *ureq)
{
    if (ureq->prev)
        ureq->prev->next = ureq->next;
    else
        ureq->worker->inflight = ureq->next;
    if (ureq->next)
        ureq->next->prev = ureq->prev;
    ureq->prev = ureq->next = NULL;
}

/* Makes @p op final and runs its callback; @p op may be gone when this returns. */
static void complete(zc_ucx_op_t *op, zc_status_t status, const char *reason, size_t length)
{
    op->handle = NULL;
    op->length = status == ZC_OK ? length : 0;
    op->reason = status == ZC_OK ? NULL : reason;
    op->status = status;
    if (op->done)
        op->done(op, op->done_arg);
}

static void send_done(void *request, ucs_status_t ustatus, void *user_data)
{
    zc_ucx_ureq_t *ureq = request;
    zc_ucx_op_t *op = ureq->owner;

    inflight_unlink(ureq);
    ureq->owner = NULL;
    ucp_request_free(request);
    if (op)
        complete(op, zc_ucx_status(ustatus), ucs_status_string(ustatus), (size_t)user_data);
}

/* A receive UCX cancelled: we asked (zc_ucx_op_cancel), or its sender is gone. */
static zc_status_t recv_status(ucs_status_t ustatus)
{
    return ustatus == UCS_ERR_CANCELED ? ZC_ERR_PEER : zc_ucx_status(ustatus);
}

static void recv_done(void *request, ucs_status_t ustatus, const ucp_tag_recv_info_t *info,
                      void *user_data)
{
    zc_ucx_worker_t *w = user_data;
    zc_ucx_ureq_t *ureq = request;
    zc_ucx_op_t *op;

    if (w->posting) {
        /* completed inside ucp_tag_recv_nbx: not linked yet (zc_ucx_op_recv) */
        op = w->posting;
        w->posting = NULL;
    } else {
        op = ureq->owner;
        inflight_unlink(ureq);
        ureq->owner = NULL;
    }
    ucp_request_free(request);
    if (op)
        complete(op, recv_status(ustatus), ucs_status_string(ustatus),
                 ustatus == UCS_OK ? info->length : 0);
}

static void op_start(zc_ucx_op_t *op, zc_ucx_worker_t *w, zc_ucx_op_fn done, void *arg)
{
    *op = (zc_ucx_op_t){.status = ZC_INPROGRESS, .worker = w, .done = done, .done_arg = arg};
}

static void op_inflight(zc_ucx_op_t *op, void *request, int is_recv)
{
    zc_ucx_ureq_t *ureq = request;

    ureq->owner = op;
    ureq->is_recv = is_recv;
    inflight_link(op->worker, ureq);
    op->handle = ureq;
}

static zc_status_t op_failed(zc_ucx_op_t *op, ucs_status_t ustatus, zc_status_t status)
{
    op->status = status;
    op->reason = ucs_status_string(ustatus);
    return status;
}

zc_status_t zc_ucx_op_send(zc_ucx_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                           zc_ucx_op_fn done, void *arg, zc_ucx_op_t *op)
{
    if (!ep || !op || (!buf && len > 0))
        return ZC_ERR_INVALID_ARG;
    op_start(op, ep->worker, done, arg);
    ucp_request_param_t param = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = send_done,
        .datatype = ucp_dt_make_contig(1),
        .user_data = (void *)len,
    };
    /* UCX takes a non-const buffer for sends too; it does not write to it */
    ucs_status_ptr_t sp = ucp_tag_send_nbx(ep->ep, (void *)buf, len, tag, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        /* no callback can run before we return: progress happens only in the caller's calls */
        op_inflight(op, sp, 0);
        return ZC_OK;
    }
    ucs_status_t ustatus = UCS_PTR_STATUS(sp);
    if (ustatus != UCS_OK)
        return op_failed(op, ustatus, zc_ucx_status(ustatus));
    complete(op, ZC_OK, NULL, len);
    return ZC_OK;
}

/*
 * UCX 1.13 does not fill recv_info when a receive completes at once, so
 * receives deny immediate completion and learn the length in the callback.
 * That callback may then run inside ucp_tag_recv_nbx, before the request is
 * linked: worker->posting holds the operation meanwhile.
 */
zc_status_t zc_ucx_op_recv(zc_ucx_worker_t *w, uint64_t tag, void *buf, size_t len,
                           zc_ucx_op_fn done, void *arg, zc_ucx_op_t *op)
{
    if (!w || !op || (!buf && len > 0))
        return ZC_ERR_INVALID_ARG;
    op_start(op, w, done, arg);
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE |
                        UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv = recv_done,
        .datatype = ucp_dt_make_contig(1),
        .user_data = w,
    };
    w->posting = op;
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(w->worker, buf, len, tag, UINT64_MAX, &param);
    if (!w->posting)
        return ZC_OK; /* completed (and freed) in the call: @p op may be reused by now */
    w->posting = NULL;
    if (UCS_PTR_IS_PTR(sp)) {
        op_inflight(op, sp, 1);
        return ZC_OK;
    }
    ucs_status_t ustatus = UCS_PTR_STATUS(sp);
    return op_failed(op, ustatus, zc_ucx_status(ustatus));
}

void zc_ucx_op_cancel(zc_ucx_op_t *op)
{
    zc_ucx_ureq_t *ureq = op->handle;

    if (ureq && ureq->is_recv)
        ucp_request_cancel(op->worker->worker, ureq); /* may complete @p op at once */
}

/* Detaches @p ureq from its owner; cancels a receive, which may free @p ureq. */
static void ureq_detach(zc_ucx_worker_t *w, zc_ucx_ureq_t *ureq)
{
    ureq->owner->handle = NULL;
    ureq->owner = NULL;
    if (ureq->is_recv)
        ucp_request_cancel(w->worker, ureq);
}

size_t zc_ucx_worker_detach_all(zc_ucx_worker_t *w)
{
    size_t count = 0;

    for (zc_ucx_ureq_t *ureq = w->inflight, *next; ureq; ureq = next) {
        next = ureq->next;
        if (!ureq->owner)
            continue;
        /* the callers' storage may be gone: do not write to it */
        ureq->owner = NULL;
        count++;
        if (ureq->is_recv)
            ucp_request_cancel(w->worker, ureq); /* may free ureq */
    }
    return count;
}

void zc_ucx_op_detach(zc_ucx_op_t *op)
{
    if (op->handle)
        ureq_detach(op->worker, op->handle);
}

size_t zc_ucx_worker_fail_ops(zc_ucx_worker_t *w, int (*match)(zc_ucx_op_t *op, void *arg),
                              void *arg, zc_status_t status, const char *reason)
{
    zc_ucx_op_t *failed = NULL;
    size_t count = 0;

    /* detach first, run callbacks after: a callback may post or progress */
    for (zc_ucx_ureq_t *ureq = w->inflight, *next; ureq; ureq = next) {
        next = ureq->next;
        zc_ucx_op_t *op = ureq->owner;
        if (!op || !match(op, arg))
            continue;
        ureq_detach(w, ureq);
        op->handle = failed; /* the list of failed operations, through their handles */
        failed = op;
        count++;
    }
    while (failed) {
        zc_ucx_op_t *op = failed;
        failed = op->handle;
        complete(op, status, reason, 0);
    }
    return count;
}
