/*
 * ncclTuner v6 (NCCL 2.30) and v5 (2.28.9, the same first four slots) in the
 * net plugin's library: NCCL looks for a tuner there when NCCL_TUNER_PLUGIN
 * finds none (leave it unset, or set it to this library's path).
 *
 * Why: each CollNet iallreduce carries up to 8 channels x chunk, and NCCL
 * halves CollNetChain's chunk (256 KiB at most in 2.28.9, 512 KiB in 2.30)
 * for all but the largest messages, so the codec works on small pieces; and
 * with one GPU per node NCCL's cost model never picks CollNet for large
 * all-reduces (its bandwidth is half the ring's there). The tuner raises the
 * chunk (getChunkSize, v6 only) to ZIPCCL_TUNER_CHUNK and makes CollNet the
 * cheapest choice for all-reduces of at least ZIPCCL_TUNER_MIN_BYTES
 * (getCollInfo). Which types that reaches is reduceSupport's answer
 * (collnet.c): NCCL's hook passes no type, and leaves CollNet entries at -1
 * for the pairs the plugin declined.
 *
 * Off unless the plugin's CollNet is in use: a communicator's tuner acts only
 * when ZIPCCL_TUNER=1, it spans at least 2 nodes, and this library's CollNet
 * has a live context for the same commId (NCCL calls CollNet init with the
 * communicator's commHash before the tuner's init). With another library's
 * CollNet, or none, every call leaves NCCL's values as they are; so does a
 * communicator that shares its parent's resources (NCCL calls no plugin init
 * for it).
 *
 * Rules NCCL sets (addendum section 5): never return an error (NCCL fails the
 * collective), never turn a -1 entry (unavailable) into a cost, answer alike
 * on every rank (every input here is: the AGREED ZIPCCL_* variables, commId,
 * nNodes, NCCL_BUFFSIZE, which NCCL itself needs alike), keep a chunk a
 * multiple of 512 and within NCCL_BUFFSIZE/8.
 */
#include "common/log.h"
#include "plugin/nccl/plugin.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#define TUNER_MAGIC UINT64_C(0x7a6374756e657221) /* "zctuner!" */
#define TUNER_GRAIN 512                          /* NCCL's SIMPLE chunk grain */
#define NCCL_STEPS 8
#define NCCL_DEFAULT_BUFFSIZE (4u << 20)

typedef struct tuner_ctx {
    uint64_t magic;
    uint64_t comm_id;
    int referenced; /* holds a reference on the process-wide state */
    int active;
    size_t chunk;     /* 0: keep NCCL's */
    size_t min_bytes; /* 0: no steering */
} tuner_ctx_t;

static tuner_ctx_t *tuner_of(void *ctx)
{
    tuner_ctx_t *t = ctx;
    return t && t->magic == TUNER_MAGIC ? t : NULL;
}

/* NCCL_BUFFSIZE as NCCL reads it (bytes; unset or unparsable: its default). */
static size_t nccl_buffsize(void)
{
    const char *s = getenv("NCCL_BUFFSIZE");
    if (!s || !*s)
        return NCCL_DEFAULT_BUFFSIZE;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    return errno || *end || v <= 0 ? NCCL_DEFAULT_BUFFSIZE : (size_t)v;
}

ncclResult_t zc_tuner_init(void **ctx_p, uint64_t commId, size_t nRanks, size_t nNodes,
                           ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t *nvlDomainInfo,
                           ncclTunerConstants_v6_t *constants)
{
    (void)nvlDomainInfo;
    (void)constants;
    if (!ctx_p)
        return ncclInternalError;
    tuner_ctx_t *t = calloc(1, sizeof(*t));
    if (!t) {
        *ctx_p = NULL; /* inert: an error would fail the communicator */
        return ncclSuccess;
    }
    t->magic = TUNER_MAGIC;
    t->comm_id = commId;
    /* a configuration that fails here failed the net plugin's init too: stay inert */
    t->referenced = zc_nccl_setup(logFunction) == ncclSuccess;
    const zc_config_t *cfg = t->referenced ? zc_nccl_config() : NULL;
    const char *why = NULL;
    if (!cfg)
        why = "the ZIPCCL_* configuration did not load";
    else if (!cfg->tuner)
        why = "ZIPCCL_TUNER=0";
    else if (nNodes < 2)
        why = "a single node";
    else if (!zc_collnet_serves(commId))
        why = "its CollNet is not this plugin's";
    if (!why) {
        size_t cap = nccl_buffsize() / NCCL_STEPS; /* NCCL clamps to this; we do not ask more */
        size_t chunk = (size_t)cfg->tuner_chunk < cap ? (size_t)cfg->tuner_chunk : cap;
        t->chunk = chunk / TUNER_GRAIN * TUNER_GRAIN;
        t->min_bytes = (size_t)cfg->tuner_min_bytes;
        t->active = t->chunk > 0 || t->min_bytes > 0;
        ZC_INFO("tuner: comm 0x%" PRIx64 " (%zu ranks, %zu nodes): CollNet chunks of %zu bytes, "
                "CollNet preferred from %zu bytes",
                commId, nRanks, nNodes, t->chunk, t->min_bytes);
    } else {
        ZC_INFO("tuner: comm 0x%" PRIx64 " left to NCCL: %s", commId, why);
    }
    *ctx_p = t;
    return ncclSuccess;
}

ncclResult_t zc_tuner_get_coll_info(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                    float **collCostTable, int numAlgo, int numProto, int regBuff,
                                    int *nChannels)
{
    tuner_ctx_t *t = tuner_of(ctx);
    (void)numPipeOps;
    (void)regBuff; /* may differ between ranks: never decides anything */
    (void)nChannels;
    if (!t || !t->active || t->min_bytes == 0 || !collCostTable || collType != ncclFuncAllReduce ||
        nBytes < t->min_bytes || numProto <= NCCL_PROTO_SIMPLE)
        return ncclSuccess;
    /* a float[numAlgo][numProto] table behind a float ** */
    float *table = (float *)collCostTable;
    static const int algos[] = {NCCL_ALGO_COLLNET_DIRECT, NCCL_ALGO_COLLNET_CHAIN};
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        if (algos[i] >= numAlgo)
            continue;
        float *cost = &table[algos[i] * numProto + NCCL_PROTO_SIMPLE];
        if (*cost != NCCL_ALGO_PROTO_IGNORE) /* -1: not set up for this op, type or comm */
            *cost = 0.0f;
    }
    return ncclSuccess;
}

ncclResult_t zc_tuner_get_chunk_size(void *ctx, ncclFunc_t collType, size_t nBytes, int algo,
                                     int proto, int nChannels, size_t *chunkSize)
{
    tuner_ctx_t *t = tuner_of(ctx);
    if (!t || !t->active || t->chunk == 0 || !chunkSize || proto != NCCL_PROTO_SIMPLE ||
        (algo != NCCL_ALGO_COLLNET_CHAIN && algo != NCCL_ALGO_COLLNET_DIRECT) ||
        (collType != ncclFuncAllReduce && collType != ncclFuncReduceScatter))
        return ncclSuccess;
    /* raise NCCL's chunk, but not beyond what one channel carries */
    size_t share = nBytes / (size_t)(nChannels > 0 ? nChannels : 1) / TUNER_GRAIN * TUNER_GRAIN;
    size_t want = t->chunk < share ? t->chunk : share;
    if (want > *chunkSize)
        *chunkSize = want;
    return ncclSuccess;
}

ncclResult_t zc_tuner_finalize(void *ctx)
{
    tuner_ctx_t *t = tuner_of(ctx);
    if (!t)
        return ncclSuccess; /* never an error: NCCL would fail the communicator's teardown */
    if (t->referenced)
        zc_nccl_release();
    t->magic = 0;
    free(t);
    return ncclSuccess;
}
