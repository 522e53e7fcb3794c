/*
 * An in-memory bootstrap for tests: the "ranks" of a job are threads of one
 * process, each with its own zc_bootstrap_t, meeting at a pthread barrier.
 * membs_run starts one thread per rank and gives each a bootstrap and a UCX
 * communicator made with it.
 */
#ifndef ZC_TESTS_UCX_MEMBS_H
#define ZC_TESTS_UCX_MEMBS_H

#include "transport/bootstrap/bootstrap.h"
#include "transport/ucx/ucx.h"

#include <stdio.h>

typedef struct membs_group membs_group_t;

/* A group of @p size ranks; NULL when out of memory. */
membs_group_t *membs_group_create(int size);
void membs_group_destroy(membs_group_t *group);

/* Rank @p rank's bootstrap in @p group (zc_bootstrap_destroy frees it). */
zc_status_t membs_create(membs_group_t *group, int rank, zc_bootstrap_t **bs_p);

/* What a rank's body sees. A failed check writes the reason and returns. */
typedef struct membs_rank {
    int rank;
    int size;
    zc_bootstrap_t *bs;
    zc_ucx_comm_t *comm;
    void *arg;
    char error[512]; /* first failure, "" when none */
} membs_rank_t;

typedef void (*membs_body_fn)(membs_rank_t *r);

/*
 * Runs @p body on @p size threads, each with a communicator created from @p cfg
 * (defaults when NULL) over the in-memory bootstrap; destroys the
 * communicators when every body returned. Returns 0 when every rank succeeded,
 * else -1 with the first failure ("rank 1: ...") in @p why.
 */
int membs_run(int size, const zc_config_t *cfg, membs_body_fn body, void *arg, char *why,
              size_t why_len);

/* In a body: record the first failure and return from the body. */
#define MEMBS_CHECK(r, cond, ...)                                                                  \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!(r)->error[0]) {                                                                  \
                int n_ = snprintf((r)->error, sizeof((r)->error), "%s:%d: ", __FILE__, __LINE__);  \
                snprintf((r)->error + n_, sizeof((r)->error) - (size_t)n_, __VA_ARGS__);           \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#endif
