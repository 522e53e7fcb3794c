/*
 * The one mapping between NCCL's and zipccl's types, ops and results
 * (plugin/nccl/nccl_types.h), shared by the plugin and the preload library:
 * every value NCCL defines, and the ones it does not.
 */
#include "plugin/nccl/nccl_types.h"

#include <criterion/criterion.h>

Test(nccl_types, result_of_every_status)
{
    static const struct {
        zc_status_t status;
        ncclResult_t result;
    } cases[] = {
        {ZC_OK, ncclSuccess},
        {ZC_INPROGRESS, ncclSuccess},
        {ZC_ERR_PEER, ncclRemoteError},
        {ZC_ERR_TIMEOUT, ncclRemoteError},
        {ZC_ERR_INVALID_CONFIG, ncclInvalidUsage},
        {ZC_ERR_MISMATCH, ncclInvalidUsage},
        {ZC_ERR_UNSUPPORTED, ncclInvalidUsage},
        {ZC_ERR_INVALID_ARG, ncclInvalidArgument},
        {ZC_ERR_INTERNAL, ncclInternalError},
        {ZC_ERR_CORRUPT, ncclInternalError},
        {ZC_ERR_BUFFER_TOO_SMALL, ncclInternalError},
        {ZC_ERR_IO, ncclSystemError},
        {ZC_ERR_NO_MEMORY, ncclSystemError},
        {(zc_status_t)-1000, ncclSystemError}, /* a status this build does not know */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(zc_nccl_result(cases[i].status), cases[i].result,
                     "status %d: result %d, expected %d", cases[i].status,
                     zc_nccl_result(cases[i].status), cases[i].result);
}

Test(nccl_types, dtypes)
{
    zc_dtype_t d = (zc_dtype_t)-1;
    cr_expect(zc_nccl_dtype(ncclFloat32, &d) && d == ZC_DTYPE_F32);
    cr_expect(zc_nccl_dtype(ncclFloat16, &d) && d == ZC_DTYPE_F16);
    cr_expect(zc_nccl_dtype(ncclBfloat16, &d) && d == ZC_DTYPE_BF16);
    cr_expect(zc_nccl_dtype(ncclInt8, &d) && d == ZC_DTYPE_I8);
    cr_expect(zc_nccl_dtype(ncclUint64, &d) && d == ZC_DTYPE_U64);
    d = ZC_DTYPE_F64;
    cr_expect(!zc_nccl_dtype(ncclFloat8e4m3, &d));
    cr_expect(!zc_nccl_dtype(ncclFloat8e5m2, &d));
    cr_expect(!zc_nccl_dtype(ncclNumTypes, &d));
    cr_expect(!zc_nccl_dtype((ncclDataType_t)-1, &d));
    cr_expect_eq(d, ZC_DTYPE_F64, "a refused type leaves the output alone");
}

Test(nccl_types, redops)
{
    zc_redop_t op = ZC_OP_MAX;
    cr_expect(zc_nccl_redop(ncclSum, &op) && op == ZC_OP_SUM);
    cr_expect(zc_nccl_redop(ncclAvg, &op) && op == ZC_OP_AVG);
    cr_expect(zc_nccl_redop(ncclMin, &op) && op == ZC_OP_MIN);
    op = ZC_OP_PROD;
    cr_expect(!zc_nccl_redop((ncclRedOp_t)(ncclAvg + 1), &op));
    cr_expect_eq(op, ZC_OP_PROD, "a refused op leaves the output alone");
}
