/*
 * Names and sizes of the public element types and reduction ops
 * (include/zipccl/zipccl.h): plain tables, in the common layer so that every
 * frontend has them, the preload library included, which links no more. And
 * the widening of the floating types to f32 (dtype.h), which codecs and
 * collectives share.
 */
#include "common/dtype.h"

#include "common/compiler.h"
#include "common/half.h"

#include <zipccl/zipccl.h>

#include <string.h>

static const struct {
    const char *name;
    size_t bytes;
} dtypes[ZC_DTYPE_COUNT] = {
    [ZC_DTYPE_F32] = {"f32", 4}, [ZC_DTYPE_F16] = {"f16", 2}, [ZC_DTYPE_BF16] = {"bf16", 2},
    [ZC_DTYPE_F64] = {"f64", 8}, [ZC_DTYPE_I8] = {"i8", 1},   [ZC_DTYPE_U8] = {"u8", 1},
    [ZC_DTYPE_I32] = {"i32", 4}, [ZC_DTYPE_U32] = {"u32", 4}, [ZC_DTYPE_I64] = {"i64", 8},
    [ZC_DTYPE_U64] = {"u64", 8},
};

static const char *const redops[ZC_OP_COUNT] = {
    [ZC_OP_SUM] = "sum", [ZC_OP_PROD] = "prod", [ZC_OP_MIN] = "min",
    [ZC_OP_MAX] = "max", [ZC_OP_AVG] = "avg",
};

ZC_EXPORT const char *zc_dtype_name(zc_dtype_t dtype)
{
    return (unsigned)dtype < ZC_DTYPE_COUNT ? dtypes[dtype].name : NULL;
}

ZC_EXPORT size_t zc_dtype_bytes(zc_dtype_t dtype)
{
    return (unsigned)dtype < ZC_DTYPE_COUNT ? dtypes[dtype].bytes : 0;
}

ZC_EXPORT const char *zc_redop_name(zc_redop_t op)
{
    return (unsigned)op < ZC_OP_COUNT ? redops[op] : NULL;
}

size_t zc_dtype_size(zc_dtype_t dtype)
{
    switch (dtype) {
    case ZC_DTYPE_F32: return 4;
    case ZC_DTYPE_F16:
    case ZC_DTYPE_BF16: return 2;
    default: return 0; /* not a codec input type */
    }
}

void zc_dtype_to_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst)
{
    const uint16_t *h = src;

    if (count == 0)
        return; /* src may be NULL then, and memcpy must not see a NULL pointer (C11 7.24.1) */
    switch (dtype) {
    case ZC_DTYPE_F32: memcpy(dst, src, count * sizeof(float)); break;
    case ZC_DTYPE_F16:
        for (size_t i = 0; i < count; i++)
            dst[i] = zc_f16_to_f32(h[i]);
        break;
    case ZC_DTYPE_BF16:
        for (size_t i = 0; i < count; i++)
            dst[i] = zc_bf16_to_f32(h[i]);
        break;
    default: break; /* callers pass codec input types only */
    }
}

/*
 * dst[j] += src[j] over one block: a fixed count and restrict are what GCC's -O2 (its very
 * cheap cost model) vectorises; the plain loop, with a runtime alias check and a tail, it left
 * scalar.
 */
#define ADD_BLOCK 64
static void add_block_f32(float *restrict d, const float *restrict s)
{
    for (int j = 0; j < ADD_BLOCK; j++)
        d[j] += s[j];
}

void zc_dtype_add_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst)
{
    const uint16_t *h = src;
    const float *f = src;

    switch (dtype) {
    case ZC_DTYPE_F32: {
        size_t i = 0;
        if ((const void *)dst != src) /* distinct buffers; dst == src (doubling) stays scalar */
            for (; i + ADD_BLOCK <= count; i += ADD_BLOCK)
                add_block_f32(dst + i, f + i);
        for (; i < count; i++)
            dst[i] += f[i];
        break;
    }
    case ZC_DTYPE_F16:
        for (size_t i = 0; i < count; i++)
            dst[i] += zc_f16_to_f32(h[i]);
        break;
    case ZC_DTYPE_BF16:
        for (size_t i = 0; i < count; i++)
            dst[i] += zc_bf16_to_f32(h[i]);
        break;
    default: break; /* callers pass codec input types only */
    }
}
