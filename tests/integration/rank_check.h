/*
 * What a rank of an integration test shares with the others: a check macro
 * that names the rank, the exit status of an expected failure, and a log sink
 * that keeps every message the rank logged (for asserting on error text) and
 * echoes it to stderr with the rank.
 */
#ifndef ZC_TESTS_RANK_CHECK_H
#define ZC_TESTS_RANK_CHECK_H

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A rank's exit status for "failed as the test expects". */
#define FAILED_AS_EXPECTED 3

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: check failed: %s: ", my_rank, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int my_rank = -1;

/* every message this rank logged */
static char logged[16384];

static void capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                         const char *msg)
{
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof(logged) - used, "%s\n", msg);
    fprintf(stderr, "rank %d: %s: %s\n", my_rank, zc_log_level_name(level), msg);
}

/*
 * A rank's start: my_rank set, its log captured, @p count small integers (rank + 1) * (i %
 * @p period) in a new *@p in (every sum exact, in f16 too) and room for as many in *@p out.
 * 0, or 1 (reported) without memory.
 */
static inline int rank_start(int rank, size_t count, int period, float **in, float **out)
{
    my_rank = rank;
    zc_log_set_sink(capture_sink, NULL);
    *in = malloc(count * sizeof(float));
    *out = malloc(count * sizeof(float));
    CHECK(*in && *out, "no memory for 2 x %zu values", count);
    for (size_t i = 0; i < count; i++)
        (*in)[i] = (float)((rank + 1) * (int)(i % (size_t)period));
    return 0;
}

/* @p len zeroed bytes shared with the processes forked after this, or NULL (reported). */
static inline void *shared_map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return NULL;
    }
    return p;
}

/*
 * Hierarchical variants of a case (its name prefixed): the ranks run as hosts of
 * HIER_RANKS_PER_HOST ranks each, told apart by ZIPCCL_HOST_ID (hier_set_host in each rank,
 * before zc_comm_init), with ZIPCCL_TOPOLOGY=shards ("hier-": each local rank all-reduces its
 * shard between hosts), leader ("leader-": the host's leader alone) or auto ("auto-": flat,
 * shards or leader per call by the cost model). A run of fewer than two such hosts, or whose
 * rank count they do not divide, runs one rank per host (flat). "hier-onehost-": every rank
 * of a run of two or more on one host (shared memory only). Returns the name without the
 * prefix.
 */
#define HIER_RANKS_PER_HOST 2
static inline const char *hier_case(const char *name)
{
    static const struct {
        const char *prefix, *topology, *mode;
    } variants[] = {{"hier-onehost-", "shards", "onehost"},
                    {"hier-", "shards", "hosts"},
                    {"leader-", "leader", "hosts"},
                    {"auto-", "auto", "hosts"}};
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        size_t len = strlen(variants[i].prefix);
        if (strncmp(name, variants[i].prefix, len) != 0)
            continue;
        setenv("ZIPCCL_TOPOLOGY", variants[i].topology, 1);
        setenv("ZC_TEST_HIER", variants[i].mode, 1);
        return name + len;
    }
    return name;
}

static inline void hier_set_host(int rank, int size)
{
    char id[32];
    const char *mode = getenv("ZC_TEST_HIER");
    if (!mode)
        return;
    int per = size >= 2 * HIER_RANKS_PER_HOST && size % HIER_RANKS_PER_HOST == 0
                  ? HIER_RANKS_PER_HOST
                  : 1;
    if (strcmp(mode, "onehost") == 0)
        per = size;
    snprintf(id, sizeof(id), "test-host-%d", rank / per);
    setenv("ZIPCCL_HOST_ID", id, 1);
}

/* The main of a program whose argument names one case: runs it (-1: no such case), says how it
 * went. */
static inline int case_main(int argc, char **argv, int (*run_case)(const char *name))
{
    const char *name = argc > 1 ? argv[1] : "";
    int rc = run_case(hier_case(name));
    if (rc < 0) {
        fprintf(stderr, "usage: %s CASE (unknown case '%s')\n", argv[0], name);
        return 2;
    }
    fprintf(stderr, "%s: %s\n", name, rc ? "FAILED" : "passed");
    return rc ? 1 : 0;
}

#endif
