/*
 * ncclNet v11 data path: memory registration, isend, irecv, iflush, test,
 * closing a send or receive comm, and the request slots (net.c's top comment
 * is the design).
 */
#include "plugin/nccl/net_int.h"

#include "common/log.h"
#include "common/timer.h"

#include <limits.h>
#include <stdlib.h>

typedef struct net_mr {
    uint64_t magic;
    void *data;
    size_t size;
} net_mr_t;

static uint64_t data_tag(uint32_t conn_id, int tag)
{
    return ((uint64_t)conn_id << 32) | (uint32_t)tag;
}

int zc_net_comm_busy(const net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        if (comm->reqs[i].op.status == ZC_INPROGRESS)
            return 1;
    return 0;
}

void zc_net_cancel_recvs(net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        if (comm->reqs[i].op.status == ZC_INPROGRESS && comm->reqs[i].is_recv)
            zc_ucx_op_cancel(&comm->reqs[i].op);
}

void zc_net_detach_reqs(net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
        net_req_t *req = &comm->reqs[i];
        if (req->op.status != ZC_INPROGRESS)
            continue;
        zc_ucx_op_detach(&req->op);
        req->op.status = ZC_ERR_PEER;
    }
}

/* ---- memory registration ---- */

ncclResult_t zc_net_reg_mr(void *comm_arg, void *data, size_t size, int type, void **mhandle)
{
    net_comm_t *comm = zc_net_comm_of(comm_arg, 0);

    if (!comm || comm->kind == NET_LISTEN || !mhandle || (!data && size > 0))
        return ncclInternalError;
    if (type != NCCL_PTR_HOST) {
        ZC_ERROR("net: registration of memory of type %d refused: the plugin offers host memory "
                 "only (NCCL_PTR_HOST)",
                 type);
        return ncclInternalError;
    }
    net_mr_t *mr = malloc(sizeof(*mr));
    if (!mr) {
        ZC_ERROR("net: no memory for a memory registration");
        return ncclSystemError;
    }
    *mr = (net_mr_t){.magic = NET_MAGIC_MR, .data = data, .size = size};
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t zc_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                  int fd, void **mhandle)
{
    /* host memory needs no dma-buf: the address is enough */
    return zc_net_reg_mr(comm, data, size, type, mhandle);
}

ncclResult_t zc_net_dereg_mr(void *comm_arg, void *mhandle)
{
    net_comm_t *comm = zc_net_comm_of(comm_arg, 0);
    net_mr_t *mr = mhandle;

    if (!comm || comm->kind == NET_LISTEN || !mr || mr->magic != NET_MAGIC_MR)
        return ncclInternalError;
    mr->magic = NET_MAGIC_DEAD;
    free(mr);
    return ncclSuccess;
}

static int mr_ok(const void *mhandle)
{
    const net_mr_t *mr = mhandle;
    return !mr || mr->magic == NET_MAGIC_MR;
}

/* ---- data ---- */

static net_req_t *req_get(net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        if (!comm->reqs[i].used && comm->reqs[i].op.status != ZC_INPROGRESS)
            return &comm->reqs[i];
    return NULL;
}

static void req_start(net_req_t *req, net_comm_t *comm, int is_recv, int tag, size_t size)
{
    req->comm = comm;
    req->used = 1;
    req->done = 0;
    req->is_recv = is_recv;
    req->tag = tag;
    req->status = ZC_INPROGRESS;
    req->reason = NULL;
    req->size = size;
    req->start_ns = zc_time_ns();
}

/* zc_ucx_op_fn of a request: may run inside zc_ucx_op_send/recv, or in progress. */
static void req_done(zc_ucx_op_t *op, void *arg)
{
    net_req_t *req = arg;

    req->status = op->status;
    req->reason = op->reason;
    if (op->status == ZC_OK && req->is_recv)
        req->size = op->length;
    req->done = 1;
}

ncclResult_t zc_net_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request)
{
    net_comm_t *comm = zc_net_comm_of(sendComm, NET_SEND);

    if (!comm || !request || (!data && size > 0) || !mr_ok(mhandle))
        return ncclInternalError;
    net_ctx_t *ctx = comm->ctx;
    zc_net_lock(ctx);
    if (comm->ep_status != ZC_OK) {
        int first = !comm->reported;
        comm->reported = 1;
        zc_net_unlock(ctx);
        if (first)
            ZC_ERROR("net: peer %s lost (%s) before a send of %zu bytes tag %d", comm->peer,
                     comm->ep_reason, size, tag);
        return ncclRemoteError;
    }
    net_req_t *req = req_get(comm);
    if (!req) {
        zc_net_unlock(ctx);
        *request = NULL; /* NCCL tries again */
        return ncclSuccess;
    }
    req_start(req, comm, 0, tag, size);
    zc_status_t status =
        zc_ucx_op_send(comm->ep, data_tag(comm->conn_id, tag), data, size, req_done, req, &req->op);
    if (status != ZC_OK) {
        const char *reason = req->op.reason;
        req->used = 0;
        zc_net_unlock(ctx);
        ZC_ERROR("net: send of %zu bytes tag %d to %s failed: %s", size, tag, comm->peer,
                 reason ? reason : zc_status_string(status));
        return zc_nccl_result(status);
    }
    zc_net_unlock(ctx);
    *request = req;
    return ncclSuccess;
}

/* Why a request failed, logged once per comm for a lost peer; the caller holds the lock. */
static ncclResult_t req_failed(net_comm_t *comm, net_req_t *req, zc_status_t status,
                               const char *reason)
{
    const char *op = req->is_recv ? "receive" : "send";

    if (!reason)
        reason = zc_status_string(status);
    if (status == ZC_ERR_BUFFER_TOO_SMALL) {
        ZC_ERROR("net: a message from %s with tag %d is larger than the %zu-byte receive "
                 "posted for it",
                 comm->peer, req->tag, req->size);
        return ncclInternalError;
    }
    if (status == ZC_ERR_TIMEOUT) {
        ZC_ERROR("net: %s of %zu bytes tag %d with %s timed out after %lld s", op, req->size,
                 req->tag, comm->peer, (long long)comm->ctx->cfg.timeout_s);
        return ncclRemoteError;
    }
    /*
     * Only a lost peer cancels a receive (ZC_ERR_PEER): test does when the
     * endpoint failed, and UCX does when the sender of a rendezvous it matched
     * is gone, which it may find before the endpoint's error callback has run.
     */
    if (comm->ep_status != ZC_OK || (req->is_recv && status == ZC_ERR_PEER)) {
        if (!comm->reported)
            ZC_ERROR("net: peer %s lost (%s) during a %s of %zu bytes tag %d", comm->peer,
                     comm->ep_status != ZC_OK ? comm->ep_reason : reason, op, req->size, req->tag);
        comm->reported = 1;
        return ncclRemoteError;
    }
    ZC_ERROR("net: %s of %zu bytes tag %d with %s failed: %s", op, req->size, req->tag, comm->peer,
             reason);
    return zc_nccl_result(status);
}

ncclResult_t zc_net_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request)
{
    net_comm_t *comm = zc_net_comm_of(recvComm, NET_RECV);

    if (!comm || !request || !data || !sizes || !tags)
        return ncclInternalError;
    if (n != 1) {
        ZC_ERROR("net: irecv of %d buffers; the plugin announced maxRecvs 1", n);
        return ncclInternalError;
    }
    if ((!data[0] && sizes[0] > 0) || (mhandles && !mr_ok(mhandles[0])))
        return ncclInternalError;

    net_ctx_t *ctx = comm->ctx;
    zc_net_lock(ctx);
    net_req_t *req = req_get(comm);
    if (!req) {
        zc_net_unlock(ctx);
        *request = NULL;
        return ncclSuccess;
    }
    /* posted even when the peer is gone: what it sent before may be waiting in UCX */
    req_start(req, comm, 1, tags[0], sizes[0]);
    zc_status_t status = zc_ucx_op_recv(ctx->worker, data_tag(comm->conn_id, tags[0]), data[0],
                                        sizes[0], req_done, req, &req->op);
    if (status != ZC_OK) {
        ncclResult_t result = req_failed(comm, req, status, req->op.reason);
        req->used = 0;
        zc_net_unlock(ctx);
        return result;
    }
    zc_net_unlock(ctx);
    *request = req;
    return ncclSuccess;
}

ncclResult_t zc_net_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request)
{
    if (!zc_net_comm_of(recvComm, NET_RECV) || !request)
        return ncclInternalError;
    *request = NULL; /* host memory: nothing to flush */
    return ncclSuccess;
}

/*
 * A request still in flight whose peer is lost (the endpoint failed) or, with
 * no peer error handling, silent past the deadline: a receive is cancelled
 * after the worker was drained (data the peer sent before it went away
 * arrives first), a send UCX still holds is detached. The caller holds the lock.
 */
static void req_give_up(net_ctx_t *ctx, net_comm_t *comm, net_req_t *req)
{
    zc_status_t why = ZC_OK;
    if (comm->ep_status != ZC_OK)
        why = comm->ep_status; /* the caller's progress drained what the peer sent */
    else if (!ctx->cfg.ucx_peer_errors &&
             zc_time_ns() - req->start_ns > (uint64_t)ctx->cfg.timeout_s * 1000000000ull)
        why = ZC_ERR_TIMEOUT;
    if (why == ZC_OK)
        return;
    if (why == ZC_ERR_TIMEOUT && comm->ep_status == ZC_OK) {
        /* the peer is taken for dead: no more sends, forced close */
        comm->ep_status = why;
        comm->ep_reason = zc_status_string(why);
    }
    if (req->is_recv) {
        zc_ucx_op_cancel(&req->op);
        zc_net_progress(ctx);
    }
    if (!req->done) {
        zc_ucx_op_detach(&req->op);
        req->op.status = why;
        req->done = 1;
        req->status = why;
    } else if (why == ZC_ERR_TIMEOUT && req->status != ZC_OK) {
        req->status = why;
    }
}

ncclResult_t zc_net_test(void *request, int *done, int *sizes)
{
    net_req_t *req = request;

    if (!req || !done || !zc_net_comm_of(req->comm, 0) || !req->used)
        return ncclInternalError;
    net_comm_t *comm = req->comm;
    net_ctx_t *ctx = comm->ctx;
    zc_net_lock(ctx);
    if (!req->done)
        zc_net_progress(ctx);
    if (!req->done && req->op.status == ZC_INPROGRESS)
        req_give_up(ctx, comm, req);
    if (!req->done) {
        zc_net_unlock(ctx);
        *done = 0;
        return ncclSuccess;
    }
    zc_status_t status = req->status;
    size_t size = req->size;
    req->used = 0;
    if (status != ZC_OK) {
        ncclResult_t result = req_failed(comm, req, status, req->reason);
        zc_net_unlock(ctx);
        *done = 0;
        return result;
    }
    zc_net_unlock(ctx);
    *done = 1;
    if (sizes)
        sizes[0] = size > INT_MAX ? INT_MAX : (int)size;
    return ncclSuccess;
}

static ncclResult_t close_comm(void *comm_arg, net_kind_t kind)
{
    net_comm_t *comm = zc_net_comm_of(comm_arg, kind);

    if (!comm)
        return ncclInternalError;
    zc_net_lock(comm->ctx);
    zc_net_comm_close_unlock(comm);
    return ncclSuccess;
}

ncclResult_t zc_net_close_send(void *sendComm)
{
    return close_comm(sendComm, NET_SEND);
}

ncclResult_t zc_net_close_recv(void *recvComm)
{
    return close_comm(recvComm, NET_RECV);
}
