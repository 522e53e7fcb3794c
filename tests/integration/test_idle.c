/*
 * A rank that waits for a late peer sleeps instead of spinning (docs/collectives.md, "Progress,
 * deadlines and failures"): after a call every rank joins, one rank starts its next call
 * DELAY_S late; every other rank waits for it inside zc_allreduce (or zc_wait), and all of
 * them together must use less than 30% of a core meanwhile (process CPU times, UCX's threads
 * included, summed over the waiting ranks, over the longest wait). Ranks that polled, as before
 * issue 21, used what the machine gave them: 75% of a core for one rank on a loaded 2-core
 * machine, 75% together for three. The result must still be the exact sum (QSGD: within its
 * bound).
 *
 *   wait          2 ranks, raw ring, the caller's thread waits (zc_allreduce)
 *   wait-thread   the same with ZIPCCL_PROGRESS_THREAD=1 (zc_iallreduce, zc_wait)
 *   wait-qsgd     2 ranks, QSGD on the all-gather
 *   hier-wait     4 ranks as 2 hosts of 2, hierarchical: rank 2 is late; rank 3 waits for it
 *                 in shared memory (steps), ranks 0 and 1 between hosts (UCX)
 *   init-round    4 ranks on one core measure the policy's inputs at init (ZIPCCL_ALGO=auto):
 *                 the round with every peer they measured (rank 0's info line) must take no
 *                 longer than the median of a whole small call, which holds two such rounds
 *                 (its header's and the all-gather's or the scatter's). Waiters that polled
 *                 1024 times before yielding the core measured rounds of 10-16 ms there,
 *                 against calls of about 1 ms, and the model priced every round so.
 *
 * Usage: test_idle CASE; exit 0 when the case passed.
 */
#include "harness.h"
#include "rank_check.h"

#include "common/timer.h"

#include <zipccl/zipccl.h>

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DELAY_S 1.0
#define COUNT (1u << 16)
/* CPU seconds per wall second a waiting rank may use: generous, for a loaded 2-core machine */
#define MAX_CPU_SHARE 0.3

static int late_rank;

/* Mapped before the fork: each rank's wait. */
typedef struct waited {
    double cpu_s, wall_s;
} waited_t;
static waited_t *waits;

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static zc_status_t allreduce(zc_comm_t *comm, const float *in, float *out, int nonblocking)
{
    if (!nonblocking)
        return zc_allreduce(comm, in, out, COUNT, ZC_DTYPE_F32, ZC_OP_SUM);
    zc_request_t *req;
    zc_status_t status = zc_iallreduce(comm, in, out, COUNT, ZC_DTYPE_F32, ZC_OP_SUM, 0, &req);
    return status == ZC_OK ? zc_wait(&req) : status;
}

static int rank_main(int rank, int size, void *arg)
{
    const int nonblocking = arg != NULL;
    zc_comm_t *comm;
    float *in, *out;

    if (rank_start(rank, COUNT, 7, &in, &out))
        return 1;
    hier_set_host(rank, size);
    zc_harness_step("zc_comm_init");
    zc_status_t status = zc_comm_init(&comm);
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));

    /* warm: connections up, buffers touched; the last call is where every rank meets */
    for (int i = 0; i < 3; i++) {
        zc_harness_step("warm-up call %d", i);
        status = allreduce(comm, in, out, nonblocking);
        CHECK(status == ZC_OK, "warm-up call %d: %s", i, zc_status_string(status));
    }
    if (rank == late_rank) {
        struct timespec ts = {.tv_sec = (time_t)DELAY_S,
                              .tv_nsec = (long)((DELAY_S - (double)(time_t)DELAY_S) * 1e9)};
        nanosleep(&ts, NULL);
    }
    zc_harness_step("the call rank %d is late for", late_rank);
    double cpu0 = cpu_s();
    uint64_t t0 = zc_time_ns();
    status = allreduce(comm, in, out, nonblocking);
    double wall = (double)(zc_time_ns() - t0) / 1e9, cpu = cpu_s() - cpu0;
    CHECK(status == ZC_OK, "the late call: %s", zc_status_string(status));
    int qsgd = getenv("ZIPCCL_CODEC") && strcmp(getenv("ZIPCCL_CODEC"), "qsgd") == 0;
    for (size_t i = 0; i < COUNT; i++) {
        float want = (float)(size * (size + 1) / 2 * (int)(i % 7));
        /* QSGD rounds each value between two levels of its bucket's largest magnitude */
        float slack = qsgd ? (float)(6 * size * (size + 1) / 2) : 0.0f;
        CHECK(fabsf(out[i] - want) <= slack, "value %zu is %g, not %g", i, out[i], want);
    }
    fprintf(stderr, "rank %d: %s the call: %.3f s wall, %.3f s CPU (%.0f%% of a core)\n", rank,
            rank == late_rank ? "late for" : "waited in", wall, cpu, 100.0 * cpu / wall);
    if (rank != late_rank)
        CHECK(wall > 0.5 * DELAY_S, "waited only %.3f s for a rank %.1f s late", wall, DELAY_S);
    waits[rank] = (waited_t){.cpu_s = cpu, .wall_s = wall};
    zc_harness_step("the call after");
    status = allreduce(comm, in, out, nonblocking); /* every rank wrote its wait */
    CHECK(status == ZC_OK, "the call after: %s", zc_status_string(status));
    double cpu_sum = 0, wall_max = 0;
    for (int r = 0; r < size; r++) {
        if (r == late_rank)
            continue;
        cpu_sum += waits[r].cpu_s;
        wall_max = waits[r].wall_s > wall_max ? waits[r].wall_s : wall_max;
    }
    CHECK(cpu_sum < MAX_CPU_SHARE * wall_max,
          "the %d waiting rank(s) used %.3f s of CPU in %.3f s (%.0f%% of a core; at most %.0f%%)",
          size - 1, cpu_sum, wall_max, 100.0 * cpu_sum / wall_max, 100.0 * MAX_CPU_SHARE);
    zc_harness_step("zc_comm_destroy");
    zc_comm_destroy(comm);
    free(in);
    free(out);
    return 0;
}

/* ---- init-round ---------------------------------------------------------------------------- */

#define ROUND_COUNT (1u << 14) /* 64 KiB of f32: a call of a few rounds and little codec work */
#define ROUND_CALLS 21

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Every rank on @p cpu: more ranks than cores, as on a loaded machine, without depending on one. */
static int pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

static int round_rank(int rank, int size, void *arg)
{
    const int cpu = *(const int *)arg;
    zc_comm_t *comm;
    float *in, *out;
    double t[ROUND_CALLS];

    (void)size;
    if (rank_start(rank, ROUND_COUNT, 5, &in, &out))
        return 1;
    CHECK(pin_to(cpu) == 0, "sched_setaffinity to CPU %d failed", cpu);
    zc_harness_step("zc_comm_init");
    zc_status_t status = zc_comm_init(&comm);
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));
    for (int i = 0; i < ROUND_CALLS; i++) {
        zc_harness_step("call %d", i);
        uint64_t t0 = zc_time_ns();
        status = zc_allreduce(comm, in, out, ROUND_COUNT, ZC_DTYPE_F32, ZC_OP_SUM);
        t[i] = (double)(zc_time_ns() - t0) / 1e9;
        CHECK(status == ZC_OK, "call %d: %s", i, zc_status_string(status));
    }
    zc_comm_destroy(comm);
    free(in);
    free(out);
    if (rank != 0)
        return 0;
    qsort(t, ROUND_CALLS, sizeof(t[0]), cmp_double);
    const char *line = strstr(logged, "policy: 4 ranks, link");
    const char *at = line ? strstr(line, ", round ") : NULL;
    double round_us = -1;
    CHECK(at && sscanf(at, ", round %lf us", &round_us) == 1,
          "no measured round in rank 0's log: %s", logged);
    fprintf(stderr, "init-round: the round measured at init %.1f us, a call's median %.1f us\n",
            round_us, t[ROUND_CALLS / 2] * 1e6);
    CHECK(round_us * 1e-6 <= t[ROUND_CALLS / 2],
          "init measured a round of %.1f us, longer than a whole call of two rounds (median "
          "%.1f us)",
          round_us, t[ROUND_CALLS / 2] * 1e6);
    return 0;
}

static int case_init_round(void)
{
    cpu_set_t set;
    int cpu = 0;

    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 1;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set))
        cpu++;
    setenv("ZIPCCL_CODEC", "qsgd", 1);
    setenv("ZIPCCL_ALGO", "auto", 1);
    setenv("ZIPCCL_LOG_LEVEL", "info", 1);
    zc_harness_opts_t o = {.nranks = 4, .deadline_s = 90};
    return zc_harness_run(&o, round_rank, &cpu) != 0;
}

static int run_case(const char *name)
{
    int nranks = 2, nonblocking = 0;

    setenv("ZIPCCL_MIN_BYTES", "0", 1);
    late_rank = 1;
    if (strcmp(name, "init-round") == 0)
        return case_init_round();
    if (strcmp(name, "wait") == 0) {
        setenv("ZIPCCL_CODEC", "none", 1);
    } else if (strcmp(name, "wait-thread") == 0) {
        setenv("ZIPCCL_CODEC", "none", 1);
        setenv("ZIPCCL_PROGRESS_THREAD", "1", 1);
        nonblocking = 1;
    } else if (strcmp(name, "wait-qsgd") == 0) {
        setenv("ZIPCCL_CODEC", "qsgd", 1);
        setenv("ZIPCCL_ALGO", "allgather", 1);
    } else {
        return -1;
    }
    if (getenv("ZIPCCL_TOPOLOGY")) { /* hier-: 2 hosts of 2, the late rank's local peer waits */
        nranks = 4;
        late_rank = 2;
    }
    waits = shared_map((size_t)nranks * sizeof(*waits));
    if (!waits)
        return 1;
    zc_harness_opts_t o = {.nranks = nranks, .deadline_s = 60};
    return zc_harness_run(&o, rank_main, nonblocking ? &o : NULL) != 0;
}

int main(int argc, char **argv)
{
    return case_main(argc, argv, run_case);
}
