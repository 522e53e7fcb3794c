/*
 * Names and sizes of the public element types and reduction ops
 * (include/zipccl/zipccl.h): plain tables, in the common layer so that every
 * frontend has them, the preload library included, which links no more.
 */
#include "common/compiler.h"

#include <zipccl/zipccl.h>

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
