/*
 * What the two-rank benchmarks share (transport_bench, nccl_net_bench): the
 * fork into rank 0 and rank 1 before UCX starts, a bootstrap over the
 * socketpair between them (allgather and barrier, enough for
 * zc_ucx_comm_create) and the transport's bandwidth loop.
 */
#ifndef ZC_BENCH_PAIR_H
#define ZC_BENCH_PAIR_H

#include "transport/bootstrap/bootstrap.h"
#include "transport/ucx/ucx.h"

#include <stdint.h>

typedef struct bench_pair {
    int fd; /* this rank's end of the socketpair */
    int rank;
} bench_pair_t;

/* Both ranks write first: meant for blobs far below a socket buffer (worker addresses). */
zc_status_t bench_pair_allgather(void *ctx, const void *mine, size_t len, void *all);
zc_status_t bench_pair_barrier(void *ctx);

/* ctx: a bench_pair_t */
extern const zc_bootstrap_ops_t bench_pair_ops;

/* The tags of bench_pair_bw's messages; the benchmarks' own stay clear of them. */
#define BENCH_PAIR_TAG_DATA 1
#define BENCH_PAIR_TAG_ACK 2

/*
 * ucx_perftest's tag_bw pattern over @p comm: rank 0 sends @p iters messages
 * of @p size bytes from @p buf with at most @p window (<= the length of @p req)
 * in flight, rank 1 keeps @p window receives posted into @p buf, then
 * acknowledges the last with 8 bytes. Returns when this rank's part is done.
 */
zc_status_t bench_pair_bw(zc_ucx_comm_t *comm, int rank, size_t size, int iters, int window,
                          uint8_t *buf, zc_ucx_req_t *req);

/* One rank of a two-rank benchmark: @p fd is its end of the socketpair. */
typedef int (*bench_rank_fn)(int rank, int fd, void *arg);

/*
 * Forks this process into rank 1 (the child, which exits with @p rank_main's
 * result) and rank 0 (this process), joined by a socketpair, before either
 * starts UCX. Returns 0 when both ranks returned 0, 1 when one did not, -1
 * when the socketpair or the fork failed (printed, after @p prefix).
 */
int bench_pair_fork(const char *prefix, bench_rank_fn rank_main, void *arg);

#endif
