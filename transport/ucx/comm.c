/* A communicator: a worker, the exchange of worker addresses, an endpoint per rank. */
#include "common/log.h"
#include "common/timer.h"
#include "transport/ucx/ucx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    zc_ucx_peer_t *peer = arg;

    /* Runs inside ucp_worker_progress: only record it; zc_ucx_progress fails the requests. */
    if (peer->error == UCS_OK)
        peer->error = status;
    peer->comm->failure_pending = 1;
    peer->comm->saw_failure = 1;
    ZC_DEBUG("ucx: endpoint to peer %d failed: %s", peer->rank, ucs_status_string(status));
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

/* Which transports UCX chose for an endpoint: UCX's own description, line by line. */
static void log_transports(zc_ucx_comm_t *comm, zc_ucx_peer_t *peer)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    ucp_ep_print_info(peer->ep, f);
    fclose(f);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        ZC_DEBUG("ucx: rank %d to peer %d: %s", comm->rank, peer->rank, line);
    free(text);
}

static zc_status_t connect_peers(zc_ucx_comm_t *comm, const uint8_t *all, size_t stride)
{
    for (int r = 0; r < comm->size; r++) {
        zc_ucx_peer_t *peer = &comm->peers[r];
        ucp_ep_params_t params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            .address = (const ucp_address_t *)(all + (size_t)r * stride),
            .err_mode = UCP_ERR_HANDLING_MODE_NONE,
        };
        if (comm->peer_errors) {
            params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
            params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
            params.err_handler.cb = ep_error;
            params.err_handler.arg = peer;
        }
        ucs_status_t status = ucp_ep_create(comm->worker, &params, &peer->ep);
        if (status != UCS_OK) {
            peer->ep = NULL;
            ZC_ERROR("ucx: rank %d cannot create an endpoint to peer %d: %s", comm->rank, r,
                     ucs_status_string(status));
            return zc_ucx_status(status);
        }
    }
    if (ZC_LOG_ENABLED(ZC_LOG_DEBUG) && comm->size > 1)
        log_transports(comm, &comm->peers[(comm->rank + 1) % comm->size]);
    return ZC_OK;
}

zc_status_t zc_ucx_comm_create(const zc_config_t *cfg, zc_bootstrap_t *bs, zc_ucx_comm_t **comm_p)
{
    zc_ucx_comm_t *comm = NULL;
    ucp_worker_attr_t attr = {.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS};
    uint8_t *all = NULL;
    size_t stride = 0;
    zc_status_t status;
    ucs_status_t ustatus;

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

    ZC_CHECK_GOTO(zc_ucx_context_get(&comm->context), status, err_destroy);

    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        /* one thread at a time, not always the same one */
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
    };
    ustatus = ucp_worker_create(comm->context, &wparams, &comm->worker);
    if (ustatus != UCS_OK) {
        comm->worker = NULL;
        ZC_ERROR("ucx: rank %d cannot create a worker: %s", comm->rank, ucs_status_string(ustatus));
        status = zc_ucx_status(ustatus);
        goto err_destroy;
    }
    ustatus = ucp_worker_query(comm->worker, &attr);
    if (ustatus != UCS_OK) {
        ZC_ERROR("ucx: rank %d cannot read its worker address: %s", comm->rank,
                 ucs_status_string(ustatus));
        status = zc_ucx_status(ustatus);
        goto err_destroy;
    }
    status = exchange_addresses(bs, attr.address, attr.address_length, &all, &stride);
    ucp_worker_release_address(comm->worker, attr.address);
    if (status != ZC_OK)
        goto err_destroy;
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
    void **closing = calloc((size_t)comm->size, sizeof(*closing));
    int pending = 0;

    for (int r = 0; r < comm->size; r++) {
        zc_ucx_peer_t *peer = &comm->peers[r];
        if (!peer->ep)
            continue;
        /* A failed endpoint cannot be flushed; after any failure, force them all. */
        ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
            .flags = comm->saw_failure || peer->error != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0,
        };
        void *req = ucp_ep_close_nbx(peer->ep, &param);
        peer->ep = NULL;
        if (UCS_PTR_IS_PTR(req)) {
            if (closing)
                closing[pending++] = req;
            else
                ucp_request_free(req);
        }
    }
    while (pending > 0 && zc_time_ns() < deadline_ns) {
        ucp_worker_progress(comm->worker);
        for (int i = 0; i < pending;) {
            if (ucp_request_check_status(closing[i]) != UCS_INPROGRESS) {
                ucp_request_free(closing[i]);
                closing[i] = closing[--pending];
            } else {
                i++;
            }
        }
    }
    if (pending > 0)
        ZC_WARN("ucx: rank %d: %d endpoints still closing after the deadline", comm->rank, pending);
    for (int i = 0; i < pending; i++)
        ucp_request_free(closing[i]);
    free(closing);
}

void zc_ucx_comm_destroy(zc_ucx_comm_t *comm)
{
    if (!comm)
        return;
    if (comm->worker) {
        uint64_t deadline = zc_time_ns() + (uint64_t)comm->timeout_s * 1000000000ull;
        zc_ucx_abandon_all(comm);
        if (comm->peers)
            close_endpoints(comm, deadline);
        /* let cancelled receives and force-closed sends hand their requests back */
        while (comm->inflight && zc_time_ns() < deadline)
            ucp_worker_progress(comm->worker);
        ucp_worker_destroy(comm->worker);
    }
    if (comm->context)
        zc_ucx_context_put();
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
