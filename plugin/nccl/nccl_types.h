/*
 * NCCL's element types and reduction ops as zipccl's, for the CollNet plugin
 * and the preload library's NCCL interposer (one mapping, two callers).
 */
#ifndef ZC_PLUGIN_NCCL_TYPES_H
#define ZC_PLUGIN_NCCL_TYPES_H

#include "plugin/nccl/nccl_abi.h"

#include <zipccl/zipccl.h>

/* @p type as zipccl's type in *@p dtype_p; 0 for fp8 and values NCCL does not define. */
static inline int zc_nccl_dtype(ncclDataType_t type, zc_dtype_t *dtype_p)
{
    static const int map[ncclNumTypes] = {
        [ncclInt8] = ZC_DTYPE_I8,       [ncclUint8] = ZC_DTYPE_U8,    [ncclInt32] = ZC_DTYPE_I32,
        [ncclUint32] = ZC_DTYPE_U32,    [ncclInt64] = ZC_DTYPE_I64,   [ncclUint64] = ZC_DTYPE_U64,
        [ncclFloat16] = ZC_DTYPE_F16,   [ncclFloat32] = ZC_DTYPE_F32, [ncclFloat64] = ZC_DTYPE_F64,
        [ncclBfloat16] = ZC_DTYPE_BF16, [ncclFloat8e4m3] = -1,        [ncclFloat8e5m2] = -1,
    };
    if ((unsigned)type >= ncclNumTypes || map[type] < 0)
        return 0;
    *dtype_p = (zc_dtype_t)map[type];
    return 1;
}

/* @p op as zipccl's op in *@p op_p (sum, prod, max, min, avg); 0 for user-created ops. */
static inline int zc_nccl_redop(ncclRedOp_t op, zc_redop_t *op_p)
{
    switch (op) {
    case ncclSum: *op_p = ZC_OP_SUM; return 1;
    case ncclProd: *op_p = ZC_OP_PROD; return 1;
    case ncclMax: *op_p = ZC_OP_MAX; return 1;
    case ncclMin: *op_p = ZC_OP_MIN; return 1;
    case ncclAvg: *op_p = ZC_OP_AVG; return 1;
    default: return 0;
    }
}

#endif
