/*
 * libzipccl-preload.so, the part both interposers share: the configuration,
 * read once per process, and the eligibility rule (preload.h).
 */
#include "plugin/preload/preload.h"

#include "common/log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

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

int zp_eligible(const zc_config_t *cfg, zc_dtype_t dtype, zc_redop_t op, size_t count)
{
    if (!cfg || cfg->codec == 0 /* none: params.def's first choice */ || count == 0)
        return 0;
    if (dtype != ZC_DTYPE_F32 && dtype != ZC_DTYPE_F16 && dtype != ZC_DTYPE_BF16 &&
        dtype != ZC_DTYPE_F64)
        return 0;
    if (op != ZC_OP_SUM && op != ZC_OP_AVG)
        return 0;
    /* f64 is reduced in f32 (zp_allreduce): what zipccl compresses is 4 bytes a value */
    size_t elem = dtype == ZC_DTYPE_F64 ? 4 : zc_dtype_bytes(dtype);
    if (count > SIZE_MAX / elem)
        return 0;
    return (uint64_t)(count * elem) >= (uint64_t)cfg->min_bytes;
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

zc_status_t zp_allreduce(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         zc_dtype_t dtype, zc_redop_t op, uint64_t key)
{
    if (dtype != ZC_DTYPE_F64)
        return zc_allreduce_key(comm, sendbuf, recvbuf, count, dtype, op, key);

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
    zc_status_t status = zc_allreduce_key(comm, tmp, tmp, count, ZC_DTYPE_F32, op, key);
    if (status == ZC_OK) {
        double *dst = recvbuf;
        for (size_t i = 0; i < count; i++)
            dst[i] = tmp[i];
    }
    free(tmp);
    return status;
}
