/*
 * libzipccl-preload.so, the part both interposers share: the configuration,
 * read once per process, the eligibility rule and the engine, libzipccl.so.0,
 * loaded at the first eligible call (preload.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif

#include "plugin/preload/preload.h"

#include "common/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine ----------------------------------------------------------------------------- */

#define ZP_ENGINE_SONAME "libzipccl.so.0"

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static zp_engine_t engine;
static const zp_engine_t *engine_ok; /* &engine, or NULL when libzipccl.so.0 cannot be used */

/*
 * libzipccl.so.0 by path relative to this library: the same folder (installed
 * side by side in the libdir) or two up (the build tree). An absolute path
 * rather than DT_RUNPATH, which LD_LIBRARY_PATH would override.
 */
static void *engine_open(char *tried, size_t tried_len)
{
    static const char *const rel[] = {"", "/../.."};
    Dl_info info;
    void *h;

    tried[0] = '\0';
    if (dladdr(&engine, &info) && info.dli_fname && strrchr(info.dli_fname, '/')) {
        int dir = (int)(strrchr(info.dli_fname, '/') - info.dli_fname);
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            char path[4096];
            if (snprintf(path, sizeof(path), "%.*s%s/" ZP_ENGINE_SONAME, dir, info.dli_fname,
                         rel[i]) >= (int)sizeof(path))
                continue;
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
            size_t used = strlen(tried);
            snprintf(tried + used, tried_len - used, "%s, ", path);
        }
    }
    h = dlopen(ZP_ENGINE_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t used = strlen(tried);
        snprintf(tried + used, tried_len - used, "%s", dlerror());
    }
    return h;
}

static void engine_load(void)
{
    char tried[9000];
    void *h = engine_open(tried, sizeof(tried));
    if (!h) {
        ZC_ERROR("libzipccl-preload: cannot load the zipccl engine " ZP_ENGINE_SONAME
                 " (tried %s): every MPI and NCCL call passes through untouched",
                 tried);
        return;
    }
#define ENGINE_FN(field, name)                                                                     \
    do {                                                                                           \
        void *p_ = dlsym(h, name);                                                                 \
        if (!p_) {                                                                                 \
            ZC_ERROR("libzipccl-preload: " ZP_ENGINE_SONAME " lacks %s (another version?): every " \
                     "MPI and NCCL call passes through untouched",                                 \
                     name);                                                                        \
            return;                                                                                \
        }                                                                                          \
        memcpy(&engine.field, &p_, sizeof(p_));                                                    \
    } while (0)
    ENGINE_FN(comm_init_bootstrap, "zc_comm_init_bootstrap");
    ENGINE_FN(comm_destroy, "zc_comm_destroy");
    ENGINE_FN(allreduce_key, "zc_allreduce_key");
    ENGINE_FN(comm_set_stats_file, "zc_comm_set_stats_file");
    ENGINE_FN(comm_agree_max, "zc_comm_agree_max");
#undef ENGINE_FN
    /* never dlclose'd: its communicators and threads may outlive any caller */
    engine_ok = &engine;
}

const zp_engine_t *zp_engine(void)
{
    pthread_once(&engine_once, engine_load);
    return engine_ok;
}

/* ---- the guarded bootstrap ----------------------------------------------------------------- */

/* A rank's header before each bootstrap collective and in zp_agree's rounds. */
typedef struct zp_header {
    uint32_t kind; /* HEADER_COLL: in a bootstrap collective; HEADER_AGREE: in zp_agree */
    uint32_t bits; /* HEADER_AGREE: this rank's bits */
    uint64_t len;  /* HEADER_COLL: the collective's length */
} zp_header_t;

#define HEADER_COLL 1u
#define HEADER_AGREE 2u

typedef struct zp_guard {
    zp_coll_ops_t ops;
    void *ctx;
    int size;
} zp_guard_t;

/* Every rank's header for this round into @p all (size entries); ZC_OK or the collective's error.
 */
static zc_status_t header_round(const zp_coll_ops_t *ops, void *ctx, const zp_header_t *mine,
                                zp_header_t *all)
{
    return ops->allgather(ctx, mine, sizeof(*mine), all);
}

/*
 * The header round of a bootstrap collective of @p len bytes: ZC_OK when every
 * rank is in the same collective, ZC_ERR_PEER when one has left the bootstrap.
 */
static zc_status_t guard_enter(zp_guard_t *g, size_t len)
{
    zp_header_t mine = {.kind = HEADER_COLL, .len = len},
                *all = calloc((size_t)g->size, sizeof(mine));
    if (!all)
        return ZC_ERR_NO_MEMORY;
    zc_status_t st = header_round(&g->ops, g->ctx, &mine, all);
    for (int r = 0; st == ZC_OK && r < g->size; r++)
        if (all[r].kind != HEADER_COLL || all[r].len != len) {
            ZC_ERROR("libzipccl-preload: rank %d left the zipccl bootstrap (or called another "
                     "collective): this rank's bootstrap fails too",
                     r);
            st = ZC_ERR_PEER;
        }
    free(all);
    return st;
}

static zc_status_t guard_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    zp_guard_t *g = ctx;
    ZC_CHECK(guard_enter(g, len));
    return g->ops.allgather(g->ctx, mine, len, all);
}

static zc_status_t guard_broadcast(void *ctx, void *buf, size_t len, int root)
{
    zp_guard_t *g = ctx;
    ZC_CHECK(guard_enter(g, len));
    return g->ops.broadcast(g->ctx, buf, len, root);
}

static zc_status_t guard_barrier(void *ctx)
{
    return guard_enter(ctx, 0); /* the header round is a barrier */
}

static void guard_destroy(void *ctx)
{
    zp_guard_t *g = ctx;
    if (g->ops.destroy)
        g->ops.destroy(g->ctx);
    free(g);
}

int zp_agree(const zp_coll_ops_t *ops, void *ctx, int size, int bits)
{
    zp_header_t mine = {.kind = HEADER_AGREE, .bits = (uint32_t)bits & 0xff};
    zp_header_t *all = calloc((size_t)size, sizeof(mine));
    int result = 0;
    if (!all) {
        ZC_ERROR("libzipccl-preload: out of memory for the agreement of %d ranks", size);
        return 0;
    }
    /*
     * Ranks still in the bootstrap see this header, fail their collective and come here: the
     * rounds end when every rank is here. Each round is an allgather every rank makes.
     */
    for (;;) {
        if (header_round(ops, ctx, &mine, all) != ZC_OK)
            break;
        int here = 1;
        result = 0xff;
        for (int r = 0; r < size; r++) {
            here &= all[r].kind == HEADER_AGREE;
            result &= (int)all[r].bits;
        }
        if (here)
            break;
        result = 0;
    }
    free(all);
    return result;
}

zc_status_t zp_comm_init(const zp_engine_t *eng, int rank, int size, const zp_coll_ops_t *ops,
                         void *ctx, const char *stats_file, zc_comm_t **comm_p)
{
    static const zc_bootstrap_hooks_t guard_hooks = {.allgather = guard_allgather,
                                                     .broadcast = guard_broadcast,
                                                     .barrier = guard_barrier,
                                                     .destroy = guard_destroy};
    zp_guard_t *g = calloc(1, sizeof(*g));
    if (!g) {
        ZC_ERROR("libzipccl-preload: out of memory for the bootstrap");
        if (ops->destroy)
            ops->destroy(ctx);
        return ZC_ERR_NO_MEMORY;
    }
    g->ops = *ops;
    g->ctx = ctx;
    g->size = size;
    zc_status_t st = eng->comm_init_bootstrap(rank, size, &guard_hooks, g, comm_p);
    if (st == ZC_OK && stats_file) {
        st = eng->comm_set_stats_file(*comm_p, stats_file);
        if (st != ZC_OK) {
            ZC_ERROR("libzipccl-preload: naming the statistics file %s failed: %s", stats_file,
                     zc_status_string(st));
            eng->comm_destroy(*comm_p);
            *comm_p = NULL;
        }
    }
    return st;
}

/* ---- configuration and eligibility ---------------------------------------------------------- */

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static zc_config_t config;
static const zc_config_t *config_ok; /* &config, or NULL when a variable is invalid */

static void config_load(void)
{
    /* zc_config_load and zc_config_apply log the variable and its accepted values */
    if (zc_config_load(NULL, &config) != ZC_OK || zc_config_apply(&config) != ZC_OK) {
        ZC_ERROR("libzipccl-preload: invalid ZIPCCL_* configuration (above): every MPI and NCCL "
                 "call passes through untouched");
        return;
    }
    config_ok = &config;
}

const zc_config_t *zp_config(void)
{
    pthread_once(&config_once, config_load);
    return config_ok;
}

/* A float sum or average of @p count values of @p elem bytes each, at least ZIPCCL_MIN_BYTES. */
static int float_sum_sized(const zc_config_t *cfg, zc_dtype_t dtype, zc_redop_t op, size_t count,
                           size_t elem)
{
    if (count == 0)
        return 0;
    if (dtype != ZC_DTYPE_F32 && dtype != ZC_DTYPE_F16 && dtype != ZC_DTYPE_BF16 &&
        dtype != ZC_DTYPE_F64)
        return 0;
    if (op != ZC_OP_SUM && op != ZC_OP_AVG)
        return 0;
    if (count > SIZE_MAX / elem)
        return 0;
    return (uint64_t)(count * elem) >= (uint64_t)cfg->min_bytes;
}

int zp_eligible(const zc_config_t *cfg, zc_dtype_t dtype, zc_redop_t op, size_t count)
{
    if (!cfg || cfg->codec == ZC_CODEC_NONE)
        return 0;
    /* f64 is reduced in f32 (zp_allreduce): what zipccl compresses is 4 bytes a value */
    return float_sum_sized(cfg, dtype, op, count,
                           dtype == ZC_DTYPE_F64 ? 4 : zc_dtype_bytes(dtype));
}

int zp_eligible_raw(const zc_config_t *cfg, zc_dtype_t dtype, zc_redop_t op, size_t count)
{
    if (!cfg || cfg->codec != ZC_CODEC_NONE || !cfg->preload_raw)
        return 0;
    /* nothing is converted: f64 counts its own 8 bytes */
    return float_sum_sized(cfg, dtype, op, count, zc_dtype_bytes(dtype));
}

uint64_t zp_tensor_key(const void *buf, size_t count)
{
    /* splitmix64's finalizer over the address and the count; 0 is zc_allreduce_key's default */
    uint64_t x = (uint64_t)(uintptr_t)buf ^ ((uint64_t)count * 0x9E3779B97F4A7C15ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x ? x : 1;
}

zc_status_t zp_allreduce(const zp_engine_t *eng, zc_comm_t *comm, const void *sendbuf,
                         void *recvbuf, size_t count, zc_dtype_t dtype, zc_redop_t op, uint64_t key)
{
    /*
     * ZIPCCL_CODEC=none (zp_eligible_raw): zipccl's uncompressed ring sums f64 in f64,
     * exact up to the order of the additions, as MPI would.
     */
    const zc_config_t *cfg = zp_config();
    if (dtype != ZC_DTYPE_F64 || (cfg && cfg->codec == ZC_CODEC_NONE))
        return eng->allreduce_key(comm, sendbuf, recvbuf, count, dtype, op, key);

    /*
     * zipccl's codecs take f32, f16 and bf16: f64 is reduced in f32, whose rounding
     * (2^-24 relative) is far below any lossy codec's error.
     */
    float *tmp = calloc(count, sizeof(*tmp)); /* calloc: overflow-checked */
    if (!tmp) {
        ZC_ERROR("libzipccl-preload: out of memory for the f32 copy of %zu f64 values", count);
        return ZC_ERR_NO_MEMORY;
    }
    const double *src = sendbuf;
    for (size_t i = 0; i < count; i++)
        tmp[i] = (float)src[i];
    zc_status_t status = eng->allreduce_key(comm, tmp, tmp, count, ZC_DTYPE_F32, op, key);
    if (status == ZC_OK) {
        double *dst = recvbuf;
        for (size_t i = 0; i < count; i++)
            dst[i] = tmp[i];
    }
    free(tmp);
    return status;
}
