/*
 * A library that uses NCCL, for the local-scope case of test_preload_nccl: linked with the
 * stand-in NCCL and dlopen'ed with RTLD_LOCAL by local_main.c, as Python loads a framework's
 * extension module. The stand-in is then in no global scope: the interposer cannot find it
 * with RTLD_NEXT and must find it by name (nccl.c, real_symbol).
 */
#include "standin_nccl.h"

#include <stdio.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int zc_standin_user_run(int rank, int size, ncclUniqueId id);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "rank %d: ", rank);                                                        \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        return 1;                                                                                  \
    } while (0)

/*
 * An eligible f32 sum of ones through zipccl: QSGD encodes a bucket of equal values exactly
 * (each is its bucket's scale), so every element is exactly @p size, and the stand-in counts
 * no call; then an int32 sum that the stand-in runs (one call counted, exact).
 */
EXPORT int zc_standin_user_run(int rank, int size, ncclUniqueId id)
{
    const size_t count = 100003;
    ncclComm_t comm;
    float *f = malloc(count * sizeof(float));
    int *n = malloc(count * sizeof(int));
    ncclResult_t r;

    if (!f || !n)
        FAIL("out of memory");
    for (size_t i = 0; i < count; i++) {
        f[i] = 1.0f;
        n[i] = rank + (int)i;
    }
    if ((r = ncclCommInitRank(&comm, size, id, rank)) != ncclSuccess)
        FAIL("ncclCommInitRank: %s", ncclGetErrorString(r));
    long before = zc_standin_nccl_allreduce_calls();
    if ((r = ncclAllReduce(f, f, count, ncclFloat32, ncclSum, comm, NULL)) != ncclSuccess)
        FAIL("f32 ncclAllReduce: %s", ncclGetErrorString(r));
    if (zc_standin_nccl_allreduce_calls() != before)
        FAIL("the f32 sum reached the stand-in, not zipccl");
    for (size_t i = 0; i < count; i++)
        if (f[i] != (float)size)
            FAIL("f32 sum of ones: element %zu is %.9g, expected %d", i, f[i], size);
    if ((r = ncclAllReduce(n, n, count, ncclInt32, ncclSum, comm, NULL)) != ncclSuccess)
        FAIL("int32 ncclAllReduce: %s", ncclGetErrorString(r));
    if (zc_standin_nccl_allreduce_calls() != before + 1)
        FAIL("the int32 sum did not reach the stand-in once");
    for (size_t i = 0; i < count; i++)
        if (n[i] != size * (int)i + size * (size - 1) / 2)
            FAIL("int32 sum: element %zu is %d", i, n[i]);
    if ((r = ncclCommDestroy(comm)) != ncclSuccess)
        FAIL("ncclCommDestroy: %s", ncclGetErrorString(r));
    free(f);
    free(n);
    return 0;
}
