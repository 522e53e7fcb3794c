/*
 * ncclNet v12 over UCX: NCCL's point-to-point traffic between nodes.
 *
 * Files. net.c: the plugin context and connections' lifetime (this comment
 * is the design); net_shake.c: listen, connect, accept (the handshake);
 * net_data.c: memory registration and the data path; net_int.h what they
 * share. UCX only through transport/ucx's workers, endpoints and operations
 * (transport/ucx/ucx.h), sockets through transport/bootstrap/sock.h.
 *
 * Objects. A plugin context (init) holds one UCX worker (zc_ucx_worker_t) on
 * the process's shared UCP context (transport/ucx, refcounted). Its comms and
 * their requests all progress that worker. NCCL calls
 * listen/connect/accept/regMr/close* from its service thread and
 * isend/irecv/test from its progress thread, so the worker is serialized and
 * every entry point takes the worker's mutex (zc_ucx_worker_lock): UCX
 * callbacks (completions, endpoint errors) run inside progress, with the mutex
 * held.
 *
 * Connections. A TCP handshake exchanges UCX worker addresses, as NCCL's own
 * transports and zipccl's bootstrap do. listen opens a nonblocking listening
 * socket on the device's address, port 0, and writes into NCCL's 128-byte
 * handle a compact address (family, port, 16 address bytes), a magic and a
 * 32-bit connection id unique within the listening worker. connect (on the
 * peer) connects to it and sends a hello (magic, id, its worker address);
 * accept takes the socket, checks the hello, answers with its own worker
 * address and closes the socket (it runs up to NET_MAX_PENDING handshakes at
 * once and drops those that fail, so a stranger holds up nobody). Both are
 * resumable, return NULL until done, and give up after ZIPCCL_TIMEOUT_S;
 * connect keeps the sendComm being built in the handle bytes (NCCL calls
 * again with the same buffer). Each side then holds a UCP endpoint to the
 * other's worker with peer error handling: the sender's carries the data, the
 * receiver's only learns when the sender dies. Why not UCX's client/server
 * endpoints (ucp_listener), which a first version used: UCX 1.13 gives them
 * tcp "rma" lanes on every interface and rendezvous over those from 8 KiB (4x
 * slower than worker-address endpoints at 64 KiB on loopback in
 * bench/nccl_net_bench.c), and closing some while others between the same two
 * processes were being set up failed the new ones ("Connection reset by
 * remote peer") in a few percent of runs of tests/plugin/net's threads case.
 * Worker-address endpoints are what zipccl's transport uses.
 *
 * Data. Tagged operations (zc_ucx_op_send/recv) with the 64-bit tag
 * (id << 32 | NCCL tag) so that
 * messages of different connections never match. UCX keeps the order of one
 * endpoint's messages with one tag, which is NCCL's order. maxRecvs is 1:
 * irecv with n != 1 fails. Each comm has NCCL_NET_MAX_REQUESTS request
 * slots; with all in flight isend and irecv answer *request = NULL (try
 * again). test reports the received size. Memory registration is only a
 * cookie (host memory: UCX registers what its transports need and caches it);
 * NCCL_PTR_CUDA fails, as ptrSupport is HOST. iflush has nothing to flush.
 *
 * Lifecycle. Since v11 NCCL calls init once per communicator (communicators
 * that share resources share one context) and finalize once per context, under
 * a process-wide mutex of its own, while other communicators' proxy threads
 * keep calling the data path. Each context is independent (its own worker); the
 * process-wide state (configuration, devices: setup.c; the UCP context:
 * transport/ucx) is reference counted by the live contexts and freed with the
 * last, because NCCL then dlcloses the library (NCCL_NET_PLUGIN_REF_COUNT=0)
 * and opens it again for the next communicator. A context lives on after
 * finalize until its last comm is closed (NCCL closes them all first).
 * setNetAttr's hints (peers, flows, collective and algorithm of the coming
 * transfers) are accepted and kept per context; UCX has no per-worker setting
 * they would map to, so they change nothing yet (logged at debug level).
 *
 * Failures. A peer that dies or closes fails the endpoint (UCX peer error
 * handling, unless ZIPCCL_UCX_PEER_ERRORS=0). Its sends fail in UCX; its
 * receives cannot (a tag receive has no source), so test cancels a receive
 * still pending once the endpoint failed, after draining the worker: data the
 * peer sent before it went away arrives before its disconnection. test then
 * returns ncclRemoteError and logs the peer's address once per comm. With
 * ZIPCCL_UCX_PEER_ERRORS=0 nothing reports a dead peer, so a request then
 * fails after ZIPCCL_TIMEOUT_S instead; with peer errors on, a transfer waits
 * as long as NCCL does (ranks may reach a collective minutes apart). Closing
 * a comm flushes its endpoint (forcing it when the peer failed) within
 * ZIPCCL_TIMEOUT_S, then leaves it to UCX (its requests still in flight are
 * detached: UCX finishes them without the comm); without peer error handling
 * it does not wait for a failed peer's transfers, which would never complete.
 */
#include "plugin/nccl/net_int.h"

#include "common/log.h"
#include "common/timer.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

net_ctx_t *zc_net_ctx_of(void *ctx)
{
    net_ctx_t *c = ctx;
    return c && c->magic == NET_MAGIC_CTX ? c : NULL;
}

net_comm_t *zc_net_comm_of(void *comm, net_kind_t kind)
{
    net_comm_t *c = comm;
    return c && c->magic == NET_MAGIC_COMM && (kind == 0 || c->kind == kind) ? c : NULL;
}

void zc_net_lock(net_ctx_t *ctx)
{
    zc_ucx_worker_lock(ctx->worker);
}

void zc_net_unlock(net_ctx_t *ctx)
{
    zc_ucx_worker_unlock(ctx->worker);
}

static void ctx_destroy(net_ctx_t *ctx)
{
    zc_ucx_worker_destroy(ctx->worker);
    ctx->magic = NET_MAGIC_DEAD;
    free(ctx);
    zc_nccl_release(); /* the context's reference on the process-wide state */
}

void zc_net_ctx_unref_unlock(net_ctx_t *ctx)
{
    int last = --ctx->refs == 0;
    zc_net_unlock(ctx);
    if (last)
        ctx_destroy(ctx);
}

void zc_net_progress(net_ctx_t *ctx)
{
    for (int i = 0; i < 64 && zc_ucx_worker_progress(ctx->worker) != 0; i++)
        ;
}

void zc_net_ep_failed(void *arg, zc_status_t status, const char *reason)
{
    net_comm_t *comm = arg;

    /* Inside progress: record only. The peer may simply have closed its side. */
    if (comm->ep_status == ZC_OK) {
        comm->ep_status = status < 0 ? status : ZC_ERR_PEER;
        comm->ep_reason = reason;
    }
    ZC_DEBUG("net: connection %u with %s ended: %s", comm->conn_id, comm->peer, reason);
}

net_comm_t *zc_net_comm_alloc(net_ctx_t *ctx, net_kind_t kind, int dev, uint32_t conn_id)
{
    net_comm_t *comm = calloc(1, sizeof(*comm));
    if (!comm) {
        ZC_ERROR("net: no memory for a connection");
        return NULL;
    }
    comm->magic = NET_MAGIC_COMM;
    comm->kind = kind;
    comm->ctx = ctx;
    comm->dev = dev;
    comm->conn_id = conn_id;
    comm->fd = -1;
    comm->shake.fd = -1;
    for (int i = 0; i < NET_MAX_PENDING; i++)
        comm->pending[i].fd = -1;
    comm->ep_status = ZC_OK;
    snprintf(comm->peer, sizeof(comm->peer), "(not connected)");
    return comm;
}

void zc_net_comm_close_unlock(net_comm_t *comm)
{
    net_ctx_t *ctx = comm->ctx;
    /* without peer error handling, UCX never completes the requests of a dead peer */
    int hopeless = comm->ep_status != ZC_OK && !ctx->cfg.ucx_peer_errors;
    uint64_t deadline =
        zc_time_ns() + (hopeless ? 0 : (uint64_t)ctx->cfg.timeout_s * 1000000000ull);

    zc_net_shake_end(&comm->shake);
    zc_net_cancel_recvs(comm);
    zc_ucx_closing_t *closing = zc_ucx_ep_close(comm->ep, comm->ep_status != ZC_OK);
    comm->ep = NULL;
    for (;;) {
        zc_net_progress(ctx);
        if (closing && zc_ucx_closing_done(closing))
            closing = NULL;
        if (!closing && !zc_net_comm_busy(comm))
            break;
        if (zc_time_ns() > deadline) {
            if (!hopeless)
                ZC_WARN("net: closing the connection with %s did not finish within %lld s; "
                        "leaving it to UCX",
                        comm->peer, (long long)ctx->cfg.timeout_s);
            zc_ucx_closing_abandon(closing);
            zc_net_cancel_recvs(comm);
            zc_net_progress(ctx);
            zc_net_detach_reqs(comm); /* UCX finishes them without the comm */
            break;
        }
        /* let the progress thread use the worker between our polls */
        zc_net_unlock(ctx);
        sched_yield();
        zc_net_lock(ctx);
    }
    comm->magic = NET_MAGIC_DEAD;
    free(comm);
    zc_net_ctx_unref_unlock(ctx);
}

/* ---- init, devices, properties, finalize ---- */

ncclResult_t zc_net_init(void **ctx_p, uint64_t commId, ncclNetCommConfig_v12_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction)
{
    if (!ctx_p)
        return ncclInternalError;
    ncclResult_t result = zc_nccl_setup(logFunction);
    if (result != ncclSuccess)
        return result;

    net_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        ZC_ERROR("net: no memory for a plugin context");
        zc_nccl_release();
        return ncclSystemError;
    }
    ctx->magic = NET_MAGIC_CTX;
    ctx->cfg = *zc_nccl_config();
    ctx->comm_id = commId;
    ctx->traffic_class = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    ctx->next_conn_id = 1;
    ctx->refs = 1;

    zc_status_t status = zc_ucx_worker_create("zipccl-net", &ctx->worker);
    if (status != ZC_OK) {
        ctx_destroy(ctx);
        return zc_nccl_result(status);
    }
    ctx->addr = zc_ucx_worker_address(ctx->worker, &ctx->addr_len);
    if (ctx->addr_len > NET_WORKER_ADDR_MAX) {
        ZC_ERROR("net: the UCX worker's address is too long for the handshake (%zu bytes, at "
                 "most %d)",
                 ctx->addr_len, NET_WORKER_ADDR_MAX);
        ctx_destroy(ctx);
        return ncclSystemError;
    }
    ZC_INFO("net: plugin context for comm 0x%llx ready (%d devices)", (unsigned long long)commId,
            zc_nccl_ndevs());
    *ctx_p = ctx;
    return ncclSuccess;
}

ncclResult_t zc_net_devices(int *ndev)
{
    if (!ndev)
        return ncclInternalError;
    *ndev = zc_nccl_ndevs();
    return ncclSuccess;
}

ncclResult_t zc_net_get_properties(int dev, ncclNetProperties_v12_t *props)
{
    return zc_nccl_properties(dev, props);
}

ncclResult_t zc_net_finalize(void *ctx_arg)
{
    if (!ctx_arg)
        return ncclSuccess; /* NCCL finalizes a context whose init failed */
    net_ctx_t *ctx = zc_net_ctx_of(ctx_arg);
    if (!ctx)
        return ncclInternalError;
    zc_net_lock(ctx);
    ctx->magic = NET_MAGIC_DEAD; /* no new comms; open ones keep it alive */
    zc_net_ctx_unref_unlock(ctx);
    return ncclSuccess;
}

ncclResult_t zc_net_set_net_attr(void *ctx_arg, ncclNetAttr_v12_t *netAttr)
{
    net_ctx_t *ctx = zc_net_ctx_of(ctx_arg);
    if (!ctx || !netAttr)
        return ncclInternalError;
    /* from NCCL's service and progress threads alike: under the context's lock */
    zc_net_lock(ctx);
    int changed = !ctx->attr_set || memcmp(&ctx->attr, netAttr, sizeof(*netAttr)) != 0;
    ctx->attr = *netAttr;
    ctx->attr_set = 1;
    zc_net_unlock(ctx);
    if (changed)
        ZC_DEBUG("net: comm 0x%llx hints: send %d..%d peers %d..%d flows, recv %d..%d peers "
                 "%d..%d flows, op 0x%x algo 0x%x proto 0x%x",
                 (unsigned long long)ctx->comm_id, netAttr->sendCommAttr.minConcurrentPeers,
                 netAttr->sendCommAttr.maxConcurrentPeers, netAttr->sendCommAttr.minFlowsPerPeer,
                 netAttr->sendCommAttr.maxFlowsPerPeer, netAttr->recvCommAttr.minConcurrentPeers,
                 netAttr->recvCommAttr.maxConcurrentPeers, netAttr->recvCommAttr.minFlowsPerPeer,
                 netAttr->recvCommAttr.maxFlowsPerPeer, netAttr->op, netAttr->algo, netAttr->proto);
    return ncclSuccess;
}
