/*
 * The failure soak (docs/failures.md): 4 ranks all-reduce mixed sizes over four communicators
 * with different codecs and algorithms (qsgd scatter, fp16 compressed ring, top-k allgather,
 * the raw ring), with ZIPCCL_TIMEOUT_S=25 (above UCX's 20 s keepalive), until one rank, at a
 * random time, is stopped (SIGSTOP) or killed. Every other rank must fail within
 * ZIPCCL_TIMEOUT_S + 2 s of that and print the error it got; nothing may hang (the harness
 * kills the run at its deadline and that is a failure).
 *
 * Usage: soak SEED. The seed chooses the victim, stop or kill, the time (20 to 170 s in) and
 * the sequence of calls, the same on every rank. scripts/soak.sh runs it for many seeds.
 * Output: one line per survivor, "soak: rank R: call N on comm C failed X s after rank V
 * was stopped|killed: <the error it logged>", then "soak SEED: passed|FAILED".
 */
#include "harness.h"
#include "rank_check.h"

#include "common/compiler.h"
#include "common/timer.h"

#include <zipccl/zipccl.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NRANKS 4
#define NCOMMS 4
#define TIMEOUT_S 25
#define MAX_COUNT (4u << 20) /* 16 MiB of f32 */

typedef struct shared {
    int root_port_taken;
    pid_t pids[NRANKS];
    uint64_t event_ns; /* when the victim was stopped or is to be killed */
} shared_t;

typedef struct soak {
    uint64_t seed;
    int victim;
    int kill; /* 0: SIGSTOP */
    double at_s;
} soak_t;

static const char *const comm_settings[NCOMMS][2] = {
    {"qsgd", "scatter"},
    {"fp16", "ring"},
    {"topk", "allgather"},
    {"none", "auto"},
};

static shared_t *shared;

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static double since_s(uint64_t start)
{
    return (double)(zc_time_ns() - start) / 1e9;
}

/* Communicator @p k, its bootstrap on the root's port + k. */
static zc_status_t comm_open(int k, zc_comm_t **comm_p)
{
    const char *root = getenv("ZIPCCL_ROOT");
    const char *colon = root ? strrchr(root, ':') : NULL;
    zc_comm_config_t *config;
    char value[64];

    if (!colon)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_comm_config_create(1, &config));
    snprintf(value, sizeof(value), "%.*s:%d", (int)(colon - root), root, atoi(colon + 1) + k);
    zc_status_t status = zc_comm_config_set(config, "ZIPCCL_ROOT", value);
    if (status == ZC_OK)
        status = zc_comm_config_set(config, "ZIPCCL_CODEC", comm_settings[k][0]);
    if (status == ZC_OK)
        status = zc_comm_config_set(config, "ZIPCCL_ALGO", comm_settings[k][1]);
    if (status == ZC_OK)
        status = zc_comm_init_config(config, comm_p);
    zc_comm_config_destroy(config);
    return status;
}

static void *stop_later(void *arg)
{
    const soak_t *s = arg;
    usleep((useconds_t)(s->at_s * 1e6));
    __atomic_store_n(&shared->event_ns, zc_time_ns(), __ATOMIC_SEQ_CST);
    kill(getpid(), SIGSTOP);
    return NULL;
}

/* The last error line this rank logged (the one its failing call ended with). */
static const char *last_error(void)
{
    size_t len = strlen(logged);
    while (len > 0 && logged[len - 1] == '\n')
        len--;
    size_t start = len;
    while (start > 0 && logged[start - 1] != '\n')
        start--;
    static char line[1024];
    snprintf(line, sizeof(line), "%.*s", (int)(len - start), logged + start);
    return line;
}

static int soak_rank(int rank, int size, void *arg)
{
    const soak_t *s = arg;
    zc_comm_t *comms[NCOMMS] = {0};
    float *send = malloc(MAX_COUNT * sizeof(float)), *recv = malloc(MAX_COUNT * sizeof(float));

    my_rank = rank;
    zc_log_set_sink(capture_sink, NULL);
    CHECK(send && recv, "out of memory");
    for (size_t i = 0; i < MAX_COUNT; i++)
        send[i] = (float)((i * 7 + (size_t)rank) % 101) * 0.01f - 0.5f;
    shared->pids[rank] = getpid();
    for (int k = 0; k < NCOMMS; k++) {
        zc_harness_step("comm %d init", k);
        zc_status_t status = comm_open(k, &comms[k]);
        if (status == ZC_ERR_IO && rank == 0 && strstr(logged, "cannot listen on port"))
            shared->root_port_taken = 1;
        CHECK(status == ZC_OK, "comm %d (%s %s): %s", k, comm_settings[k][0], comm_settings[k][1],
              zc_status_string(status));
    }
    logged[0] = '\0';
    pthread_t stopper;
    if (rank == s->victim) {
        if (s->kill)
            __atomic_store_n(&shared->event_ns, zc_time_ns() + (uint64_t)(s->at_s * 1e9),
                             __ATOMIC_SEQ_CST);
        else
            CHECK(pthread_create(&stopper, NULL, stop_later, (void *)s) == 0, "pthread_create");
    }
    zc_harness_step("soak"); /* the harness kills the victim at_s after this */

    static const size_t counts[] = {256, 16384, 262144, 1u << 20, MAX_COUNT};
    zc_status_t status = ZC_OK;
    uint64_t call = 0, begin = zc_time_ns();
    int k = 0;
    for (; status == ZC_OK && since_s(begin) < s->at_s + 3 * TIMEOUT_S; call++) {
        uint64_t h = mix64(s->seed * 1000003 + call);
        k = (int)(h % NCOMMS);
        size_t count = counts[(h >> 8) % ZC_ARRAY_SIZE(counts)];
        zc_harness_step("soak call %" PRIu64 " comm %d count %zu", call, k, count);
        status = zc_allreduce(comms[k], send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
    }
    uint64_t failed_ns = zc_time_ns();
    uint64_t event_ns = __atomic_load_n(&shared->event_ns, __ATOMIC_SEQ_CST);

    if (rank == s->victim) {
        /* resumed by a survivor after its stop */
        CHECK(status != ZC_OK, "the victim's calls still succeed after it resumed");
        pthread_join(stopper, NULL);
    } else {
        CHECK(status != ZC_OK, "call %" PRIu64 " on comm %d: no failure after %.0f s", call - 1, k,
              since_s(begin));
        CHECK(event_ns && event_ns < failed_ns,
              "call %" PRIu64 " failed (%s) before rank %d was %s", call - 1,
              zc_status_string(status), s->victim, s->kill ? "killed" : "stopped");
        double after = (double)(failed_ns - event_ns) / 1e9;
        printf("soak: rank %d: call %" PRIu64 " on comm %d (%s %s) failed %.2f s after rank %d was "
               "%s: %s\n",
               rank, call - 1, k, comm_settings[k][0], comm_settings[k][1], after, s->victim,
               s->kill ? "killed" : "stopped", last_error());
        fflush(stdout);
        CHECK(after < TIMEOUT_S + 2.0, "failed %.1f s after the event, ZIPCCL_TIMEOUT_S is %d",
              after, TIMEOUT_S);
        if (!s->kill)
            kill(shared->pids[s->victim], SIGCONT);
    }
    for (int j = 0; j < NCOMMS; j++) {
        zc_harness_step("comm %d destroy", j);
        zc_comm_destroy(comms[j]);
    }
    free(send);
    free(recv);
    return FAILED_AS_EXPECTED;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SEED\n", argv[0]);
        return 2;
    }
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    soak_t s = {.seed = strtoull(argv[1], NULL, 10)};
    uint64_t h = mix64(s.seed);
    s.victim = (int)(h % NRANKS);
    s.kill = (int)((h >> 8) & 1);
    s.at_s = 20.0 + (double)((h >> 16) % 15000) / 100.0;
    fprintf(stderr, "soak %" PRIu64 ": rank %d %s at %.2f s, ZIPCCL_TIMEOUT_S=%d\n", s.seed,
            s.victim, s.kill ? "killed" : "stopped", s.at_s, TIMEOUT_S);

    char timeout[64];
    snprintf(timeout, sizeof(timeout), "ZIPCCL_TIMEOUT_S=%d", TIMEOUT_S);
    char *const env[] = {timeout, "ZIPCCL_MIN_BYTES=0", "OPENBLAS_NUM_THREADS=1", NULL};
    unsigned long all = (1ul << NRANKS) - 1;
    zc_harness_opts_t o = {.nranks = NRANKS,
                           .deadline_s = s.at_s + 4 * TIMEOUT_S + 60,
                           .expect_fail_mask = s.kill ? all & ~(1ul << s.victim) : all,
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    if (s.kill) {
        o.kill_rank = s.victim;
        o.kill_at_step = "soak";
        o.kill_after_s = s.at_s;
    }
    uint64_t start = zc_time_ns();
    int rc = -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(shared, 0, sizeof(*shared));
        rc = zc_harness_run(&o, soak_rank, &s);
        if (rc == 0 || !shared->root_port_taken)
            break;
    }
    fprintf(stderr, "soak %" PRIu64 ": %s in %.1f s\n", s.seed, rc ? "FAILED" : "passed",
            since_s(start));
    return rc ? 1 : 0;
}
