/*
 * Every symbol libnccl-net-zipccl.so exports (nccl-net.map says the same and
 * tests/plugin checks nothing else leaks): the net and CollNet tables NCCL
 * looks up with dlsym, newest first, and the tuner tables it looks up in the
 * net plugin's library. Version 12 points at the implementation; 11, 10, 9
 * and 8 at the adapters where a signature or a layout differs.
 *
 * NULL slots: only where NCCL reads the table itself and checks for NULL.
 * NCCL 2.30 uses v12 directly (makeVDevice, getDeviceMr, irecvConsumed and
 * CollNet iallgather may be NULL there: see collnet.c for why iallgather is);
 * it wraps v11 and older in adapters that install iallgather/ireducescatter
 * wrappers whatever the plugin's slots hold (addendum section 6.4), so those
 * tables carry both.
 */
#include "plugin/nccl/plugin.h"

#define ZC_NCCL_EXPORT __attribute__((visibility("default")))

/* v12 and v11: the same functions, but for the properties' layout */
#define ZC_NET_V11_V12(get_properties)                                                             \
    {                                                                                              \
        .name = ZC_NCCL_PLUGIN_NAME, .init = zc_net_init, .devices = zc_net_devices,               \
        .getProperties = get_properties, .listen = zc_net_listen, .connect = zc_net_connect,       \
        .accept = zc_net_accept, .regMr = zc_net_reg_mr, .regMrDmaBuf = zc_net_reg_mr_dmabuf,      \
        .deregMr = zc_net_dereg_mr, .isend = zc_net_isend, .irecv = zc_net_irecv,                  \
        .iflush = zc_net_iflush, .test = zc_net_test, .closeSend = zc_net_close_send,              \
        .closeRecv = zc_net_close_recv, .closeListen = zc_net_close_listen, .getDeviceMr = NULL,   \
        .irecvConsumed = NULL, .makeVDevice = NULL, .finalize = zc_net_finalize,                   \
        .setNetAttr = zc_net_set_net_attr,                                                         \
    }

ZC_NCCL_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = ZC_NET_V11_V12(zc_net_get_properties);
ZC_NCCL_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = ZC_NET_V11_V12(zc_net_v11_get_properties);

ZC_NCCL_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_net_v10_init,
    .devices = zc_net_devices,
    .getProperties = zc_net_v10_get_properties,
    .listen = zc_net_v10_listen,
    .connect = zc_net_v10_connect,
    .accept = zc_net_accept,
    .regMr = zc_net_reg_mr,
    .regMrDmaBuf = zc_net_reg_mr_dmabuf,
    .deregMr = zc_net_dereg_mr,
    .isend = zc_net_isend,
    .irecv = zc_net_irecv,
    .iflush = zc_net_iflush,
    .test = zc_net_test,
    .closeSend = zc_net_close_send,
    .closeRecv = zc_net_close_recv,
    .closeListen = zc_net_close_listen,
};

ZC_NCCL_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_net_v9_init,
    .devices = zc_net_devices,
    .getProperties = zc_net_v10_get_properties,
    .listen = zc_net_v10_listen,
    .connect = zc_net_v9_connect,
    .accept = zc_net_accept,
    .regMr = zc_net_reg_mr,
    .regMrDmaBuf = zc_net_reg_mr_dmabuf,
    .deregMr = zc_net_dereg_mr,
    .isend = zc_net_v9_isend,
    .irecv = zc_net_v9_irecv,
    .iflush = zc_net_iflush,
    .test = zc_net_test,
    .closeSend = zc_net_close_send,
    .closeRecv = zc_net_close_recv,
    .closeListen = zc_net_close_listen,
};

ZC_NCCL_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_net_v9_init,
    .devices = zc_net_devices,
    .getProperties = zc_net_v8_get_properties,
    .listen = zc_net_v10_listen,
    .connect = zc_net_v9_connect,
    .accept = zc_net_accept,
    .regMr = zc_net_reg_mr,
    .regMrDmaBuf = zc_net_reg_mr_dmabuf,
    .deregMr = zc_net_dereg_mr,
    .isend = zc_net_v8_isend,
    .irecv = zc_net_v8_irecv,
    .iflush = zc_net_iflush,
    .test = zc_net_test,
    .closeSend = zc_net_close_send,
    .closeRecv = zc_net_close_recv,
    .closeListen = zc_net_close_listen,
};

/*
 * v12 and v11: the same functions, but for the properties' layout and
 * iallgather: NULL in v12, which NCCL 2.30 reads itself (a raw all-gather
 * through the heads loses to NCCL's ring: collnet.c), set in v11, which 2.30
 * wraps without a NULL check.
 */
#define ZC_COLLNET_V11_V12(get_properties, all_gather)                                             \
    {                                                                                              \
        .name = ZC_NCCL_PLUGIN_NAME, .init = zc_collnet_init, .devices = zc_collnet_devices,       \
        .getProperties = get_properties, .listen = zc_collnet_listen,                              \
        .connect = zc_collnet_connect, .reduceSupport = zc_collnet_reduce_support,                 \
        .regMr = zc_collnet_reg_mr, .regMrDmaBuf = zc_collnet_reg_mr_dmabuf,                       \
        .deregMr = zc_collnet_dereg_mr, .iallreduce = zc_collnet_iallreduce,                       \
        .iallgather = all_gather, .ireducescatter = zc_collnet_ireducescatter,                     \
        .iflush = zc_collnet_iflush, .test = zc_collnet_test, .closeColl = zc_collnet_close_coll,  \
        .closeListen = zc_collnet_close_listen, .makeVDevice = NULL,                               \
        .finalize = zc_collnet_finalize,                                                           \
    }

ZC_NCCL_EXPORT const ncclCollNet_v12_t ncclCollNetPlugin_v12 =
    ZC_COLLNET_V11_V12(zc_collnet_get_properties, NULL);
ZC_NCCL_EXPORT const ncclCollNet_v11_t ncclCollNetPlugin_v11 =
    ZC_COLLNET_V11_V12(zc_collnet_v11_get_properties, zc_collnet_iallgather);

ZC_NCCL_EXPORT const ncclCollNet_v10_t ncclCollNetPlugin_v10 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_collnet_v9_init,
    .devices = zc_collnet_devices,
    .getProperties = zc_collnet_v10_get_properties,
    .listen = zc_collnet_v9_listen,
    .connect = zc_collnet_connect,
    .reduceSupport = zc_collnet_reduce_support,
    .regMr = zc_collnet_reg_mr,
    .regMrDmaBuf = zc_collnet_reg_mr_dmabuf,
    .deregMr = zc_collnet_dereg_mr,
    .iallreduce = zc_collnet_iallreduce,
    .iallgather = zc_collnet_iallgather,
    .ireducescatter = zc_collnet_ireducescatter,
    .iflush = zc_collnet_iflush,
    .test = zc_collnet_test,
    .closeColl = zc_collnet_close_coll,
    .closeListen = zc_collnet_close_listen,
};

ZC_NCCL_EXPORT const ncclCollNet_v9_t ncclCollNetPlugin_v9 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_collnet_v9_init,
    .devices = zc_collnet_devices,
    .getProperties = zc_collnet_v10_get_properties,
    .listen = zc_collnet_v9_listen,
    .connect = zc_collnet_connect,
    .reduceSupport = zc_collnet_reduce_support,
    .regMr = zc_collnet_reg_mr,
    .regMrDmaBuf = zc_collnet_reg_mr_dmabuf,
    .deregMr = zc_collnet_dereg_mr,
    .iallreduce = zc_collnet_iallreduce,
    .iallgather = zc_collnet_iallgather,
    .ireducescatter = zc_collnet_ireducescatter,
    .iflush = zc_collnet_iflush,
    .test = zc_collnet_test,
    .closeColl = zc_collnet_close_coll,
    .closeListen = zc_collnet_close_listen,
};

ZC_NCCL_EXPORT const ncclCollNet_v8_t ncclCollNetPlugin_v8 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_collnet_v9_init,
    .devices = zc_collnet_devices,
    .getProperties = zc_collnet_v8_get_properties,
    .listen = zc_collnet_v9_listen,
    .connect = zc_collnet_connect,
    .reduceSupport = zc_collnet_reduce_support,
    .regMr = zc_collnet_reg_mr,
    .regMrDmaBuf = zc_collnet_reg_mr_dmabuf,
    .deregMr = zc_collnet_dereg_mr,
    .iallreduce = zc_collnet_v8_iallreduce,
    .iallgather = zc_collnet_v8_iallgather,
    .ireducescatter = zc_collnet_v8_ireducescatter,
    .iflush = zc_collnet_iflush,
    .test = zc_collnet_test,
    .closeColl = zc_collnet_close_coll,
    .closeListen = zc_collnet_close_listen,
};

ZC_NCCL_EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_tuner_init,
    .getCollInfo = zc_tuner_get_coll_info,
    .finalize = zc_tuner_finalize,
    .getChunkSize = zc_tuner_get_chunk_size,
};

ZC_NCCL_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = ZC_NCCL_PLUGIN_NAME,
    .init = zc_tuner_init,
    .getCollInfo = zc_tuner_get_coll_info,
    .finalize = zc_tuner_finalize,
};
