/*
 * Hierarchical all-reduce (docs/collectives.md, "Hierarchical"): the ranks of
 * a host reduce-scatter through shared memory of their own (transport/shm),
 * then either each local rank all-reduces its shard of the sum with the ranks
 * of the same local rank on the other hosts (a communicator of its own, flat,
 * with the configured codec and algorithm) and the host's ranks gather the
 * shards back through shared memory (shards), or the shards are gathered to
 * the host's leader, which alone all-reduces the whole host sum with the other
 * hosts' leaders and broadcasts the result through shared memory (leader).
 *
 * zc_hier_create groups the ranks by host at communicator creation
 * (collective) and, where the variant is the cost model's, agrees its inputs;
 * zc_hier_route sends an op down this path when the communicator has one, the
 * call qualifies and the variant is not flat.
 */
#ifndef ZC_COLLECTIVES_HIER_H
#define ZC_COLLECTIVES_HIER_H

#include "collectives/coll.h"

/* What a communicator knows of its hosts. */
typedef struct zc_hier zc_hier_t;

/*
 * Groups @p comm's ranks by host (the identities of zc_topo_host_id, or
 * ZIPCCL_HOST_ID) with every rank's facts (zc_topo_this_facts: NUMA node,
 * nearest NIC; all ranks get all), logs the groups at info level, and, when
 * ZIPCCL_TOPOLOGY asks for it (hierarchical, shards, leader; auto: two hosts
 * or more, every host with the same number, two or more, of ranks), picks the
 * host's leader (zc_topo_pick_leader), sets up the host's shared memory (this
 * rank's buffers on its NUMA node) and the communicator between hosts; for
 * auto and hierarchical, the variant model's inputs (policy.h,
 * zc_policy_hier_t): measured on every rank (shared memory, the link between
 * hosts with every local rank at once and with the leaders alone, the flat
 * policy's inputs when comm has none) and agreed over all of them. Collective
 * over comm->bs, after the transport is up. Writes NULL into @p hier_p for a
 * flat communicator. Errors: a rank that cannot read its ZIPCCL_TOPO_XML
 * (ZC_ERR_INVALID_CONFIG on every rank), a hierarchical setting with unequal
 * hosts (ZC_ERR_INVALID_CONFIG), shared memory or the inter-host communicator
 * failing (logged; auto then stays flat when every rank could not set up its
 * shared memory), a measurement failing on any rank (every rank fails),
 * bootstrap errors.
 */
zc_status_t zc_hier_create(zc_comm_t *comm, zc_hier_t **hier_p);

/* Frees @p hier, its communicator and its shared memory; NULL is allowed. */
void zc_hier_destroy(zc_hier_t *hier);

/*
 * Called by the driver before it asks the policy for a path: on a hierarchical
 * communicator, an all-reduce of at least one value per local rank (not a
 * control op) whose variant (ZIPCCL_TOPOLOGY=shards or leader, else
 * zc_policy_hier_choose's, logged by zc_policy_hier_note) is not flat takes
 * zc_algo_hier with a raw path in its header (the codec and algorithm are the
 * inter-host communicator's, whose own policy decides) and 1 is returned;
 * else 0, and the op is left alone. Decided from the call and the agreed
 * inputs alone: identical on every rank.
 */
int zc_hier_route(zc_coll_op_t *op);

/* The groups, for zipccl-info and tests: 0 and the values, or -1 on a flat communicator. */
int zc_hier_groups(const zc_hier_t *hier, int *local_rank_p, int *local_size_p, int *node_p,
                   int *nodes_p);

/*
 * The L2 norm over every error-feedback residual of @p comm and of its
 * communicator between hosts (which holds the residuals of the hierarchical
 * calls), and the values both sent out of band: what the statistics report.
 */
double zc_comm_residual_norm(const zc_comm_t *comm);
uint64_t zc_comm_oob_values(const zc_comm_t *comm);

extern const zc_algo_t zc_algo_hier; /* hier.c */

#endif
