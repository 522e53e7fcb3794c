/*
 * A libzipccl.so.0 for test preload-mpi-error-2: it forwards every function libzipccl-preload.so
 * looks up to the real libzipccl.so.0 (ZC_TEST_REAL_ENGINE, an absolute path) and makes one
 * all-reduce fail on one rank only, after the real call completed on every rank: a failure
 * that MPI_ERRORS_RETURN lets the program survive while the other ranks succeeded. The preload
 * library finds it because a copy of itself sits in the same folder (engine_open in preload.c).
 *
 *   ZC_TEST_FAIL_RANK   the MPI_COMM_WORLD rank (OMPI_COMM_WORLD_RANK) whose call fails
 *   ZC_TEST_FAIL_COUNT  the count of the call that fails there (its first such call only)
 */
#include <zipccl/zipccl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct {
    zc_status_t (*comm_init_bootstrap)(int, int, const zc_bootstrap_hooks_t *, void *,
                                       zc_comm_t **);
    void (*comm_destroy)(zc_comm_t *);
    zc_status_t (*allreduce_key)(zc_comm_t *, const void *, void *, size_t, zc_dtype_t, zc_redop_t,
                                 uint64_t);
    zc_status_t (*comm_set_stats_file)(zc_comm_t *, const char *);
    zc_status_t (*comm_agree_max)(zc_comm_t *, int32_t, int32_t *);
} real;
static int fail_armed;
static size_t fail_count;

#define LOOKUP(lib, field, name)                                                                   \
    do {                                                                                           \
        void *p_ = dlsym(lib, name);                                                               \
        if (!p_) {                                                                                 \
            fprintf(stderr, "failing_engine: %s not found in the real engine\n", name);            \
            abort();                                                                               \
        }                                                                                          \
        memcpy(&real.field, &p_, sizeof(p_));                                                      \
    } while (0)

static void load(void)
{
    const char *path = getenv("ZC_TEST_REAL_ENGINE");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib) {
        fprintf(stderr, "failing_engine: cannot open ZC_TEST_REAL_ENGINE=%s: %s\n",
                path ? path : "(unset)", dlerror());
        abort();
    }
    LOOKUP(lib, comm_init_bootstrap, "zc_comm_init_bootstrap");
    LOOKUP(lib, comm_destroy, "zc_comm_destroy");
    LOOKUP(lib, allreduce_key, "zc_allreduce_key");
    LOOKUP(lib, comm_set_stats_file, "zc_comm_set_stats_file");
    LOOKUP(lib, comm_agree_max, "zc_comm_agree_max");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK"), *fail_rank = getenv("ZC_TEST_FAIL_RANK"),
               *count = getenv("ZC_TEST_FAIL_COUNT");
    fail_armed = rank && fail_rank && count && strcmp(rank, fail_rank) == 0;
    fail_count = count ? strtoull(count, NULL, 10) : 0;
}

EXPORT zc_status_t zc_comm_init_bootstrap(int rank, int size, const zc_bootstrap_hooks_t *hooks,
                                          void *ctx, zc_comm_t **comm_p)
{
    pthread_once(&once, load);
    return real.comm_init_bootstrap(rank, size, hooks, ctx, comm_p);
}

EXPORT void zc_comm_destroy(zc_comm_t *comm)
{
    pthread_once(&once, load);
    real.comm_destroy(comm);
}

EXPORT zc_status_t zc_allreduce_key(zc_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, zc_dtype_t dtype, zc_redop_t op, uint64_t key)
{
    pthread_once(&once, load);
    zc_status_t st = real.allreduce_key(comm, sendbuf, recvbuf, count, dtype, op, key);
    if (st == ZC_OK && fail_armed && count == fail_count) {
        fail_armed = 0;
        fprintf(stderr, "failing_engine: the call of %zu values fails on this rank only\n", count);
        return ZC_ERR_INTERNAL;
    }
    return st;
}

EXPORT zc_status_t zc_comm_set_stats_file(zc_comm_t *comm, const char *path)
{
    pthread_once(&once, load);
    return real.comm_set_stats_file(comm, path);
}

EXPORT zc_status_t zc_comm_agree_max(zc_comm_t *comm, int32_t value, int32_t *max_p)
{
    pthread_once(&once, load);
    return real.comm_agree_max(comm, value, max_p);
}
