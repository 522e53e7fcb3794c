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
 * transport event, no op completed); waiting loops call zc_comm_wait_round
 * instead. Without a progress thread, only the thread using the communicator
 * calls it.
 */
int zc_comm_progress(zc_comm_t *comm);

/*
 * One round of a waiting loop (zc_wait, the progress thread, teardown):
 * zc_comm_progress, then, when it moved nothing, the waiting rule: poll
 * (sched_yield) within 0.5 ms of the last round that moved something
 * (*busy_ns_p, which it updates; start it at the loop's start), then sleep on
 * the UCX workers the ops wait for until an event or the next deadline (at
 * most 0.1 s); ops that wait for shared memory poll, then sleep in 0.1 ms
 * steps; ops with work queued never sleep. docs/collectives.md.
 */
void zc_comm_wait_round(zc_comm_t *comm, uint64_t *busy_ns_p);

/* Whether @p op has completed (thread safe). */
int zc_op_done(zc_coll_op_t *op);

#endif
