/*
 * ncclCollNet v10, v9 and v8 onto the v11 implementation (collnet.c). NCCL
 * calls their init once per process without a context, so the adapters keep
 * one process-wide context. Properties come from the net adapters
 * (net_compat.c): CollNet device i is net device i.
 */
#include "plugin/nccl/plugin.h"

#include <limits.h>
#include <stddef.h>

/* The context of every pre-v11 communicator. */
static void *collnet_v9_ctx;

ncclResult_t zc_collnet_v9_init(ncclDebugLogger_t logFunction)
{
    return zc_collnet_init(&collnet_v9_ctx, 0, logFunction);
}

ncclResult_t zc_collnet_v10_get_properties(int dev, ncclNetProperties_v10_t *props)
{
    ncclNetProperties_v11_t p11;
    if (!props)
        return ncclInternalError;
    ncclResult_t res = zc_net_v10_get_properties(dev, props);
    if (res != ncclSuccess)
        return res;
    /* the v11 CollNet properties cap maxCollBytes (test() reports int sizes) */
    res = zc_collnet_get_properties(dev, &p11);
    if (res != ncclSuccess)
        return res;
    props->maxCollBytes = p11.maxCollBytes;
    return ncclSuccess;
}

ncclResult_t zc_collnet_v8_get_properties(int dev, ncclNetProperties_v8_t *props)
{
    return zc_net_v8_get_properties(dev, props);
}

ncclResult_t zc_collnet_v9_listen(int dev, void *handle, void **listenComm)
{
    return zc_collnet_listen(collnet_v9_ctx, dev, handle, listenComm);
}

ncclResult_t zc_collnet_v8_iallreduce(void *collComm, void *sendData, void *recvData, int count,
                                      ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                                      void *recvMhandle, void **request)
{
    if (count <= 0)
        return ncclInternalError;
    return zc_collnet_iallreduce(collComm, sendData, recvData, (size_t)count, dataType, redOp,
                                 sendMhandle, recvMhandle, request);
}
