/*
 * ncclNet v12 over UCX, internal: what the three files of the net plugin
 * share. net.c: the plugin context (init, finalize), connections' lifetime and
 * closing; net_shake.c: listen, connect, accept (the TCP handshake that
 * exchanges worker addresses); net_data.c: memory registration, isend, irecv,
 * iflush, test. Every function here takes what it works on as parameters and
 * is called with the context's lock held (the worker's mutex) unless it says
 * otherwise. net.c's top comment is the design.
 */
#ifndef ZC_PLUGIN_NCCL_NET_INT_H
#define ZC_PLUGIN_NCCL_NET_INT_H

#include "plugin/nccl/plugin.h"
#include "transport/ucx/ucx.h"

#include <stddef.h>
#include <stdint.h>

#define NET_MAGIC_CTX 0x7a636e6574637478ull    /* "zcnetctx" */
#define NET_MAGIC_HANDLE 0x7a636e657468646cull /* "zcnethdl" */
#define NET_MAGIC_HELLO 0x7a636e657468656cull  /* "zcnethel" */
#define NET_MAGIC_COMM 0x7a636e6574636f6dull   /* "zcnetcom" */
#define NET_MAGIC_MR 0x7a636e65746d7268ull     /* "zcnetmrh" */
#define NET_MAGIC_DEAD 0xdeadull

#define NET_CONN_ID_MAX 0x7fffffffu
#define NET_ADDR_LEN 64
#define NET_WORKER_ADDR_MAX 8192 /* worker addresses of hosts with many devices stay far below */
#define NET_MAX_PENDING 4 /* handshakes a listener runs at once: a silent stranger blocks none */

typedef struct net_ctx {
    uint64_t magic;
    zc_ucx_worker_t *worker; /* its mutex is the context's lock */
    const void *addr;        /* the worker's, for handshakes */
    size_t addr_len;
    zc_config_t cfg;
    uint64_t comm_id;
    int traffic_class;
    uint32_t next_conn_id;
    int refs;               /* NCCL's (until finalize) and one per listen/send/recv comm */
    ncclNetAttr_v12_t attr; /* setNetAttr's last hints */
    int attr_set;
} net_ctx_t;

typedef enum net_kind { NET_LISTEN = 1, NET_SEND, NET_RECV } net_kind_t;

typedef struct net_comm net_comm_t;

/* A request slot: free when neither NCCL holds it nor UCX still works on it. */
typedef struct net_req {
    net_comm_t *comm;
    zc_ucx_op_t op; /* in flight while op.status is ZC_INPROGRESS */
    int used;       /* handed to NCCL, not yet reported done */
    int done;
    int is_recv;
    int tag;
    zc_status_t status;
    const char *reason; /* UCX's words for a failure */
    size_t size;        /* posted size, then the received length */
    uint64_t start_ns;
} net_req_t;

/* A handshake in progress: our hello going out, the peer's coming in. */
typedef struct net_shake {
    int fd;
    int connected;
    char peer[NET_ADDR_LEN]; /* the other side's address, for messages */
    uint64_t deadline_ns;
    uint8_t *out;
    size_t out_len, out_off;
    uint8_t *in;
    size_t in_len, in_off; /* in_len: the header's size until the header is in */
} net_shake_t;

struct net_comm {
    uint64_t magic;
    net_kind_t kind;
    net_ctx_t *ctx;
    int dev;
    uint32_t conn_id;
    char peer[NET_ADDR_LEN];              /* for messages: the other side's address */
    int fd;                               /* listen: the listening socket */
    net_shake_t shake;                    /* send: until connected */
    net_shake_t pending[NET_MAX_PENDING]; /* listen: handshakes with connectors */
    zc_ucx_ep_t *ep;       /* to the peer's worker: data (send) or failure notice (recv) */
    zc_status_t ep_status; /* ZC_OK, or what the endpoint's error handler reported */
    const char *ep_reason; /* UCX's words for it */
    int reported;          /* the failure was logged */
    net_req_t reqs[NCCL_NET_MAX_REQUESTS];
    net_comm_t *recv; /* listen: the recvComm accept hands out, NULL once handed out */
};

/* ---- net.c ---- */

/* @p ctx as ours, or NULL (no lock needed). */
net_ctx_t *zc_net_ctx_of(void *ctx);
/* @p comm as ours of @p kind (0: any), or NULL (no lock needed). */
net_comm_t *zc_net_comm_of(void *comm, net_kind_t kind);

void zc_net_lock(net_ctx_t *ctx);
void zc_net_unlock(net_ctx_t *ctx);

/* Drops a reference; releases the lock; the last one destroys the context. */
void zc_net_ctx_unref_unlock(net_ctx_t *ctx);

/* Progresses until the worker is idle (bounded: a busy peer cannot hold us here). */
void zc_net_progress(net_ctx_t *ctx);

/* A new comm of @p kind (logged when out of memory); not yet counted in ctx->refs. */
net_comm_t *zc_net_comm_alloc(net_ctx_t *ctx, net_kind_t kind, int dev, uint32_t conn_id);

/* zc_ucx_ep_error_fn of a comm's endpoint: records the failure in the comm. */
void zc_net_ep_failed(void *comm, zc_status_t status, const char *reason);

/*
 * Closes @p comm's endpoint and waits for its UCX requests within the
 * deadline, then frees it; drops its reference on the context (and the lock).
 */
void zc_net_comm_close_unlock(net_comm_t *comm);

/* ---- net_shake.c ---- */

/* Ends a handshake: the socket closed, its buffers freed (idempotent). */
void zc_net_shake_end(net_shake_t *shake);

/* ---- net_data.c ---- */

/* Whether UCX still works on one of @p comm's requests. */
int zc_net_comm_busy(const net_comm_t *comm);

/* Cancels @p comm's receives in flight (they complete with ZC_ERR_PEER). */
void zc_net_cancel_recvs(net_comm_t *comm);

/* Detaches @p comm's requests still in flight: UCX finishes them without the comm. */
void zc_net_detach_reqs(net_comm_t *comm);

#endif
