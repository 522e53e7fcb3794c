/*
 * A two-rank bootstrap over a socketpair, for the benchmarks that fork
 * themselves into rank 0 and rank 1 before UCX starts (transport_bench,
 * nccl_net_bench): allgather and barrier, enough for zc_ucx_comm_create.
 */
#ifndef ZC_BENCH_PAIR_BOOTSTRAP_H
#define ZC_BENCH_PAIR_BOOTSTRAP_H

#include "transport/bootstrap/bootstrap.h"

typedef struct bench_pair {
    int fd; /* this rank's end of the socketpair */
    int rank;
} bench_pair_t;

/* Both ranks write first: meant for blobs far below a socket buffer (worker addresses). */
zc_status_t bench_pair_allgather(void *ctx, const void *mine, size_t len, void *all);
zc_status_t bench_pair_barrier(void *ctx);

/* ctx: a bench_pair_t */
extern const zc_bootstrap_ops_t bench_pair_ops;

#endif
