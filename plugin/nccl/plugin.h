/*
 * libnccl-net-zipccl.so, internal: what the files of plugin/nccl/ share.
 *
 *   nccl_abi.h      the ABI (types, tables of net/CollNet v12..v8 and tuner
 *                   v6, v5, checked layouts)
 *   exports.c       the only exported symbols: ncclNetPlugin_v12..v8,
 *                   ncclCollNetPlugin_v12..v8 and ncclTunerPlugin_v6, _v5,
 *                   tables of the functions below
 *   setup.c         process-wide state, reference counted by the contexts:
 *                   configuration, logging through NCCL's logger, the devices
 *   nccl_types.h    NCCL types, ops and results as zipccl's (shared with preload)
 *   net.c           ncclNet v12 over UCX (point to point): context, connections'
 *                   lifetime, the design; net_int.h what the net files share
 *   net_shake.c     listen, connect, accept: the TCP handshake of worker addresses
 *   net_data.c      memory registration, isend, irecv, iflush, test, close
 *   net_compat.c    ncclNet v11, v10, v9, v8 adapters onto net.c
 *   collnet.c       ncclCollNet v12: zipccl all-reduce among the node heads,
 *                   reduce-scatter and all-gather on top of it
 *   collnet_compat.c ncclCollNet v11, v10, v9, v8 adapters onto collnet.c
 *   tuner.c         ncclTuner v6 and v5: CollNet chunks and preference
 *
 * The v12 functions are the implementation; older versions are thin
 * adapters. v11 differs only in the properties' layout; v10 and older have no
 * context (NCCL calls their init once per process), so their adapters keep
 * one process-wide context.
 */
#ifndef ZC_PLUGIN_NCCL_PLUGIN_H
#define ZC_PLUGIN_NCCL_PLUGIN_H

#include "common/config.h"
#include "plugin/nccl/nccl_abi.h"
#include "plugin/nccl/nccl_types.h"

#include <zipccl/zipccl_status.h>

#include <sys/socket.h>

#define ZC_NCCL_PLUGIN_NAME "zipccl"

/* ---- setup.c ---- */

/*
 * Takes a reference on the process-wide state, thread safe; every plugin
 * context holds one from its init until it is finalized (zc_nccl_release).
 * Routes zipccl's log through @p logger (ZIPCCL_LOG_LEVEL still filters; NULL
 * keeps stderr). The first reference loads and checks the ZIPCCL_*
 * configuration and finds the devices (ZIPCCL_NET_IFNAME); later ones share
 * them. On failure no reference is taken: ncclInvalidUsage for a bad ZIPCCL_*
 * variable (logged, naming it), ncclSystemError when no usable interface exists.
 */
ncclResult_t zc_nccl_setup(ncclDebugLogger_t logger);

/* Drops a reference of zc_nccl_setup; the last one frees the state (a later setup loads it anew).
 */
void zc_nccl_release(void);

/* The configuration zc_nccl_setup loaded (valid while a reference is held). */
const zc_config_t *zc_nccl_config(void);

/* Devices: network interfaces with an address, in a stable order. */
int zc_nccl_ndevs(void);

/* Properties of device @p dev, the same for net and CollNet (name, guid, speed ...). */
ncclResult_t zc_nccl_properties(int dev, ncclNetProperties_v12_t *props);

/* v11's layout of v12's properties (vProps: at most 4 devices, no rail or plane). */
void zc_nccl_properties_v11(const ncclNetProperties_v12_t *p, ncclNetProperties_v11_t *props);

/*
 * Address of device @p dev (an interface's IPv4 or IPv6 address, port 0) for
 * listening sockets and UCX listeners; its length in *len_p.
 */
ncclResult_t zc_nccl_device_addr(int dev, struct sockaddr_storage *addr, unsigned *len_p);

/* ---- net.c, net_shake.c, net_data.c: ncclNet v12 ---- */

ncclResult_t zc_net_init(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
ncclResult_t zc_net_devices(int *ndev);
ncclResult_t zc_net_get_properties(int dev, ncclNetProperties_v12_t *props);
ncclResult_t zc_net_listen(void *ctx, int dev, void *handle, void **listenComm);
ncclResult_t zc_net_connect(void *ctx, int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v11_t **sendDevComm);
ncclResult_t zc_net_accept(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v11_t **recvDevComm);
ncclResult_t zc_net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t zc_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                  int fd, void **mhandle);
ncclResult_t zc_net_dereg_mr(void *comm, void *mhandle);
ncclResult_t zc_net_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
ncclResult_t zc_net_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request);
ncclResult_t zc_net_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
ncclResult_t zc_net_test(void *request, int *done, int *sizes);
ncclResult_t zc_net_close_send(void *sendComm);
ncclResult_t zc_net_close_recv(void *recvComm);
ncclResult_t zc_net_close_listen(void *listenComm);
ncclResult_t zc_net_finalize(void *ctx);
ncclResult_t zc_net_set_net_attr(void *ctx, ncclNetAttr_v12_t *netAttr);

/* ---- net_compat.c: older net tables (functions identical across versions are shared) ---- */

ncclResult_t zc_net_v11_get_properties(int dev, ncclNetProperties_v11_t *props);
ncclResult_t zc_net_v10_init(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
ncclResult_t zc_net_v9_init(ncclDebugLogger_t logFunction);                      /* v9 and v8 */
ncclResult_t zc_net_v10_get_properties(int dev, ncclNetProperties_v10_t *props); /* v10, v9 */
ncclResult_t zc_net_v8_get_properties(int dev, ncclNetProperties_v8_t *props);
ncclResult_t zc_net_v10_listen(int dev, void *handle, void **listenComm); /* v10, v9, v8 */
ncclResult_t zc_net_v10_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                void **sendComm, ncclNetDeviceHandle_v10_t **sendDevComm);
ncclResult_t zc_net_v9_connect(int dev, void *handle, void **sendComm,
                               ncclNetDeviceHandle_v9_t **sendDevComm); /* v9, v8 */
ncclResult_t zc_net_v9_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                             void **request);
ncclResult_t zc_net_v9_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **request);
ncclResult_t zc_net_v8_isend(void *sendComm, void *data, int size, int tag, void *mhandle,
                             void **request);
ncclResult_t zc_net_v8_irecv(void *recvComm, int n, void **data, int *sizes, int *tags,
                             void **mhandles, void **request);

/* ---- collnet.c: ncclCollNet v12 ---- */

ncclResult_t zc_collnet_init(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
ncclResult_t zc_collnet_devices(int *ndev);
ncclResult_t zc_collnet_get_properties(int dev, ncclNetProperties_v12_t *props);
ncclResult_t zc_collnet_listen(void *ctx, int dev, void *handle, void **listenComm);
ncclResult_t zc_collnet_connect(void *handles[], int nranks, int rank, void *listenComm,
                                void **collComm);
ncclResult_t zc_collnet_reduce_support(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
ncclResult_t zc_collnet_reg_mr(void *collComm, void *data, size_t size, int type, void **mhandle);
ncclResult_t zc_collnet_reg_mr_dmabuf(void *collComm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle);
ncclResult_t zc_collnet_dereg_mr(void *collComm, void *mhandle);
ncclResult_t zc_collnet_iallreduce(void *collComm, void *sendData, void *recvData, size_t count,
                                   ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                                   void *recvMhandle, void **request);
ncclResult_t zc_collnet_iallgather(void *collComm, void *sendData, int nRecvParts,
                                   ncclNetSGE_v12_t *recvParts, size_t bytesPerRank,
                                   size_t windowOffset, size_t windowBytes, void *sendMhandle,
                                   void **request);
ncclResult_t zc_collnet_ireducescatter(void *collComm, int nSendParts, ncclNetSGE_v12_t *sendParts,
                                       void *recvData, size_t bytesPerRank, size_t windowOffset,
                                       size_t windowBytes, ncclDataType_t dataType,
                                       ncclRedOp_t redOp, void *recvMhandle, void **request);
ncclResult_t zc_collnet_iflush(void *collComm, void *data, int size, void *mhandle, void **request);
ncclResult_t zc_collnet_test(void *request, int *done, int *size);
ncclResult_t zc_collnet_close_coll(void *collComm);
ncclResult_t zc_collnet_close_listen(void *listenComm);
ncclResult_t zc_collnet_finalize(void *ctx);

/*
 * Whether this library's CollNet has a live context for communicator
 * @p commId (NCCL's commHash, the same one its tuner gets): the tuner acts only
 * then, as only then are NCCL's CollNet entries this plugin's.
 */
int zc_collnet_serves(uint64_t commId);

/* ---- collnet_compat.c ---- */

ncclResult_t zc_collnet_v11_get_properties(int dev, ncclNetProperties_v11_t *props);
ncclResult_t zc_collnet_v9_init(ncclDebugLogger_t logFunction); /* v10, v9, v8 */
ncclResult_t zc_collnet_v10_get_properties(int dev, ncclNetProperties_v10_t *props); /* v10, v9 */
ncclResult_t zc_collnet_v8_get_properties(int dev, ncclNetProperties_v8_t *props);
ncclResult_t zc_collnet_v9_listen(int dev, void *handle, void **listenComm); /* v10, v9, v8 */
ncclResult_t zc_collnet_v8_iallreduce(void *collComm, void *sendData, void *recvData, int count,
                                      ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                                      void *recvMhandle, void **request);
ncclResult_t zc_collnet_v8_iallgather(void *collComm, void *sendData, int nRecvParts,
                                      ncclNetSGE_v8_t *recvParts, size_t bytesPerRank,
                                      size_t windowOffset, size_t windowBytes, void *sendMhandle,
                                      void **request);
ncclResult_t zc_collnet_v8_ireducescatter(void *collComm, int nSendParts,
                                          ncclNetSGE_v8_t *sendParts, void *recvData,
                                          size_t bytesPerRank, size_t windowOffset,
                                          size_t windowBytes, ncclDataType_t dataType,
                                          ncclRedOp_t redOp, void *recvMhandle, void **request);

/* ---- tuner.c: ncclTuner v6 (v5 is its first four slots) ---- */

ncclResult_t zc_tuner_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                           ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t *nvlDomainInfo,
                           ncclTunerConstants_v6_t *constants);
ncclResult_t zc_tuner_get_coll_info(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                    float **collCostTable, int numAlgo, int numProto, int regBuff,
                                    int *nChannels);
ncclResult_t zc_tuner_get_chunk_size(void *ctx, ncclFunc_t collType, size_t nBytes, int algo,
                                     int proto, int nChannels, size_t *chunkSize);
ncclResult_t zc_tuner_finalize(void *ctx);

#endif
