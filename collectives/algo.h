/*
 * The all-reduce algorithms by id: the one list that the policy, the driver's
 * table (op.c), the statistics and ZIPCCL_ALGO's choices (common/choices.h)
 * refer to. Each algorithm is a file of its own implementing zc_algo_t
 * (coll.h); docs/architecture.md lists what adding one takes.
 */
#ifndef ZC_COLLECTIVES_ALGO_H
#define ZC_COLLECTIVES_ALGO_H

#include "common/choices.h"

typedef enum zc_algo_id {
    ZC_ALGO_RAW_RING = 0,    /* raw_ring.c: uncompressed ring (codec none), every type and op */
    ZC_ALGO_COMPRESSED_RING, /* compressed_ring.c: payloads of a linear codec summed on a ring */
    ZC_ALGO_ALLGATHER,       /* allgather.c: compressed all-gather, every rank decodes all */
    ZC_ALGO_SCATTER,         /* scatter.c: compressed scatter-reduce, then all-gather */
    ZC_ALGO_POWERSGD,        /* powersgd.c: PowerSGD's P and Q summed on a ring, one op */
    ZC_ALGO_COUNT
} zc_algo_id_t;

/*
 * Name in logs and statistics: "raw", and for the compressed algorithms the
 * ZIPCCL_ALGO choice that selects them ("ring", "allgather", "scatter").
 * NULL for an unknown id.
 */
const char *zc_algo_name(zc_algo_id_t algo);

/* The compressed algorithm a ZIPCCL_ALGO choice (not auto) selects. */
zc_algo_id_t zc_algo_from_choice(int algo_choice);

#endif
