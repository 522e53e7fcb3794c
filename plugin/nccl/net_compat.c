/*
 * ncclNet v11, v10, v9 and v8 onto the v12 implementation (net.c).
 *
 * v11 has v12's functions but not its properties: vProps holds 4 devices
 * (8 in v12), so every member after it sits 16 bytes earlier, and there is no
 * railId/planeId; a v12 struct must never be written through a v11 pointer.
 * Only getProperties needs an adapter (makeVDevice is NULL in both).
 *
 * These versions have no plugin context: NCCL's adapter calls their init
 * once per process (refcounted on its side) and listen/connect without a
 * context, so the adapters keep one process-wide v12 context, created by the
 * first init and kept until the process exits (these versions have no
 * finalize). v9 and v8 lack the phandle arguments; v8 has int sizes and no
 * maxP2pBytes: NCCL's own v8 adapter then never asks for more than 1 GiB per
 * message (its MAX_NET_SIZE), so larger or negative sizes are refused.
 */
#include "common/log.h"
#include "plugin/nccl/plugin.h"

#include <pthread.h>
#include <string.h>

#define ZC_NET_V8_MAX_BYTES (1 << 30)

static pthread_mutex_t compat_lock = PTHREAD_MUTEX_INITIALIZER;
static void *compat_ctx;

static void *compat_context(void)
{
    void *ctx;

    pthread_mutex_lock(&compat_lock);
    ctx = compat_ctx;
    pthread_mutex_unlock(&compat_lock);
    return ctx;
}

ncclResult_t zc_net_v10_init(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction)
{
    ncclResult_t result = ncclSuccess;

    pthread_mutex_lock(&compat_lock);
    if (!compat_ctx) {
        ncclNetCommConfig_v12_t config = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
        result = zc_net_init(&compat_ctx, 0, &config, logFunction, profFunction);
    }
    pthread_mutex_unlock(&compat_lock);
    return result;
}

ncclResult_t zc_net_v9_init(ncclDebugLogger_t logFunction)
{
    return zc_net_v10_init(logFunction, NULL);
}

/*
 * The members of v8's properties, which v10 and v11 keep under the same names
 * and types; each adapter copies them from its source p into its props.
 */
/* clang-format off */
#define ZC_NET_PROPS_V8_MEMBERS(X)                                                                 \
    X(name) X(pciPath) X(guid) X(ptrSupport) X(regIsGlobal) X(speed) X(port) X(latency)            \
    X(maxComms) X(maxRecvs) X(netDeviceType) X(netDeviceVersion)
/* clang-format on */
#define ZC_PROPS_COPY(member) props->member = p.member;

void zc_nccl_properties_v11(const ncclNetProperties_v12_t *p12, ncclNetProperties_v11_t *props)
{
    const ncclNetProperties_v12_t p = *p12;

    memset(props, 0, sizeof(*props));
    ZC_NET_PROPS_V8_MEMBERS(ZC_PROPS_COPY)
    props->forceFlush = p.forceFlush;
    props->vProps.ndevs =
        p.vProps.ndevs < NCCL_NET_MAX_DEVS_PER_NIC ? p.vProps.ndevs : NCCL_NET_MAX_DEVS_PER_NIC;
    memcpy(props->vProps.devs, p.vProps.devs, sizeof(props->vProps.devs));
    props->maxP2pBytes = p.maxP2pBytes;
    props->maxCollBytes = p.maxCollBytes;
    props->maxMultiRequestSize = p.maxMultiRequestSize;
}

ncclResult_t zc_net_v11_get_properties(int dev, ncclNetProperties_v11_t *props)
{
    ncclNetProperties_v12_t p;

    ncclResult_t result = props ? zc_net_get_properties(dev, &p) : ncclInternalError;
    if (result == ncclSuccess)
        zc_nccl_properties_v11(&p, props);
    return result;
}

ncclResult_t zc_net_v10_get_properties(int dev, ncclNetProperties_v10_t *props)
{
    ncclNetProperties_v11_t p;

    ncclResult_t result = props ? zc_net_v11_get_properties(dev, &p) : ncclInternalError;
    if (result != ncclSuccess)
        return result;
    ZC_NET_PROPS_V8_MEMBERS(ZC_PROPS_COPY)
    props->forceFlush = p.forceFlush;
    props->vProps = p.vProps;
    props->maxP2pBytes = p.maxP2pBytes;
    props->maxCollBytes = p.maxCollBytes;
    return ncclSuccess;
}

/* v10's, less the members v8 lacks. */
ncclResult_t zc_net_v8_get_properties(int dev, ncclNetProperties_v8_t *props)
{
    ncclNetProperties_v10_t p;

    ncclResult_t result = props ? zc_net_v10_get_properties(dev, &p) : ncclInternalError;
    if (result == ncclSuccess) {
        ZC_NET_PROPS_V8_MEMBERS(ZC_PROPS_COPY)
    }
    return result;
}

ncclResult_t zc_net_v10_listen(int dev, void *handle, void **listenComm)
{
    void *ctx = compat_context();

    if (!ctx)
        return ncclInternalError; /* init did not succeed */
    return zc_net_listen(ctx, dev, handle, listenComm);
}

ncclResult_t zc_net_v10_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                void **sendComm, ncclNetDeviceHandle_v10_t **sendDevComm)
{
    void *ctx = compat_context();

    if (!ctx)
        return ncclInternalError;
    /* the traffic class has no UCX equivalent here: UCX_IB_TRAFFIC_CLASS sets it */
    return zc_net_connect(ctx, dev, handle, sendComm, sendDevComm);
}

ncclResult_t zc_net_v9_connect(int dev, void *handle, void **sendComm,
                               ncclNetDeviceHandle_v9_t **sendDevComm)
{
    return zc_net_v10_connect(dev, NULL, handle, sendComm, sendDevComm);
}

ncclResult_t zc_net_v9_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                             void **request)
{
    return zc_net_isend(sendComm, data, size, tag, mhandle, NULL, request);
}

ncclResult_t zc_net_v9_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **request)
{
    return zc_net_irecv(recvComm, n, data, sizes, tags, mhandles, NULL, request);
}

ncclResult_t zc_net_v8_isend(void *sendComm, void *data, int size, int tag, void *mhandle,
                             void **request)
{
    if (size < 0 || size > ZC_NET_V8_MAX_BYTES) {
        ZC_ERROR("net: v8 send of %d bytes; this ABI carries 0..%d", size, ZC_NET_V8_MAX_BYTES);
        return ncclInternalError;
    }
    return zc_net_isend(sendComm, data, (size_t)size, tag, mhandle, NULL, request);
}

ncclResult_t zc_net_v8_irecv(void *recvComm, int n, void **data, int *sizes, int *tags,
                             void **mhandles, void **request)
{
    size_t sizes_v11[1];

    if (!sizes)
        return ncclInternalError;
    if (n != 1) {
        ZC_ERROR("net: irecv of %d buffers; the plugin announced maxRecvs 1", n);
        return ncclInternalError;
    }
    if (sizes[0] < 0 || sizes[0] > ZC_NET_V8_MAX_BYTES) {
        ZC_ERROR("net: v8 receive of %d bytes; this ABI carries 0..%d", sizes[0],
                 ZC_NET_V8_MAX_BYTES);
        return ncclInternalError;
    }
    sizes_v11[0] = (size_t)sizes[0];
    return zc_net_irecv(recvComm, n, data, sizes_v11, tags, mhandles, NULL, request);
}
