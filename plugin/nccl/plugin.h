/*
 * libnccl-net-zipccl.so, internal: what the files of plugin/nccl/ share.
 *
 *   nccl_abi.h      the ABI (types, tables of v11..v8, checked layouts)
 *   exports.c       the only exported symbols: ncclNetPlugin_v11..v8 and
 *                   ncclCollNetPlugin_v11..v8, tables of the functions below
 *   setup.c         once per process: configuration, logging through NCCL's
 *                   logger, the device list
 *   nccl_types.h    NCCL types, ops and results as zipccl's (shared with preload)
 *   net.c           ncclNet v11 over UCX (point to point): context, connections'
 *                   lifetime, the design; net_int.h what the net files share
 *   net_shake.c     listen, connect, accept: the TCP handshake of worker addresses
 *   net_data.c      memory registration, isend, irecv, iflush, test, close
 *   net_compat.c    ncclNet v10, v9, v8 adapters onto net.c
 *   collnet.c       ncclCollNet v11: zipccl all-reduce among the node heads
 *   collnet_compat.c ncclCollNet v10, v9, v8 adapters onto collnet.c
 *
 * The v11 functions are the implementation; older versions are thin
 * adapters (NCCL calls their init once per process, without a context, so
 * the adapters keep one process-wide context).
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
 * Once per process, whichever of net or CollNet init comes first, and thread
 * safe: routes zipccl's log through @p logger (ZIPCCL_LOG_LEVEL still
 * filters; NULL keeps stderr), loads and checks the ZIPCCL_* configuration,
 * finds the devices (ZIPCCL_NET_IFNAME). Later calls return the first call's
 * result. ncclInvalidUsage for a bad ZIPCCL_* variable (logged, naming it),
 * ncclSystemError when no usable interface exists.
 */
ncclResult_t zc_nccl_setup(ncclDebugLogger_t logger);

/* The configuration zc_nccl_setup loaded (valid after it succeeded). */
const zc_config_t *zc_nccl_config(void);

/* Devices: network interfaces with an address, in a stable order. */
int zc_nccl_ndevs(void);

/* Properties of device @p dev, the same for net and CollNet (name, guid, speed ...). */
ncclResult_t zc_nccl_properties(int dev, ncclNetProperties_v11_t *props);

/*
 * Address of device @p dev (an interface's IPv4 or IPv6 address, port 0) for
 * listening sockets and UCX listeners; its length in *len_p.
 */
ncclResult_t zc_nccl_device_addr(int dev, struct sockaddr_storage *addr, unsigned *len_p);

/* ---- net.c, net_shake.c, net_data.c: ncclNet v11 ---- */

ncclResult_t zc_net_init(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
ncclResult_t zc_net_devices(int *ndev);
ncclResult_t zc_net_get_properties(int dev, ncclNetProperties_v11_t *props);
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

/* ---- net_compat.c: older net tables (functions identical across versions are shared) ---- */

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

/* ---- collnet.c: ncclCollNet v11 ---- */

ncclResult_t zc_collnet_init(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
ncclResult_t zc_collnet_devices(int *ndev);
ncclResult_t zc_collnet_get_properties(int dev, ncclNetProperties_v11_t *props);
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
ncclResult_t zc_collnet_iflush(void *collComm, void *data, int size, void *mhandle, void **request);
ncclResult_t zc_collnet_test(void *request, int *done, int *size);
ncclResult_t zc_collnet_close_coll(void *collComm);
ncclResult_t zc_collnet_close_listen(void *listenComm);
ncclResult_t zc_collnet_finalize(void *ctx);

/* ---- collnet_compat.c ---- */

ncclResult_t zc_collnet_v9_init(ncclDebugLogger_t logFunction); /* v10, v9, v8 */
ncclResult_t zc_collnet_v10_get_properties(int dev, ncclNetProperties_v10_t *props); /* v10, v9 */
ncclResult_t zc_collnet_v8_get_properties(int dev, ncclNetProperties_v8_t *props);
ncclResult_t zc_collnet_v9_listen(int dev, void *handle, void **listenComm); /* v10, v9, v8 */
ncclResult_t zc_collnet_v8_iallreduce(void *collComm, void *sendData, void *recvData, int count,
                                      ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                                      void *recvMhandle, void **request);

#endif
