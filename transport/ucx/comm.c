/* A communicator: a worker, the exchange of worker addresses, an endpoint per rank. */
#include "common/log.h"
#include "common/timer.h"
#include "transport/ucx/ucx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ep_error(void *arg, zc_status_t status, const char *reason)
{
    zc_ucx_peer_t *peer = arg;

    /* Runs inside progress: only record it; zc_ucx_progress fails the requests. */
    if (peer->error == ZC_OK) {
        peer->error = status == ZC_OK ? ZC_ERR_PEER : status;
        peer->reason = reason;
    }
    peer->comm->failure_pending = 1;
    peer->comm->saw_failure = 1;
    ZC_DEBUG("ucx: endpoint to peer %d failed: %s", peer->rank, reason);
}

/*
 * The longest worker address a rank may announce. UCX packs one entry per
 * transport resource (device and interface address, a few dozen bytes each):
 * a few hundred bytes with tcp and shared memory, a few KiB with many RDMA
 * devices. 64 KiB is far above any real address and bounds what a rank lets a
 * peer's announced length make it allocate (stride times size).
 */
#define WORKER_ADDRESS_MAX (64u << 10)

/* Allgathers the worker addresses, whose lengths may differ between ranks. */
static zc_status_t exchange_addresses(zc_bootstrap_t *bs, const void *addr, size_t len,
                                      uint8_t **all_p, size_t *stride_p)
{
    uint64_t mine = len, *lens = calloc((size_t)bs->size, sizeof(*lens));
    uint8_t *padded = NULL, *all = NULL;
    zc_status_t status = ZC_ERR_NO_MEMORY;

    if (!lens)
        goto err;
    ZC_CHECK_GOTO(zc_bootstrap_allgather(bs, &mine, sizeof(mine), lens), status, err);
    size_t stride = 0;
    for (int r = 0; r < bs->size; r++) {
        if (lens[r] == 0 || lens[r] > WORKER_ADDRESS_MAX) {
            ZC_ERROR("ucx: rank %d announced a worker address of %llu bytes; UCX worker addresses "
                     "have 1 to %u",
                     r, (unsigned long long)lens[r], WORKER_ADDRESS_MAX);
            status = ZC_ERR_CORRUPT;
            goto err;
        }
        stride = ZC_MAX(stride, (size_t)lens[r]);
    }
    padded = calloc(1, stride);
    all = malloc(stride * (size_t)bs->size);
    if (!padded || !all) {
        status = ZC_ERR_NO_MEMORY;
        goto err;
    }
    memcpy(padded, addr, len);
    ZC_CHECK_GOTO(zc_bootstrap_allgather(bs, padded, stride, all), status, err);
    free(padded);
    free(lens);
    *all_p = all;
    *stride_p = stride;
    return ZC_OK;

err:
    if (status == ZC_ERR_NO_MEMORY)
        ZC_ERROR("ucx: no memory for the addresses of %d ranks", bs->size);
    free(all);
    free(padded);
    free(lens);
    return status;
}

static zc_status_t connect_peers(zc_ucx_comm_t *comm, const uint8_t *all, size_t stride)
{
    for (int r = 0; r < comm->size; r++) {
        zc_ucx_peer_t *peer = &comm->peers[r];
        zc_status_t status = zc_ucx_ep_create(comm->worker, all + (size_t)r * stride, stride,
                                              comm->peer_errors ? ep_error : NULL, peer, &peer->ep);
        if (status != ZC_OK) {
            peer->ep = NULL;
            ZC_ERROR("ucx: rank %d cannot create an endpoint to peer %d: %s", comm->rank, r,
                     zc_status_string(status));
            return status;
        }
    }
    if (ZC_LOG_ENABLED(ZC_LOG_DEBUG) && comm->size > 1) {
        int next = (comm->rank + 1) % comm->size;
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "ucx: rank %d to peer %d", comm->rank, next);
        zc_ucx_ep_log_transports(comm->peers[next].ep, prefix);
    }
    return ZC_OK;
}

zc_status_t zc_ucx_comm_create(const zc_config_t *cfg, zc_bootstrap_t *bs, zc_ucx_comm_t **comm_p)
{
    zc_ucx_comm_t *comm = NULL;
    uint8_t *all = NULL;
    size_t stride = 0;
    zc_status_t status;

    if (!cfg || !bs || !bs->ops || !comm_p || bs->size < 1 || bs->size > ZC_UCX_MAX_RANKS ||
        bs->rank < 0 || bs->rank >= bs->size)
        return ZC_ERR_INVALID_ARG;

    comm = calloc(1, sizeof(*comm));
    if (!comm)
        goto err_nomem;
    comm->rank = bs->rank;
    comm->size = bs->size;
    comm->timeout_s = cfg->timeout_s;
    comm->peer_errors = cfg->ucx_peer_errors != 0;
    comm->peers = calloc((size_t)bs->size, sizeof(*comm->peers));
    if (!comm->peers)
        goto err_nomem;
    for (int r = 0; r < bs->size; r++) {
        comm->peers[r].comm = comm;
        comm->peers[r].rank = r;
    }

    ZC_CHECK_GOTO(zc_ucx_worker_create("zipccl", &comm->worker), status, err_destroy);
    size_t addr_len;
    const void *addr = zc_ucx_worker_address(comm->worker, &addr_len);
    ZC_CHECK_GOTO(exchange_addresses(bs, addr, addr_len, &all, &stride), status, err_destroy);
    ZC_CHECK_GOTO(connect_peers(comm, all, stride), status, err_destroy);
    free(all);
    ZC_DEBUG("ucx: rank %d of %d connected (addresses of %zu bytes)", comm->rank, comm->size,
             stride);
    *comm_p = comm;
    return ZC_OK;

err_nomem:
    ZC_ERROR("ucx: no memory for a communicator of %d ranks", bs->size);
    status = ZC_ERR_NO_MEMORY;
err_destroy:
    free(all);
    zc_ucx_comm_destroy(comm);
    return status;
}

/* Closes every endpoint and progresses until the closes complete or @p deadline_ns passes. */
static void close_endpoints(zc_ucx_comm_t *comm, uint64_t deadline_ns)
{
    zc_ucx_closing_t **closing = calloc((size_t)comm->size, sizeof(*closing));
    int pending = 0;

    for (int r = 0; r < comm->size; r++) {
        zc_ucx_peer_t *peer = &comm->peers[r];
        if (!peer->ep)
            continue;
        /* A failed endpoint cannot be flushed; after any failure, force them all. */
        zc_ucx_closing_t *c = zc_ucx_ep_close(peer->ep, comm->saw_failure || peer->error != ZC_OK);
        peer->ep = NULL;
        if (c && closing)
            closing[pending++] = c;
        else
            zc_ucx_closing_abandon(c);
    }
    while (pending > 0 && zc_time_ns() < deadline_ns) {
        zc_ucx_worker_progress(comm->worker);
        for (int i = 0; i < pending;) {
            if (zc_ucx_closing_done(closing[i]))
                closing[i] = closing[--pending];
            else
                i++;
        }
    }
    if (pending > 0)
        ZC_WARN("ucx: rank %d: %d endpoints still closing after the deadline", comm->rank, pending);
    for (int i = 0; i < pending; i++)
        zc_ucx_closing_abandon(closing[i]);
    free(closing);
}

void zc_ucx_comm_destroy(zc_ucx_comm_t *comm)
{
    if (!comm)
        return;
    if (comm->worker) {
        uint64_t deadline = zc_time_ns() + (uint64_t)comm->timeout_s * 1000000000ull;
        if (zc_ucx_worker_detach_all(comm->worker) > 0)
            comm->saw_failure = 1; /* requests abandoned: close by force */
        if (comm->peers)
            close_endpoints(comm, deadline);
        /* let cancelled receives and force-closed sends hand their requests back */
        while (comm->worker->inflight && zc_time_ns() < deadline)
            zc_ucx_worker_progress(comm->worker);
        zc_ucx_worker_destroy(comm->worker);
    }
    free(comm->peers);
    free(comm);
}

int zc_ucx_comm_rank(const zc_ucx_comm_t *comm)
{
    return comm->rank;
}

int zc_ucx_comm_size(const zc_ucx_comm_t *comm)
{
    return comm->size;
}
