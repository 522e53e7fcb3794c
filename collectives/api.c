/*
 * The public all-reduce entry points (include/zipccl/zipccl.h): argument
 * checks, then an op through the driver.
 */
#include "collectives/op.h"

#include "collectives/hier.h"

#include "common/compiler.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

ZC_EXPORT int zc_comm_rank(const zc_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

ZC_EXPORT int zc_comm_size(const zc_comm_t *comm)
{
    return comm ? comm->size : -1;
}

ZC_EXPORT zc_status_t zc_comm_stats(const zc_comm_t *comm, zc_stats_t *stats)
{
    if (!comm || !stats)
        return ZC_ERR_INVALID_ARG;
    zc_stats_totals(&comm->stats, zc_comm_residual_norm(comm), stats);
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_comm_set_stats_file(zc_comm_t *comm, const char *path)
{
    if (!comm || !path)
        return ZC_ERR_INVALID_ARG;
    char *copy = strdup(path);
    if (!copy)
        return ZC_ERR_NO_MEMORY;
    free(comm->stats_file);
    comm->stats_file = copy;
    comm->cfg.stats_file = copy; /* zc_comm_destroy writes where this says */
    return ZC_OK;
}

static zc_status_t check_call(const zc_comm_t *comm, const void *sendbuf, const void *recvbuf,
                              size_t count, zc_dtype_t dtype, zc_redop_t op)
{
    const char *why = NULL;
    size_t bytes = zc_dtype_bytes(dtype);

    if (!comm)
        why = "NULL communicator";
    else if (bytes == 0)
        why = "unknown datatype";
    else if ((unsigned)op >= ZC_OP_COUNT)
        why = "unknown reduction operation";
    else if (count > SIZE_MAX / bytes)
        why = "count too large";
    else if (count > 0 && (!sendbuf || !recvbuf))
        why = "NULL buffer";
    else if (count > 0 && sendbuf != recvbuf) {
        const char *s = sendbuf, *r = recvbuf;
        if (s < r + count * bytes && r < s + count * bytes)
            why = "send and receive buffers overlap without being the same";
    }
    if (why) {
        ZC_ERROR("zc_allreduce: %s (count %zu, dtype %d, op %d)", why, count, (int)dtype, (int)op);
        return ZC_ERR_INVALID_ARG;
    }
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_iallreduce(zc_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, zc_dtype_t dtype, zc_redop_t op, uint64_t key,
                                    zc_request_t **req_p)
{
    zc_coll_op_t *o;

    if (!req_p) {
        ZC_ERROR("zc_iallreduce: NULL request pointer");
        return ZC_ERR_INVALID_ARG;
    }
    ZC_CHECK(check_call(comm, sendbuf, recvbuf, count, dtype, op));
    ZC_CHECK(zc_op_create(comm, sendbuf, recvbuf, count, dtype, op, key, &o));
    zc_op_enqueue(comm, o);
    if (!comm->thread_on)
        zc_comm_progress(comm); /* post the header, maybe more */
    *req_p = o;
    return ZC_OK;
}

static zc_status_t release(zc_request_t **req_p)
{
    zc_coll_op_t *op = *req_p;
    zc_status_t status = op->status;
    zc_op_free(op);
    *req_p = NULL;
    return status;
}

ZC_EXPORT zc_status_t zc_test(zc_request_t **req_p)
{
    if (!req_p || !*req_p)
        return ZC_ERR_INVALID_ARG;
    zc_coll_op_t *op = *req_p;
    if (!op->comm->thread_on)
        zc_comm_progress(op->comm);
    return zc_op_done(op) ? release(req_p) : ZC_INPROGRESS;
}

ZC_EXPORT zc_status_t zc_wait(zc_request_t **req_p)
{
    if (!req_p || !*req_p)
        return ZC_ERR_INVALID_ARG;
    zc_coll_op_t *op = *req_p;
    zc_comm_t *comm = op->comm;
    if (comm->thread_on) {
        pthread_mutex_lock(&comm->lock);
        while (!op->done)
            pthread_cond_wait(&comm->cond, &comm->lock);
        pthread_mutex_unlock(&comm->lock);
    } else {
        /* every op ends: by completing, by a peer failure, or by the deadline */
        uint64_t busy_ns = zc_time_ns();
        while (!op->done)
            zc_comm_wait_round(comm, &busy_ns);
    }
    return release(req_p);
}

ZC_EXPORT zc_status_t zc_allreduce_key(zc_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, zc_dtype_t dtype, zc_redop_t op, uint64_t key)
{
    zc_request_t *req;
    ZC_CHECK(zc_iallreduce(comm, sendbuf, recvbuf, count, dtype, op, key, &req));
    return zc_wait(&req);
}

ZC_EXPORT zc_status_t zc_comm_agree_max(zc_comm_t *comm, int32_t value, int32_t *max_p)
{
    zc_coll_op_t *o;
    int32_t in = value, out = 0;

    if (!max_p)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(check_call(comm, &in, &out, 1, ZC_DTYPE_I32, ZC_OP_MAX));
    ZC_CHECK(zc_op_create(comm, &in, &out, 1, ZC_DTYPE_I32, ZC_OP_MAX, 0, &o));
    o->control = 1;
    zc_op_enqueue(comm, o);
    zc_request_t *req = o;
    zc_status_t status = zc_wait(&req);
    if (status == ZC_OK)
        *max_p = out;
    return status;
}

ZC_EXPORT zc_status_t zc_allreduce(zc_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, zc_dtype_t dtype, zc_redop_t op)
{
    return zc_allreduce_key(comm, sendbuf, recvbuf, count, dtype, op, 0);
}
