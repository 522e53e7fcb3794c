/*
 * NCCL's element types and reduction ops as zipccl's, and zipccl's status as
 * NCCL's result, for the net/CollNet plugin and the preload library's NCCL
 * interposer (one mapping, two callers; header-only, as the preload library
 * links none of plugin/nccl).
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

/*
 * A zipccl status as NCCL's result, the one conversion of both NCCL frontends:
 *   ZC_OK, ZC_INPROGRESS                    ncclSuccess
 *   ZC_ERR_PEER, ZC_ERR_TIMEOUT             ncclRemoteError (a peer died or stalled)
 *   ZC_ERR_INVALID_CONFIG, ZC_ERR_MISMATCH,
 *   ZC_ERR_UNSUPPORTED                      ncclInvalidUsage (configuration, ranks disagree)
 *   ZC_ERR_INVALID_ARG                      ncclInvalidArgument
 *   ZC_ERR_INTERNAL, ZC_ERR_CORRUPT,
 *   ZC_ERR_BUFFER_TOO_SMALL                 ncclInternalError (a bug, or a payload zipccl
 *                                           itself should never have produced)
 *   ZC_ERR_IO, ZC_ERR_NO_MEMORY, others     ncclSystemError (a local failure)
 * The plugin's own checks of NCCL's arguments return ncclInternalError directly:
 * a bad argument from NCCL is NCCL's bug, not the user's.
 */
static inline ncclResult_t zc_nccl_result(zc_status_t status)
{
    switch (status) {
    case ZC_OK:
    case ZC_INPROGRESS: return ncclSuccess;
    case ZC_ERR_PEER:
    case ZC_ERR_TIMEOUT: return ncclRemoteError;
    case ZC_ERR_INVALID_CONFIG:
    case ZC_ERR_MISMATCH:
    case ZC_ERR_UNSUPPORTED: return ncclInvalidUsage;
    case ZC_ERR_INVALID_ARG: return ncclInvalidArgument;
    case ZC_ERR_INTERNAL:
    case ZC_ERR_CORRUPT:
    case ZC_ERR_BUFFER_TOO_SMALL: return ncclInternalError;
    case ZC_ERR_IO:
    case ZC_ERR_NO_MEMORY:
    default: return ncclSystemError;
    }
}

#endif
