/*
 * The op driver's entry points, for the communicator and the public API
 * (helpers for algorithms are in coll.h).
 */
#ifndef ZC_COLLECTIVES_OP_H
#define ZC_COLLECTIVES_OP_H

#include "collectives/coll.h"

/* A new op for a validated call: the policy has chosen its path. Not queued yet. */
zc_status_t zc_op_create(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         zc_dtype_t dtype, zc_redop_t op, uint64_t key, zc_coll_op_t **op_p);
void zc_op_free(zc_coll_op_t *op);

/* Gives @p op its sequence number and appends it to @p comm's queue (thread safe). */
void zc_op_enqueue(zc_comm_t *comm, zc_coll_op_t *op);

/*
 * One round of progress on the calling thread: the UCX worker, then the ops at
 * the head of the queue as far as they go. Returns 0 when nothing happened (no
 * transport event, no op completed): waiting loops then yield the CPU, which
 * matters when ranks outnumber cores. Without a progress thread, only the
 * thread using the communicator calls it.
 */
int zc_comm_progress(zc_comm_t *comm);

/* Whether @p op has completed (thread safe). */
int zc_op_done(zc_coll_op_t *op);

#endif
