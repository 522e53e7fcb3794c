/*
 * The NCCL net and CollNet plugin ABI, written from its documented layout
 * (NCCL 2.28's src/include/plugin/net/net_v{8..11}.h; see docs/nccl.md): the
 * types NCCL passes, the properties struct and the function tables of versions
 * 11, 10, 9 and 8. Every size and offset NCCL relies on is checked below, so a
 * slip in this file fails the build instead of corrupting NCCL's calls.
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
#define NCCL_NET_MAX_DEVS_PER_NIC 4
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)

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
    int trafficClass;
} ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v10_t;

typedef struct {
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    void *handle;
    size_t size;
    int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v8_t;

typedef struct {
    void *mhandle;
    void *address;
    size_t size;
} ncclNetSGE_v11_t;
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

/* ---- device properties ---- */

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

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v11_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v11_t **recvDevComm);
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
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
    ncclResult_t (*finalize)(void *ctx);
    ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);
} ncclNet_v11_t;

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

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
                            void **collComm);
    ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
    ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *collComm, void *mhandle);
    ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,
                               ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                               void *recvMhandle, void **request);
    ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
                               ncclNetSGE_v11_t *recvParts, size_t bytesPerRank,
                               size_t windowOffset, size_t windowBytes, void *sendMhandle,
                               void **request);
    ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v11_t *sendParts,
                                   void *recvData, size_t bytesPerRank, size_t windowOffset,
                                   size_t windowBytes, ncclDataType_t dataType, ncclRedOp_t redOp,
                                   void *recvMhandle, void **request);
    ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
    ncclResult_t (*test)(void *request, int *done, int *size);
    ncclResult_t (*closeColl)(void *collComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
    ncclResult_t (*finalize)(void *ctx);
} ncclCollNet_v11_t;

/* v10 and v9 share one shape: init(logger), listen without ctx, no finalize. */
#define ZC_NCCL_COLLNET_V9_V10(v)                                                                  \
    typedef struct {                                                                               \
        const char *name;                                                                          \
        ncclResult_t (*init)(ncclDebugLogger_t logFunction);                                       \
        ncclResult_t (*devices)(int *ndev);                                                        \
        ncclResult_t (*getProperties)(int dev, ncclNetProperties_##v##_t *props);                  \
        ncclResult_t (*listen)(int dev, void *handle, void **listenComm);                          \
        ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,           \
                                void **collComm);                                                  \
        ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported); \
        ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);  \
        ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,             \
                                    uint64_t offset, int fd, void **mhandle);                      \
        ncclResult_t (*deregMr)(void *collComm, void *mhandle);                                    \
        ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,   \
                                   ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,  \
                                   void *recvMhandle, void **request);                             \
        ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,                 \
                                   ncclNetSGE_##v##_t *recvParts, size_t bytesPerRank,             \
                                   size_t windowOffset, size_t windowBytes, void *sendMhandle,     \
                                   void **request);                                                \
        ncclResult_t (*ireducescatter)(void *collComm, int nSendParts,                             \
                                       ncclNetSGE_##v##_t *sendParts, void *recvData,              \
                                       size_t bytesPerRank, size_t windowOffset,                   \
                                       size_t windowBytes, ncclDataType_t dataType,                \
                                       ncclRedOp_t redOp, void *recvMhandle, void **request);      \
        ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle,                \
                               void **request);                                                    \
        ncclResult_t (*test)(void *request, int *done, int *size);                                 \
        ncclResult_t (*closeColl)(void *collComm);                                                 \
        ncclResult_t (*closeListen)(void *listenComm);                                             \
        ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_##v##_t *props);                   \
    } ncclCollNet_##v##_t
ZC_NCCL_COLLNET_V9_V10(v10);
ZC_NCCL_COLLNET_V9_V10(v9);
#undef ZC_NCCL_COLLNET_V9_V10

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
ZC_ABI_SLOTS(ncclNet_v11_t, 22);
ZC_ABI_AT(ncclNet_v11_t, regMr, 7 * sizeof(void *));
ZC_ABI_AT(ncclNet_v11_t, test, 13 * sizeof(void *));
ZC_ABI_AT(ncclNet_v11_t, finalize, 20 * sizeof(void *));
ZC_ABI_SLOTS(ncclNet_v10_t, 20);
ZC_ABI_SLOTS(ncclNet_v9_t, 20);
ZC_ABI_SLOTS(ncclNet_v8_t, 19);
ZC_ABI_AT(ncclNet_v8_t, irecvConsumed, 18 * sizeof(void *));
ZC_ABI_SLOTS(ncclCollNet_v11_t, 19);
ZC_ABI_AT(ncclCollNet_v11_t, reduceSupport, 6 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v11_t, iallreduce, 10 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v11_t, test, 14 * sizeof(void *));
ZC_ABI_AT(ncclCollNet_v11_t, finalize, 18 * sizeof(void *));
ZC_ABI_SLOTS(ncclCollNet_v10_t, 18);
ZC_ABI_SLOTS(ncclCollNet_v9_t, 18);
ZC_ABI_SLOTS(ncclCollNet_v8_t, 17);
ZC_ABI_AT(ncclCollNet_v8_t, closeListen, 16 * sizeof(void *));

#undef ZC_ABI_SLOTS
#undef ZC_ABI_AT
#undef ZC_ABI_SIZE

#endif
