/*
 * ncclCollNet v12: NCCL hands each node head's share of an all-reduce (pieces
 * of its staging buffer, in host memory) to iallreduce; zipccl reduces them
 * among the heads, compressed per ZIPCCL_COLLNET_CODEC.
 *
 * Contexts: init runs once per communicator (every communicator, whether or
 * not NCCL_COLLNET_ENABLE is set) and finalize once per context. A context
 * holds a reference on the process-wide state (setup.c) and is listed under
 * its commId so that the tuner (tuner.c) can tell whether NCCL's CollNet for a
 * communicator is this library's.
 *
 * Reduce-scatter and all-gather (CollNetDirect and multi-node NVLS; NCCL 2.30
 * passes one part and a window [windowOffset, windowOffset + windowBytes) of
 * the nNodes x bytesPerRank vector, addendum section 6.2): the heads'
 * communicator has only an all-reduce, so both are built on it. ireducescatter
 * all-reduces the window (compressed as iallreduce is: float sums of at least
 * ZIPCCL_MIN_BYTES, the rest raw) into a scratch buffer and keeps this node's
 * part; iallgather places this node's bytes at their offset in a zeroed window
 * and all-reduces it as bytes (uint8 sum, raw: exactly one node contributes
 * each byte, so the sum is the byte). Both move an all-reduce's bytes, twice
 * what a dedicated reduce-scatter or all-gather would (a native one needs
 * collectives/ to offer them). Compression still halves the raw
 * reduce-scatter's bytes at qsgd's 8 bits; a raw all-gather through here only
 * loses to NCCL's own ring, which is why the v12 table leaves iallgather NULL
 * (NCCL 2.30 then never picks CollNet for all-gather) while the v11..v8 tables,
 * which NCCL 2.30 wraps without looking at NULL, carry it.
 *
 * Meeting the other heads: listen() opens a TCP socket on the device's address
 * (port chosen by the kernel) and writes {magic, family, address, port, random
 * nonce, random secret} into NCCL's 128-byte handle. NCCL gathers the handles
 * of every node through its own bootstrap and calls connect(handles, nranks,
 * rank) on each head: node 0 becomes the root of zipccl's tcp bootstrap on the
 * socket it already listens on, the others connect to handles[0]'s address.
 * The job id is made of node 0's nonce, so that a process of another
 * communicator (another nonce) is told apart; node 0's secret is the job
 * secret (zc_bootstrap_tcp_join), so that only processes NCCL gave the handle
 * can join: a stranger that finds the listening port cannot prove it. Then
 * zc_comm_create builds a communicator over that bootstrap with the CollNet codec.
 *
 * Stateless: NCCL slices its staging buffer per channel and step, so a buffer
 * address is no tensor identity: error feedback is off and only stateless
 * codecs are offered (none, qsgd, fp16, bf16).
 *
 * Threads: listen, connect, regMr, deregMr and closeColl run in NCCL's service
 * thread, iallreduce and test in its progress thread, never at the same time
 * on one collComm; the zipccl communicator runs without a progress thread of
 * its own (NCCL's test() drives it).
 */
#include "plugin/nccl/plugin.h"

#include "collectives/coll.h"
#include "common/compiler.h"
#include "common/log.h"
#include "plugin/nccl/nccl_types.h"
#include "transport/bootstrap/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define COLLNET_MAGIC UINT32_C(0x7a43434e) /* "zCCN" */
/*
 * All-reduces one collComm keeps in flight; beyond, iallreduce answers "retry"
 * (NCCL keeps at most NCCL_STEPS = 8 per channel; zipccl's tags tell 4096 apart).
 */
#define COLLNET_MAX_REQUESTS 256
/* test() reports sizes as int: NCCL splits larger operations to maxCollBytes. */
#define COLLNET_MAX_BYTES (UINT64_C(1) << 30)

/* What listen() publishes; NCCL copies it to every head. */
typedef struct collnet_handle {
    uint32_t magic;
    uint16_t family; /* AF_INET or AF_INET6 */
    uint16_t port;   /* host byte order */
    uint8_t addr[16];
    uint64_t nonce;     /* random per listen: the job's identity */
    uint8_t secret[32]; /* random per listen: node 0's is the heads' job secret */
} collnet_handle_t;

_Static_assert(sizeof(collnet_handle_t) <= NCCL_NET_HANDLE_MAXSIZE,
               "the CollNet handle must fit NCCL's handle");

typedef struct collnet_listen {
    int fd; /* -1 once connect() gave it to the bootstrap */
    int dev;
    collnet_handle_t handle;
} collnet_listen_t;

typedef struct collnet_comm collnet_comm_t;

typedef struct collnet_req {
    collnet_comm_t *owner; /* NULL while free */
    zc_request_t *zreq;    /* NULL for an empty window: done at once */
    size_t bytes;
    uint8_t *scratch; /* reduce-scatter and all-gather: the window, kept for the next use */
    size_t scratch_cap;
    uint8_t *copy_dst; /* reduce-scatter: scratch + copy_off goes there once done */
    size_t copy_off, copy_len;
} collnet_req_t;

struct collnet_comm {
    zc_comm_t *comm;
    int rank, nranks;
    int nfree;
    int free_list[COLLNET_MAX_REQUESTS];
    collnet_req_t reqs[COLLNET_MAX_REQUESTS];
};

typedef struct collnet_mr {
    void *data;
    size_t size;
} collnet_mr_t;

#define COLLNET_CTX_MAGIC UINT64_C(0x7a63636e63747821) /* "zccnctx!" */

/* A communicator's CollNet context; the live ones are listed for the tuner. */
typedef struct collnet_ctx {
    uint64_t magic;
    uint64_t comm_id;
    struct collnet_ctx *next;
} collnet_ctx_t;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static collnet_ctx_t *live_ctxs;

/* ---- init and devices ---------------------------------------------------------------------- */

ncclResult_t zc_collnet_init(void **ctx_p, uint64_t commId, ncclDebugLogger_t logFunction)
{
    if (!ctx_p)
        return ncclInternalError;
    ncclResult_t res = zc_nccl_setup(logFunction);
    if (res != ncclSuccess)
        return res;
    collnet_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        ZC_ERROR("collnet: no memory for a plugin context");
        zc_nccl_release();
        return ncclSystemError;
    }
    ctx->magic = COLLNET_CTX_MAGIC;
    ctx->comm_id = commId;
    pthread_mutex_lock(&ctx_lock);
    ctx->next = live_ctxs;
    live_ctxs = ctx;
    pthread_mutex_unlock(&ctx_lock);
    *ctx_p = ctx;
    return ncclSuccess;
}

int zc_collnet_serves(uint64_t commId)
{
    int found = 0;

    pthread_mutex_lock(&ctx_lock);
    for (const collnet_ctx_t *c = live_ctxs; c && !found; c = c->next)
        found = c->comm_id == commId;
    pthread_mutex_unlock(&ctx_lock);
    return found;
}

ncclResult_t zc_collnet_devices(int *ndev)
{
    if (!ndev)
        return ncclInternalError;
    *ndev = zc_nccl_ndevs();
    return ncclSuccess;
}

ncclResult_t zc_collnet_get_properties(int dev, ncclNetProperties_v12_t *props)
{
    if (!props)
        return ncclInternalError;
    ncclResult_t res = zc_nccl_properties(dev, props);
    if (res != ncclSuccess)
        return res;
    if (props->maxCollBytes == 0 || props->maxCollBytes > COLLNET_MAX_BYTES)
        props->maxCollBytes = COLLNET_MAX_BYTES;
    return ncclSuccess;
}

ncclResult_t zc_collnet_finalize(void *ctx_arg)
{
    collnet_ctx_t *ctx = ctx_arg;
    int found = 0;

    if (!ctx)
        return ncclSuccess; /* NCCL 2.28 finalizes a context whose init failed */
    pthread_mutex_lock(&ctx_lock);
    for (collnet_ctx_t **p = &live_ctxs; *p; p = &(*p)->next) {
        if (*p == ctx) {
            *p = ctx->next;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    if (!found) {
        ZC_ERROR("collnet: finalize of a context that is not live (finalized twice, or not ours)");
        return ncclInternalError;
    }
    ctx->magic = 0;
    free(ctx);
    zc_nccl_release();
    return ncclSuccess;
}

/* ---- listen and connect -------------------------------------------------------------------- */

ncclResult_t zc_collnet_listen(void *ctx, int dev, void *handle, void **listenComm)
{
    struct sockaddr_storage ss;
    unsigned len = sizeof(ss);
    collnet_listen_t *lc;
    ncclResult_t res;

    (void)ctx;
    if (!handle || !listenComm)
        return ncclInternalError;
    res = zc_nccl_device_addr(dev, &ss, &len);
    if (res != ncclSuccess)
        return res;
    lc = calloc(1, sizeof(*lc));
    if (!lc) {
        ZC_ERROR("collnet: out of memory in listen");
        return ncclSystemError;
    }
    lc->dev = dev;
    lc->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lc->fd < 0)
        goto err_errno;
    int one = 1;
    (void)setsockopt(lc->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    if (bind(lc->fd, (struct sockaddr *)&ss, len) < 0 || listen(lc->fd, 128) < 0)
        goto err_errno;
    socklen_t sl = sizeof(ss);
    if (getsockname(lc->fd, (struct sockaddr *)&ss, &sl) < 0)
        goto err_errno;

    collnet_handle_t *h = &lc->handle;
    h->magic = COLLNET_MAGIC;
    h->family = (uint16_t)ss.ss_family;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        memcpy(h->addr, &a->sin_addr, 4);
        h->port = ntohs(a->sin_port);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        memcpy(h->addr, &a->sin6_addr, 16);
        h->port = ntohs(a->sin6_port);
    }
    if (getrandom(&h->nonce, sizeof(h->nonce), 0) != (ssize_t)sizeof(h->nonce) ||
        getrandom(h->secret, sizeof(h->secret), 0) != (ssize_t)sizeof(h->secret))
        goto err_errno;

    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, h, sizeof(*h));
    *listenComm = lc;
    return ncclSuccess;

err_errno:
    ZC_ERROR("collnet: cannot listen on device %d: %s", dev, strerror(errno));
    if (lc->fd >= 0)
        close(lc->fd);
    free(lc);
    return ncclSystemError;
}

/* Reads node @p node's handle into @p h; ncclInternalError (logged) when it is not ours. */
static ncclResult_t read_handle(void *const handles[], int node, collnet_handle_t *h)
{
    if (!handles[node]) {
        ZC_ERROR("collnet: NCCL passed no handle for node %d", node);
        return ncclInternalError;
    }
    memcpy(h, handles[node], sizeof(*h));
    if (h->magic != COLLNET_MAGIC || (h->family != AF_INET && h->family != AF_INET6) ||
        h->port == 0) {
        ZC_ERROR("collnet: the handle of node %d is not a zipccl CollNet handle (magic 0x%08x)",
                 node, h->magic);
        return ncclInternalError;
    }
    return ncclSuccess;
}

/*
 * The configuration of the heads' communicator: the process's, with the
 * CollNet codec, stateless, driven by NCCL's progress thread. ZIPCCL_ALGO=auto
 * becomes a fixed algorithm: the cost model would weigh compression against
 * the raw ring, while CollNet's whole point is the codec the user chose.
 * qsgd: allgather for 2 heads (one quantization), scatter beyond (2(N-1)/N
 * payloads on the wire instead of N-1); fp16 and bf16: the ring on payloads.
 */
static void collnet_config(int nranks, zc_config_t *cfg)
{
    *cfg = *zc_nccl_config();
    cfg->codec = cfg->collnet_codec;
    cfg->qsgd_bits = cfg->collnet_qsgd_bits;
    cfg->qsgd_levels = ZC_CONFIG_AUTO;
    cfg->qsgd_ef = 0;
    cfg->gradiveq_ef = 0;
    cfg->progress_thread = 0;
    _Static_assert((int)ZC_CFG_COLLNET_CODEC_NONE == (int)ZC_CODEC_NONE &&
                       (int)ZC_CFG_COLLNET_CODEC_QSGD == (int)ZC_CODEC_QSGD &&
                       (int)ZC_CFG_COLLNET_CODEC_FP16 == (int)ZC_CODEC_FP16 &&
                       (int)ZC_CFG_COLLNET_CODEC_BF16 == (int)ZC_CODEC_BF16,
                   "ZIPCCL_COLLNET_CODEC's choices are zc_codec_id_t values");
    if (cfg->algo == ZC_CFG_ALGO_AUTO && cfg->codec != ZC_CODEC_NONE) {
        if (cfg->codec == ZC_CODEC_QSGD)
            cfg->algo = nranks > 2 ? ZC_CFG_ALGO_SCATTER : ZC_CFG_ALGO_ALLGATHER;
        else
            cfg->algo = ZC_CFG_ALGO_RING;
    }
}

static void collnet_comm_free(collnet_comm_t *cc)
{
    if (!cc)
        return;
    for (int i = 0; i < COLLNET_MAX_REQUESTS; i++) {
        if (cc->reqs[i].owner && cc->reqs[i].zreq)
            (void)zc_wait(&cc->reqs[i].zreq); /* NCCL closes after the last test; a safety net */
        free(cc->reqs[i].scratch);
    }
    zc_comm_destroy(cc->comm);
    free(cc);
}

ncclResult_t zc_collnet_connect(void *handles[], int nranks, int rank, void *listenComm,
                                void **collComm)
{
    collnet_listen_t *lc = listenComm;
    collnet_handle_t root, mine;
    zc_bootstrap_t *bs = NULL;
    zc_config_t cfg;
    zc_status_t status;
    char host[INET6_ADDRSTRLEN], job[64];
    ncclResult_t res;

    if (!handles || nranks < 1 || rank < 0 || rank >= nranks || !lc || !collComm) {
        ZC_ERROR("collnet: connect called with bad arguments (node %d of %d)", rank, nranks);
        return ncclInternalError;
    }
    if ((res = read_handle(handles, 0, &root)) != ncclSuccess ||
        (res = read_handle(handles, rank, &mine)) != ncclSuccess)
        return res;
    if (mine.nonce != lc->handle.nonce) {
        ZC_ERROR("collnet: node %d's handle is not the one this process published in listen", rank);
        return ncclInternalError;
    }
    if (rank == 0 && lc->fd < 0) {
        ZC_ERROR("collnet: listen comm of node 0 used for a second connect");
        return ncclInternalError;
    }
    inet_ntop(root.family, root.addr, host, sizeof(host));
    snprintf(job, sizeof(job), "nccl-collnet-%016" PRIx64 "-%d", root.nonce, nranks);
    collnet_config(nranks, &cfg);

    collnet_comm_t *cc = calloc(1, sizeof(*cc));
    if (!cc) {
        ZC_ERROR("collnet: out of memory in connect");
        return ncclSystemError;
    }
    cc->rank = rank;
    cc->nranks = nranks;
    for (int i = 0; i < COLLNET_MAX_REQUESTS; i++)
        cc->free_list[i] = COLLNET_MAX_REQUESTS - 1 - i;
    cc->nfree = COLLNET_MAX_REQUESTS;

    int fd = -1;
    if (rank == 0 && nranks > 1) {
        fd = lc->fd; /* the bootstrap takes it, and closes it */
        lc->fd = -1;
    }
    zc_bootstrap_tcp_args_t args = {.rank = rank,
                                    .size = nranks,
                                    .host = host,
                                    .port = root.port,
                                    .listen_fd = fd,
                                    .job_id = job,
                                    .secret = root.secret,
                                    .secret_len = sizeof(root.secret),
                                    .timeout_s = (int)cfg.timeout_s};
    status = zc_bootstrap_tcp_join(&args, &bs);
    if (status == ZC_OK)
        status = zc_comm_create(&cfg, bs, &cc->comm); /* takes bs */
    if (status != ZC_OK) {
        ZC_WARN("collnet: node %d of %d could not join the heads' communicator (root %s port %u): "
                "%s; NCCL uses point-to-point instead",
                rank, nranks, host, root.port, zc_status_string(status));
        free(cc);
        return zc_nccl_result(status);
    }
    static const char *const algo_names[] = {"auto", "ring", "allgather", "scatter"};
    ZC_INFO("collnet: node %d of %d connected: codec %s (qsgd %" PRId64
            " bits), algorithm %s, compressed from %" PRId64 " bytes",
            rank, nranks, zc_codec_name((zc_codec_id_t)cfg.codec), cfg.qsgd_bits,
            algo_names[cfg.algo], cfg.min_bytes);
    *collComm = cc;
    return ncclSuccess;
}

ncclResult_t zc_collnet_close_listen(void *listenComm)
{
    collnet_listen_t *lc = listenComm;
    if (!lc)
        return ncclSuccess;
    if (lc->fd >= 0)
        close(lc->fd);
    free(lc);
    return ncclSuccess;
}

ncclResult_t zc_collnet_close_coll(void *collComm)
{
    collnet_comm_free(collComm);
    return ncclSuccess;
}

/* ---- what zipccl reduces ------------------------------------------------------------------- */

/*
 * What CollNet reduces: NCCL never hands it avg (it arrives as sum, the GPU
 * divides), so avg is declined like an unknown op.
 */
static int map_types(ncclDataType_t type, ncclRedOp_t op, zc_dtype_t *dtype_p, zc_redop_t *op_p)
{
    return op != ncclAvg && zc_nccl_dtype(type, dtype_p) && zc_nccl_redop(op, op_p);
}

/*
 * What reduceSupport offers NCCL: the float sums CollNet compresses (NCCL maps
 * avg to sum before asking), and with ZIPCCL_COLLNET_ALL_TYPES=1 everything
 * else zipccl reduces (raw). Only float sums by default because NCCL's tuner
 * hook sees no type: the tuner's preference for CollNet (tuner.c) reaches
 * exactly the (type, op) pairs answered 1 here. The answer depends on
 * (type, op) and an AGREED variable only (the heads' communicator refuses to
 * form when they differ), so it is identical on every rank.
 */
static int offered(ncclDataType_t type, ncclRedOp_t op)
{
    zc_dtype_t dt;
    zc_redop_t zop;
    const zc_config_t *cfg = zc_nccl_config();

    if (!map_types(type, op, &dt, &zop))
        return 0;
    if (cfg && cfg->collnet_all_types)
        return 1;
    return op == ncclSum && (type == ncclFloat32 || type == ncclFloat16 || type == ncclBfloat16);
}

ncclResult_t zc_collnet_reduce_support(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported)
{
    if (!supported)
        return ncclInternalError;
    *supported = offered(dataType, redOp);
    return ncclSuccess;
}

/* ---- memory: host only, nothing to pin ----------------------------------------------------- */

ncclResult_t zc_collnet_reg_mr(void *collComm, void *data, size_t size, int type, void **mhandle)
{
    if (!collComm || !data || !mhandle)
        return ncclInternalError;
    if (type != NCCL_PTR_HOST) {
        ZC_ERROR("collnet: cannot register memory of type 0x%x (only host memory, NCCL_PTR_HOST)",
                 type);
        return ncclInternalError;
    }
    collnet_mr_t *mr = malloc(sizeof(*mr));
    if (!mr)
        return ncclSystemError;
    mr->data = data;
    mr->size = size;
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t zc_collnet_reg_mr_dmabuf(void *collComm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle)
{
    (void)offset;
    (void)fd;
    return zc_collnet_reg_mr(collComm, data, size, type, mhandle);
}

ncclResult_t zc_collnet_dereg_mr(void *collComm, void *mhandle)
{
    if (!collComm)
        return ncclInternalError;
    free(mhandle);
    return ncclSuccess;
}

/* ---- the data path ------------------------------------------------------------------------- */

/* A free request slot, or NULL (back-pressure: NCCL posts the call again later). */
static collnet_req_t *req_take(collnet_comm_t *cc)
{
    return cc->nfree > 0 ? &cc->reqs[cc->free_list[cc->nfree - 1]] : NULL;
}

/* Hands @p req, whose all-reduce (if any) was posted, to NCCL. */
static void req_post(collnet_comm_t *cc, collnet_req_t *req, size_t bytes, void **request)
{
    cc->nfree--;
    req->owner = cc;
    req->bytes = bytes;
    *request = req;
}

/* @p req's scratch buffer, at least @p bytes long; 0 when out of memory (logged). */
static int req_scratch(collnet_req_t *req, size_t bytes)
{
    if (req->scratch_cap >= bytes)
        return 1;
    uint8_t *p = realloc(req->scratch, bytes);
    if (!p) {
        ZC_ERROR("collnet: no memory for a %zu-byte window", bytes);
        return 0;
    }
    req->scratch = p;
    req->scratch_cap = bytes;
    return 1;
}

ncclResult_t zc_collnet_iallreduce(void *collComm, void *sendData, void *recvData, size_t count,
                                   ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                                   void *recvMhandle, void **request)
{
    collnet_comm_t *cc = collComm;
    zc_dtype_t dt;
    zc_redop_t op;

    (void)sendMhandle;
    (void)recvMhandle;
    if (!cc || !sendData || !recvData || count == 0 || !request)
        return ncclInternalError;
    if (!map_types(dataType, redOp, &dt, &op)) {
        ZC_ERROR("collnet: iallreduce of type %d with operation %d, which reduceSupport declined",
                 (int)dataType, (int)redOp);
        return ncclInternalError;
    }
    if (count > COLLNET_MAX_BYTES / zc_dtype_bytes(dt)) {
        ZC_ERROR("collnet: iallreduce of %zu elements exceeds maxCollBytes", count);
        return ncclInternalError;
    }
    collnet_req_t *req = req_take(cc);
    if (!req) {
        *request = NULL; /* back-pressure: NCCL posts it again later */
        return ncclSuccess;
    }
    /* key 0: stateless codecs keep no state under it */
    zc_status_t status = zc_iallreduce(cc->comm, sendData, recvData, count, dt, op, 0, &req->zreq);
    if (status != ZC_OK)
        return zc_nccl_result(status);
    req->copy_len = 0;
    req_post(cc, req, count * zc_dtype_bytes(dt), request);
    return ncclSuccess;
}

/*
 * The bytes of node @p rank's part [rank B, (rank+1) B) of the global vector that
 * fall in the window [off, off + len): [*lo_p, *hi_p) relative to the window
 * (empty when equal).
 */
static void window_part(int rank, size_t bytes_per_rank, size_t off, size_t len, size_t *lo_p,
                        size_t *hi_p)
{
    size_t part_lo = (size_t)rank * bytes_per_rank, part_hi = part_lo + bytes_per_rank;
    size_t lo = part_lo > off ? part_lo : off, hi = part_hi < off + len ? part_hi : off + len;
    *lo_p = lo < hi ? lo - off : 0;
    *hi_p = lo < hi ? hi - off : 0;
}

/*
 * The checks iallgather and ireducescatter share, and this node's part of the
 * window in [*lo_p, *hi_p) (@p node_buf, its send or receive buffer, must be
 * there when the part is not empty); ncclInternalError (logged) for a bad call.
 */
static ncclResult_t check_window(const char *what, collnet_comm_t *cc, int nparts,
                                 const ncclNetSGE_v12_t *parts, size_t bytes_per_rank,
                                 size_t window_offset, size_t window_bytes, size_t type_bytes,
                                 const void *node_buf, void **request, size_t *lo_p, size_t *hi_p)
{
    if (!cc || !parts || !request || nparts != 1 || !parts[0].address) {
        ZC_ERROR("collnet: %s with %d parts (NCCL passes one) or a NULL pointer", what, nparts);
        return ncclInternalError;
    }
    if (parts[0].size < window_bytes || window_bytes > COLLNET_MAX_BYTES ||
        window_offset % type_bytes || window_bytes % type_bytes || bytes_per_rank % type_bytes ||
        bytes_per_rank > SIZE_MAX / (size_t)cc->nranks ||
        window_offset + window_bytes > bytes_per_rank * (size_t)cc->nranks) {
        ZC_ERROR("collnet: %s of window [%zu, +%zu) with %zu bytes per node of %d (part of %zu "
                 "bytes, elements of %zu) does not fit",
                 what, window_offset, window_bytes, bytes_per_rank, cc->nranks,
                 (size_t)parts[0].size, type_bytes);
        return ncclInternalError;
    }
    window_part(cc->rank, bytes_per_rank, window_offset, window_bytes, lo_p, hi_p);
    if (*hi_p > *lo_p && !node_buf) {
        ZC_ERROR("collnet: %s with a NULL buffer for this node's part", what);
        return ncclInternalError;
    }
    return ncclSuccess;
}

ncclResult_t zc_collnet_ireducescatter(void *collComm, int nSendParts, ncclNetSGE_v12_t *sendParts,
                                       void *recvData, size_t bytesPerRank, size_t windowOffset,
                                       size_t windowBytes, ncclDataType_t dataType,
                                       ncclRedOp_t redOp, void *recvMhandle, void **request)
{
    collnet_comm_t *cc = collComm;
    zc_dtype_t dt;
    zc_redop_t op;
    size_t lo, hi;

    (void)recvMhandle;
    if (!map_types(dataType, redOp, &dt, &op)) {
        ZC_ERROR("collnet: ireducescatter of type %d with operation %d, which reduceSupport "
                 "declined",
                 (int)dataType, (int)redOp);
        return ncclInternalError;
    }
    ncclResult_t res =
        check_window("ireducescatter", cc, nSendParts, sendParts, bytesPerRank, windowOffset,
                     windowBytes, zc_dtype_bytes(dt), recvData, request, &lo, &hi);
    if (res != ncclSuccess)
        return res;
    collnet_req_t *req = req_take(cc);
    if (!req) {
        *request = NULL;
        return ncclSuccess;
    }
    if (windowBytes > 0) {
        if (!req_scratch(req, windowBytes))
            return ncclSystemError;
        /* the whole window on every head (same count everywhere), compressed like iallreduce */
        zc_status_t status = zc_iallreduce(cc->comm, sendParts[0].address, req->scratch,
                                           windowBytes / zc_dtype_bytes(dt), dt, op, 0, &req->zreq);
        if (status != ZC_OK)
            return zc_nccl_result(status);
    }
    req->copy_dst = recvData;
    req->copy_off = lo;
    req->copy_len = hi - lo;
    req_post(cc, req, hi - lo, request);
    return ncclSuccess;
}

ncclResult_t zc_collnet_iallgather(void *collComm, void *sendData, int nRecvParts,
                                   ncclNetSGE_v12_t *recvParts, size_t bytesPerRank,
                                   size_t windowOffset, size_t windowBytes, void *sendMhandle,
                                   void **request)
{
    collnet_comm_t *cc = collComm;
    size_t lo, hi;

    (void)sendMhandle;
    ncclResult_t res = check_window("iallgather", cc, nRecvParts, recvParts, bytesPerRank,
                                    windowOffset, windowBytes, 1, sendData, request, &lo, &hi);
    if (res != ncclSuccess)
        return res;
    collnet_req_t *req = req_take(cc);
    if (!req) {
        *request = NULL;
        return ncclSuccess;
    }
    if (windowBytes > 0) {
        if (!req_scratch(req, windowBytes))
            return ncclSystemError;
        /* this node's bytes at their place, zeros elsewhere: the byte sum is the gather */
        memset(req->scratch, 0, windowBytes);
        memcpy(req->scratch + lo, sendData, hi - lo);
        zc_status_t status = zc_iallreduce(cc->comm, req->scratch, recvParts[0].address,
                                           windowBytes, ZC_DTYPE_U8, ZC_OP_SUM, 0, &req->zreq);
        if (status != ZC_OK)
            return zc_nccl_result(status);
    }
    req->copy_len = 0;
    req_post(cc, req, windowBytes, request);
    return ncclSuccess;
}

ncclResult_t zc_collnet_iflush(void *collComm, void *data, int size, void *mhandle, void **request)
{
    (void)data;
    (void)size;
    (void)mhandle;
    if (!collComm || !request)
        return ncclInternalError;
    *request = NULL; /* host memory: the CPU wrote it, nothing to flush */
    return ncclSuccess;
}

ncclResult_t zc_collnet_test(void *request, int *done, int *size)
{
    collnet_req_t *req = request;
    if (!req || !done || !req->owner)
        return ncclInternalError;
    zc_status_t status = req->zreq ? zc_test(&req->zreq) : ZC_OK;
    if (status == ZC_INPROGRESS) {
        *done = 0;
        return ncclSuccess;
    }
    collnet_comm_t *cc = req->owner;
    req->owner = NULL;
    req->zreq = NULL;
    cc->free_list[cc->nfree++] = (int)(req - cc->reqs);
    if (status != ZC_OK)
        return zc_nccl_result(status); /* the collectives layer logged the cause */
    if (req->copy_len > 0)             /* reduce-scatter: this node's part of the window */
        memcpy(req->copy_dst, req->scratch + req->copy_off, req->copy_len);
    req->copy_len = 0;
    *done = 1;
    if (size)
        *size = (int)req->bytes;
    return ncclSuccess;
}
