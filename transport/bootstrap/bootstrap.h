/*
 * Bootstrap: how the ranks of a job first find each other and exchange small
 * blobs (UCX worker addresses, host identities), before any fast transport
 * exists. An interface, so that providers plug in: tcp (this layer), MPI over
 * PMPI_Allgather and NCCL over the real ncclAllGather (the frontends), or the
 * handles NCCL's CollNet passes.
 *
 * Collective calls: every rank calls the same sequence of operations with the
 * same lengths. Every call has a deadline (ZIPCCL_TIMEOUT_S for tcp) and fails
 * with an error naming the peer and the operation rather than hang.
 */
#ifndef ZC_TRANSPORT_BOOTSTRAP_H
#define ZC_TRANSPORT_BOOTSTRAP_H

#include "common/config.h"

#include <zipccl/zipccl_status.h>

#include <stddef.h>

typedef struct zc_bootstrap_ops {
    const char *name; /* "tcp", "mpi", ... */
    /* @p all receives size * len bytes: rank r's @p len bytes at offset r * len. */
    zc_status_t (*allgather)(void *ctx, const void *mine, size_t len, void *all);
    /* @p root's @p len bytes at @p buf are copied into every rank's @p buf. */
    zc_status_t (*broadcast)(void *ctx, void *buf, size_t len, int root);
    zc_status_t (*barrier)(void *ctx);
    /* Frees ctx; NULL-safe providers tolerate a half-built ctx. */
    void (*destroy)(void *ctx);
} zc_bootstrap_ops_t;

typedef struct zc_bootstrap {
    const zc_bootstrap_ops_t *ops;
    void *ctx;
    int rank;
    int size;
} zc_bootstrap_t;

static inline zc_status_t zc_bootstrap_allgather(zc_bootstrap_t *bs, const void *mine, size_t len,
                                                 void *all)
{
    return bs->ops->allgather(bs->ctx, mine, len, all);
}

static inline zc_status_t zc_bootstrap_broadcast(zc_bootstrap_t *bs, void *buf, size_t len,
                                                 int root)
{
    return bs->ops->broadcast(bs->ctx, buf, len, root);
}

static inline zc_status_t zc_bootstrap_barrier(zc_bootstrap_t *bs)
{
    return bs->ops->barrier(bs->ctx);
}

/* Destroys @p bs and its provider context; NULL is allowed. */
void zc_bootstrap_destroy(zc_bootstrap_t *bs);

#endif
