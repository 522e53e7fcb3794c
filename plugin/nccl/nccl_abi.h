/*
 * The NCCL net, CollNet and tuner plugin ABI, written from its documented
 * layout (NCCL 2.28's src/include/plugin/net/net_v{8..11}.h, NCCL 2.30's
 * net_v12.h and tuner_v{5,6}.h; see docs/nccl.md): the types NCCL passes, the
 * properties structs and the function tables of net/CollNet versions 12, 11,
 * 10, 9 and 8 and of tuner versions 6 and 5. Every size and offset NCCL relies
 * on is checked below, so a slip in this file fails the build instead of
 * corrupting NCCL's calls. NCCL 2.28.9's installed headers have no v12 or
 * tuner v6: the layouts of those come from NCCL 2.30.7's headers, as recorded
 * in shared/reference/nccl-2.30-addendum.md (sections 2 and 5).
 *
 * Only the plugin includes this; it does not need NCCL's headers to build.
 * The preload library takes the enums (ncclResult_t, ncclDataType_t,
 * ncclRedOp_t) from here as well.
 */
#ifndef ZC_PLUGIN_NCCL_ABI_H
#define ZC_PLUGIN_NCCL_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- results, types, ops (nccl.h) ---- */

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff /* values from ncclNumOps up are user-created ops */
} ncclRedOp_t;

/* ---- logging (nccl_common.h) ---- */

typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

#define NCCL_INIT 0x1UL
#define NCCL_COLL 0x2UL
#define NCCL_P2P 0x4UL
#define NCCL_NET 0x10UL
#define NCCL_ENV 0x80UL
#define NCCL_ALL (~0UL)

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle,
                                               int64_t pluginId, void *extData);

/* ---- constants (nccl_net.h, net_device.h) ---- */

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_MAX_NET_SIZE_BYTES (1ULL << 40)
#define NCCL_NET_MAX_DEVS_PER_NIC 4     /* v11 and older */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8 /* v12: fused NICs of up to 8 devices */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ID_UNDEF (-1) /* v12 railId/planeId: unknown */

typedef enum {
    NCCL_NET_DEVICE_HOST = 0,
    NCCL_NET_DEVICE_UNPACK = 1,
    NCCL_NET_DEVICE_GIN_PROXY = 2,
    NCCL_NET_DEVICE_GIN_GDAKI = 3
} ncclNetDeviceType;

/* ---- small structs (identical v8..v11 unless named) ---- */

typedef struct {
    int ndevs;
    int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v11_t;
typedef ncclNetVDeviceProps_v11_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v11_t ncclNetVDeviceProps_v9_t;

typedef struct {
    int ndevs;
    int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

/* v12's config, device handle, SGE and attributes are v11's, byte for byte (2.30's net_v12.h) */
typedef struct {
    int trafficClass;
} ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v12_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v10_t;

typedef struct {
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    void *handle;
    size_t size;
    int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v12_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v8_t;

typedef struct {
    void *mhandle;
    void *address;
    size_t size;
} ncclNetSGE_v11_t;
typedef ncclNetSGE_v11_t ncclNetSGE_v12_t;
typedef ncclNetSGE_v11_t ncclNetSGE_v10_t;
typedef ncclNetSGE_v11_t ncclNetSGE_v9_t;

typedef struct {
    void *mhandle;
    void *address;
    uint32_t size;
} ncclNetSGE_v8_t;

typedef struct {
    int32_t maxConcurrentPeers;
    int32_t minConcurrentPeers;
    int32_t maxFlowsPerPeer;
    int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
    ncclNetCommAttr_v11_t sendCommAttr;
    ncclNetCommAttr_v11_t recvCommAttr;
    uint32_t op;
    uint32_t algo;
    uint32_t proto;
} ncclNetAttr_v11_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

/* ncclNetAttr_v11_t's op, algo and proto are bit masks of these; all ones: undefined */
#define NCCL_NET_ATTR_UNDEF 0xffffffffu

/* ---- device properties ---- */

/* v12: vProps holds 8 devices (so the members after it moved), railId and planeId appended */
typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v12_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
    int maxMultiRequestSize;
    int16_t railId;  /* NCCL_NET_ID_UNDEF, or the rail NCCL may pair NICs by */
    int16_t planeId; /* NCCL_NET_ID_UNDEF, or the network plane */
} ncclNetProperties_v12_t;

typedef struct {
    char *name;      /* stable; the same for net and CollNet device i (NCCL's topology key) */
    char *pciPath;   /* NULL: attached to the first CPU */
    uint64_t guid;   /* distinct per device */
    int ptrSupport;  /* NCCL_PTR_* */
    int regIsGlobal; /* registration cache hint */
    int forceFlush;
    int speed; /* Mbit/s */
    int port;
    float latency; /* us; 0 = default */
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v11_t vProps;
    size_t maxP2pBytes;      /* in (0, NCCL_MAX_NET_SIZE_BYTES] */
    size_t maxCollBytes;     /* same */
    int maxMultiRequestSize; /* v11 only */
} ncclNetProperties_v11_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v10_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
} ncclNetProperties_v10_t;
typedef ncclNetProperties_v10_t ncclNetProperties_v9_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
} ncclNetProperties_v8_t;

/* ---- ncclNet (point to point) ---- */

/*
 * v12 and v11 share one shape (2.30 uses v12 directly): only the properties
 * and virtual devices differ, in layout (8 fused devices, railId, planeId).
 */
#define ZC_NCCL_NET_V11_V12(v)                                                                     \
    typedef struct {                                                                               \
        const char *name;                                                                          \
        ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,         \
                             ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);  \
        ncclResult_t (*devices)(int *ndev);                                                        \
        ncclResult_t (*getProperties)(int dev, ncclNetProperties_##v##_t *props);                  \
        ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);               \
        ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,                 \
                                ncclNetDeviceHandle_v11_t **sendDevComm);                          \
        ncclResult_t (*accept)(void *listenComm, void **recvComm,                                  \
                               ncclNetDeviceHandle_v11_t **recvDevComm);                           \
        ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);      \
        ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,                 \
                                    uint64_t offset, int fd, void **mhandle);                      \
        ncclResult_t (*deregMr)(void *comm, void *mhandle);                                        \
        ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,     \
                              void *phandle, void **request);                                      \
        ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,        \
                              void **mhandles, void **phandles, void **request);                   \
        ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,    \
                               void **request);                                                    \
        ncclResult_t (*test)(void *request, int *done, int *sizes);                                \
        ncclResult_t (*closeSend)(void *sendComm);                                                 \
        ncclResult_t (*closeRecv)(void *recvComm);                                                 \
        ncclResult_t (*closeListen)(void *listenComm);                                             \
        ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);               \
        ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);                       \
        ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_##v##_t *props);                   \
        ncclResult_t (*finalize)(void *ctx);                                                       \
        ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);                         \
    } ncclNet_##v##_t
ZC_NCCL_NET_V11_V12(v12);
ZC_NCCL_NET_V11_V12(v11);
#undef ZC_NCCL_NET_V11_V12

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v10_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v10_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v9_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v9_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v8_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v8_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                          void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                          void **mhandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

/* ---- ncclCollNet ---- */

/* The CollNet slots from connect to closeListen, alike from v9 to v12 (SGEs in v##'s type). */
#define ZC_NCCL_COLLNET_SLOTS(v)                                                                   \
    ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,               \
                            void **collComm);                                                      \
    ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);     \
    ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);      \
    ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,                 \
                                uint64_t offset, int fd, void **mhandle);                          \
    ncclResult_t (*deregMr)(void *collComm, void *mhandle);                                        \
    ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,       \
                               ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,      \
                               void *recvMhandle, void **request);                                 \
    ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,                     \
                               ncclNetSGE_##v##_t *recvParts, size_t bytesPerRank,                 \
                               size_t windowOffset, size_t windowBytes, void *sendMhandle,         \
                               void **request);                                                    \
    ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_##v##_t *sendParts,  \
                                   void *recvData, size_t bytesPerRank, size_t windowOffset,       \
                                   size_t windowBytes, ncclDataType_t dataType, ncclRedOp_t redOp, \
                                   void *recvMhandle, void **request);                             \
    ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);   \
    ncclResult_t (*test)(void *request, int *done, int *size);                                     \
    ncclResult_t (*closeColl)(void *collComm);                                                     \
    ncclResult_t (*closeListen)(void *listenComm);

/* v12 and v11: one shape, the properties and virtual devices in their version's layout. */
#define ZC_NCCL_COLLNET_V11_V12(v)                                                                 \
    typedef struct {                                                                               \
        const char *name;                                                                          \
        ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);          \
        ncclResult_t (*devices)(int *ndev);                                                        \
        ncclResult_t (*getProperties)(int dev, ncclNetProperties_##v##_t *props);                  \
        ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);               \
        ZC_NCCL_COLLNET_SLOTS(v)                                                                   \
        ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_##v##_t *props);                   \
        ncclResult_t (*finalize)(void *ctx);                                                       \
    } ncclCollNet_##v##_t
ZC_NCCL_COLLNET_V11_V12(v12);
ZC_NCCL_COLLNET_V11_V12(v11);
#undef ZC_NCCL_COLLNET_V11_V12

/* v10 and v9 share one shape: init(logger), listen without ctx, no finalize. */
#define ZC_NCCL_COLLNET_V9_V10(v)                                                                  \
    typedef struct {                                                                               \
        const char *name;                                                                          \
        ncclResult_t (*init)(ncclDebugLogger_t logFunction);                                       \
        ncclResult_t (*devices)(int *ndev);                                                        \
        ncclResult_t (*getProperties)(int dev, ncclNetProperties_##v##_t *props);                  \
        ncclResult_t (*listen)(int dev, void *handle, void **listenComm);                          \
        ZC_NCCL_COLLNET_SLOTS(v)                                                                   \
        ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_##v##_t *props);                   \
    } ncclCollNet_##v##_t
ZC_NCCL_COLLNET_V9_V10(v10);
ZC_NCCL_COLLNET_V9_V10(v9);
#undef ZC_NCCL_COLLNET_V9_V10
#undef ZC_NCCL_COLLNET_SLOTS

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
                            void **collComm);
    ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
    ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *collComm, void *mhandle);
    ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, int count,
                               ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                               void *recvMhandle, void **request);
    ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
                               ncclNetSGE_v8_t *recvParts, size_t bytesPerRank, size_t windowOffset,
                               size_t windowBytes, void *sendMhandle, void **request);
    ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v8_t *sendParts,
                                   void *recvData, size_t bytesPerRank, size_t windowOffset,
                                   size_t windowBytes, ncclDataType_t dataType, ncclRedOp_t redOp,
                                   void *recvMhandle, void **request);
    ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
    ncclResult_t (*test)(void *request, int *done, int *size);
    ncclResult_t (*closeColl)(void *collComm);
    ncclResult_t (*closeListen)(void *listenComm);
} ncclCollNet_v8_t;

/* ---- the tuner (2.28.9: v5; 2.30: v6, which adds getChunkSize) ---- */

/* The collectives NCCL tunes (nccl_common.h; later values differ between versions). */
typedef enum {
    ncclFuncBroadcast = 0,
    ncclFuncReduce = 1,
    ncclFuncAllGather = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce = 4
} ncclFunc_t;

/* Rows and columns of the cost table and indices of the constants (nccl_tuner.h) */
#define NCCL_NUM_ALGORITHMS 7
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_PROTOCOLS 3
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_NUM_HW_LINKS 3
#define NCCL_NUM_COMPCAPS 4
#define NCCL_ALGO_PROTO_IGNORE (-1.0f) /* a cost-table entry NCCL cannot use */

typedef struct {
    int nNvlDomains;
    int minRanksPerNvlDomain;
    int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;

typedef struct {
    double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    double hwLatencies[NCCL_NUM_HW_LINKS][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    double llMaxBws[NCCL_NUM_COMPCAPS][3];
    double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS][3];
    double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS][3];
    double perChMaxTreeBws[NCCL_NUM_COMPCAPS][3];
    double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS][3];
} ncclTunerConstants_v5_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;

/*
 * collCostTable is float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS] passed as
 * float **: cast it back, never index it as an array of pointers.
 */
#define ZC_NCCL_TUNER_SLOTS(v)                                                                     \
    const char *name;                                                                              \
    ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,                \
                         ncclDebugLogger_t logFunction, ncclNvlDomainInfo_##v##_t *nvlDomainInfo,  \
                         ncclTunerConstants_##v##_t *constants);                                   \
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes, int numPipeOps, \
                                float **collCostTable, int numAlgo, int numProto, int regBuff,     \
                                int *nChannels);                                                   \
    ncclResult_t (*finalize)(void *context)

typedef struct {
    ZC_NCCL_TUNER_SLOTS(v6);
    /* optional: *chunkSize holds NCCL's choice; NCCL clamps and rounds what comes back */
    ncclResult_t (*getChunkSize)(void *context, ncclFunc_t collType, size_t nBytes, int algo,
                                 int proto, int nChannels, size_t *chunkSize);
} ncclTuner_v6_t;

typedef struct {
    ZC_NCCL_TUNER_SLOTS(v5);
} ncclTuner_v5_t;
#undef ZC_NCCL_TUNER_SLOTS

/* ---- the layout NCCL compiled against (x86_64 / aarch64 LP64) ---- */

#define ZC_ABI_SIZE(t, n) _Static_assert(sizeof(t) == (n), #t " must be " #n " bytes")
#define ZC_ABI_AT(t, f, n) _Static_assert(offsetof(t, f) == (n), #t "." #f " must be at " #n)

ZC_ABI_SIZE(ncclResult_t, 4);
ZC_ABI_SIZE(ncclDataType_t, 4);
ZC_ABI_SIZE(ncclRedOp_t, 4);
ZC_ABI_SIZE(ncclNetDeviceType, 4);
ZC_ABI_SIZE(ncclNetVDeviceProps_v11_t, 20);
ZC_ABI_SIZE(ncclNetCommConfig_v11_t, 4);
ZC_ABI_SIZE(ncclNetDeviceHandle_v11_t, 32);
ZC_ABI_AT(ncclNetDeviceHandle_v11_t, handle, 8);
ZC_ABI_AT(ncclNetDeviceHandle_v11_t, size, 16);
ZC_ABI_AT(ncclNetDeviceHandle_v11_t, needsProxyProgress, 24);
ZC_ABI_SIZE(ncclNetSGE_v11_t, 24);
ZC_ABI_SIZE(ncclNetSGE_v8_t, 24);
ZC_ABI_SIZE(ncclNetCommAttr_v11_t, 16);
ZC_ABI_SIZE(ncclNetAttr_v11_t, 44);

ZC_ABI_SIZE(ncclNetProperties_v12_t, 128);
ZC_ABI_AT(ncclNetProperties_v12_t, vProps, 64);
ZC_ABI_AT(ncclNetProperties_v12_t, maxP2pBytes, 104);
ZC_ABI_AT(ncclNetProperties_v12_t, maxCollBytes, 112);
ZC_ABI_AT(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
ZC_ABI_AT(ncclNetProperties_v12_t, railId, 124);
ZC_ABI_AT(ncclNetProperties_v12_t, planeId, 126);
ZC_ABI_SIZE(ncclNetVDeviceProps_v12_t, 36);
ZC_ABI_SIZE(ncclNetProperties_v11_t, 112);
ZC_ABI_AT(ncclNetProperties_v11_t, pciPath, 8);
ZC_ABI_AT(ncclNetProperties_v11_t, guid, 16);
ZC_ABI_AT(ncclNetProperties_v11_t, ptrSupport, 24);
ZC_ABI_AT(ncclNetProperties_v11_t, regIsGlobal, 28);
ZC_ABI_AT(ncclNetProperties_v11_t, forceFlush, 32);
ZC_ABI_AT(ncclNetProperties_v11_t, speed, 36);
ZC_ABI_AT(ncclNetProperties_v11_t, port, 40);
ZC_ABI_AT(ncclNetProperties_v11_t, latency, 44);
ZC_ABI_AT(ncclNetProperties_v11_t, maxComms, 48);
ZC_ABI_AT(ncclNetProperties_v11_t, maxRecvs, 52);
ZC_ABI_AT(ncclNetProperties_v11_t, netDeviceType, 56);
ZC_ABI_AT(ncclNetProperties_v11_t, netDeviceVersion, 60);
ZC_ABI_AT(ncclNetProperties_v11_t, vProps, 64);
ZC_ABI_AT(ncclNetProperties_v11_t, maxP2pBytes, 88);
ZC_ABI_AT(ncclNetProperties_v11_t, maxCollBytes, 96);
ZC_ABI_AT(ncclNetProperties_v11_t, maxMultiRequestSize, 104);
ZC_ABI_SIZE(ncclNetProperties_v10_t, 104);
ZC_ABI_AT(ncclNetProperties_v10_t, maxCollBytes, 96);

ZC_ABI_SIZE(ncclNetProperties_v8_t, 64);
ZC_ABI_AT(ncclNetProperties_v8_t, speed, 32);
ZC_ABI_AT(ncclNetProperties_v8_t, latency, 40);
ZC_ABI_AT(ncclNetProperties_v8_t, maxRecvs, 48);
ZC_ABI_AT(ncclNetProperties_v8_t, netDeviceType, 52);
ZC_ABI_AT(ncclNetProperties_v8_t, netDeviceVersion, 56);

/* function tables: one pointer per slot, in NCCL's order */
#define ZC_ABI_SLOTS(t, n) ZC_ABI_SIZE(t, (n) * sizeof(void *))
ZC_ABI_SLOTS(ncclNet_v12_t, 22);
ZC_ABI_AT(ncclNet_v12_t, getProperties, 3 * sizeof(void *));
ZC_ABI_AT(ncclNet_v12_t, makeVDevice, 19 * sizeof(void *));
ZC_ABI_AT(ncclNet_v12_t, finalize, 20 * sizeof(void *));
ZC_ABI_AT(ncclNet_v12_t, setNetAttr, 21 * sizeof(void *));
ZC_ABI_SLOTS(ncclNet_v11_t, 22);
ZC_ABI_AT(ncclNet_v11_t, regMr, 7 * sizeof(void *));
ZC_ABI_AT(ncclNet_v11_t, test, 13 * sizeof(void *));
ZC_ABI_AT(ncclNet_v11_t, finalize, 20 * sizeof(void *));
ZC_ABI_SLOTS(ncclNet_v10_t, 20);
ZC_ABI_SLOTS(ncclNet_v9_t, 20);
ZC_ABI_SLOTS(ncclNet_v8_t, 19);
ZC_ABI_AT(ncclNet_v8_t, irecvConsumed, 18 * sizeof(void *));
ZC_ABI_SLOTS(ncclCollNet_v12_t, 19);
ZC_ABI_AT(ncclCollNet_v12_t, iallgather, 11 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v12_t, ireducescatter, 12 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v12_t, finalize, 18 * sizeof(void *));
ZC_ABI_SLOTS(ncclCollNet_v11_t, 19);
ZC_ABI_AT(ncclCollNet_v11_t, reduceSupport, 6 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v11_t, iallreduce, 10 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v11_t, test, 14 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v11_t, finalize, 18 * sizeof(void *));
ZC_ABI_SLOTS(ncclCollNet_v10_t, 18);
ZC_ABI_SLOTS(ncclCollNet_v9_t, 18);
ZC_ABI_SLOTS(ncclCollNet_v8_t, 17);
ZC_ABI_AT(ncclCollNet_v8_t, closeListen, 16 * sizeof(void *));
ZC_ABI_SIZE(ncclFunc_t, 4);
ZC_ABI_SIZE(ncclNvlDomainInfo_v5_t, 12);
ZC_ABI_SIZE(ncclTunerConstants_v5_t, 1152);
ZC_ABI_AT(ncclTunerConstants_v5_t, hwLatencies, 168);
ZC_ABI_AT(ncclTunerConstants_v5_t, llMaxBws, 672);
ZC_ABI_AT(ncclTunerConstants_v5_t, perChMaxNVLSTreeBws, 1056);
ZC_ABI_SLOTS(ncclTuner_v6_t, 5);
ZC_ABI_AT(ncclTuner_v6_t, getChunkSize, 4 * sizeof(void *));
ZC_ABI_SLOTS(ncclTuner_v5_t, 4);

#undef ZC_ABI_SLOTS
#undef ZC_ABI_AT
#undef ZC_ABI_SIZE

#endif
