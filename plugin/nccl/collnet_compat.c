/*
 * ncclCollNet v11, v10, v9 and v8 onto the v12 implementation (collnet.c).
 * v11 differs only in the properties' layout. v10 and older have no context:
 * NCCL calls their init once per process, so the adapters keep one
 * process-wide context (never finalized: these versions have no finalize).
 * Properties come from the net adapters (net_compat.c): CollNet device i is
 * net device i. v8's scatter-gather entries carry 32-bit sizes.
 */
#include "plugin/nccl/plugin.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>

/* The context of every pre-v11 communicator. */
static pthread_mutex_t collnet_v9_lock = PTHREAD_MUTEX_INITIALIZER;
static void *collnet_v9_ctx;

ncclResult_t zc_collnet_v9_init(ncclDebugLogger_t logFunction)
{
    ncclResult_t res = ncclSuccess;

    pthread_mutex_lock(&collnet_v9_lock);
    if (!collnet_v9_ctx)
        res = zc_collnet_init(&collnet_v9_ctx, 0, logFunction);
    pthread_mutex_unlock(&collnet_v9_lock);
    return res;
}

ncclResult_t zc_collnet_v11_get_properties(int dev, ncclNetProperties_v11_t *props)
{
    ncclNetProperties_v12_t p;

    ncclResult_t res = props ? zc_collnet_get_properties(dev, &p) : ncclInternalError;
    if (res == ncclSuccess)
        zc_nccl_properties_v11(&p, props);
    return res;
}

ncclResult_t zc_collnet_v10_get_properties(int dev, ncclNetProperties_v10_t *props)
{
    ncclNetProperties_v12_t p;
    if (!props)
        return ncclInternalError;
    ncclResult_t res = zc_net_v10_get_properties(dev, props);
    if (res != ncclSuccess)
        return res;
    /* the CollNet properties cap maxCollBytes (test() reports int sizes) */
    res = zc_collnet_get_properties(dev, &p);
    if (res != ncclSuccess)
        return res;
    props->maxCollBytes = p.maxCollBytes;
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

/* v8's one part as v12's (NCCL always passes exactly one; the implementation rejects others) */
static ncclNetSGE_v12_t sge_v12(int nparts, const ncclNetSGE_v8_t *parts)
{
    ncclNetSGE_v12_t sge = {0};
    if (nparts >= 1 && parts)
        sge = (ncclNetSGE_v12_t){parts[0].mhandle, parts[0].address, parts[0].size};
    return sge;
}

ncclResult_t zc_collnet_v8_iallgather(void *collComm, void *sendData, int nRecvParts,
                                      ncclNetSGE_v8_t *recvParts, size_t bytesPerRank,
                                      size_t windowOffset, size_t windowBytes, void *sendMhandle,
                                      void **request)
{
    ncclNetSGE_v12_t part = sge_v12(nRecvParts, recvParts);
    return zc_collnet_iallgather(collComm, sendData, nRecvParts, recvParts ? &part : NULL,
                                 bytesPerRank, windowOffset, windowBytes, sendMhandle, request);
}

ncclResult_t zc_collnet_v8_ireducescatter(void *collComm, int nSendParts,
                                          ncclNetSGE_v8_t *sendParts, void *recvData,
                                          size_t bytesPerRank, size_t windowOffset,
                                          size_t windowBytes, ncclDataType_t dataType,
                                          ncclRedOp_t redOp, void *recvMhandle, void **request)
{
    ncclNetSGE_v12_t part = sge_v12(nSendParts, sendParts);
    return zc_collnet_ireducescatter(collComm, nSendParts, sendParts ? &part : NULL, recvData,
                                     bytesPerRank, windowOffset, windowBytes, dataType, redOp,
                                     recvMhandle, request);
}
