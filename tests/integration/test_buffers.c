/*
 * A communicator keeps the large buffers of its calls for the next ones (zc_coll_alloc,
 * collectives/coll.h): 2 ranks all-reduce 64 MiB of f32 a few times on one path, and the calls
 * after the first two may take at most MAX_FAULT_PAGES new pages (minor faults, getrusage) each.
 * Before, every call allocated its payload areas afresh, glibc served those above its mmap
 * threshold (at most 32 MiB) with new pages, and a call faulted in 6651 (the scatter) to 32901
 * (the all-gather, the ring) pages; on this project's virtual machine that made QSGD's 64 MiB
 * scatter 4x slower (docs/results.md, "Idle polling that yields").
 *
 *   allgather-fp16   ZIPCCL_CODEC=fp16 ZIPCCL_ALGO=allgather (payload area 2 x 32 MiB)
 *   scatter-qsgd     ZIPCCL_CODEC=qsgd ZIPCCL_ALGO=scatter (the owner's f32 sum: 32 MiB)
 *   ring-fp16        ZIPCCL_CODEC=fp16 ZIPCCL_ALGO=ring
 *
 * Usage: test_buffers CASE; exit 0 when the case passed.
 */
#include "harness.h"
#include "rank_check.h"

#include <zipccl/zipccl.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define COUNT (16u << 20) /* 64 MiB of f32 */
#define WARM_CALLS 2
#define CALLS 3
/* pages a call may fault in: the codec's and UCX's small allocations, far under 32 MiB */
#define MAX_FAULT_PAGES 1024

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    zc_comm_t *comm;
    float *in, *out;

    if (rank_start(rank, COUNT, 5, &in, &out))
        return 1;
    memset(out, 0, COUNT * sizeof(float));
    zc_harness_step("zc_comm_init");
    zc_status_t status = zc_comm_init(&comm);
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));
    long before = 0;
    for (int k = 0; k < WARM_CALLS + CALLS; k++) {
        if (k == WARM_CALLS)
            before = minor_faults();
        zc_harness_step("call %d", k);
        status = zc_allreduce(comm, in, out, COUNT, ZC_DTYPE_F32, ZC_OP_SUM);
        CHECK(status == ZC_OK, "call %d: %s", k, zc_status_string(status));
    }
    long per_call = (minor_faults() - before) / CALLS;
    int qsgd = strcmp(getenv("ZIPCCL_CODEC"), "qsgd") == 0;
    for (size_t i = 0; i < COUNT; i += 4099) {
        float want = (float)(size * (size + 1) / 2 * (int)(i % 5));
        /* QSGD rounds each value between two levels of its bucket's largest magnitude */
        float slack = qsgd ? (float)(4 * size * (size + 1) / 2) : 0.0f;
        CHECK(fabsf(out[i] - want) <= slack, "value %zu is %g, not %g", i, out[i], want);
    }
    fprintf(stderr, "rank %d: %ld pages faulted in per call (at most %d)\n", rank, per_call,
            MAX_FAULT_PAGES);
    CHECK(per_call <= MAX_FAULT_PAGES,
          "a call faulted in %ld new pages (%.1f MiB): its buffers were not kept", per_call,
          (double)per_call * 4096 / (1 << 20));
    zc_comm_destroy(comm);
    free(in);
    free(out);
    return 0;
}

static int run_case(const char *name)
{
    static const struct {
        const char *name, *codec, *algo;
    } cases[] = {
        {"allgather-fp16", "fp16", "allgather"},
        {"scatter-qsgd", "qsgd", "scatter"},
        {"ring-fp16", "fp16", "ring"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(name, cases[i].name) != 0)
            continue;
        setenv("ZIPCCL_CODEC", cases[i].codec, 1);
        setenv("ZIPCCL_ALGO", cases[i].algo, 1);
        zc_harness_opts_t o = {.nranks = 2, .deadline_s = 120};
        return zc_harness_run(&o, rank_main, NULL) != 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    return case_main(argc, argv, run_case);
}
