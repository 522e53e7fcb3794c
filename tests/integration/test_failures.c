/*
 * Failures every rank must see, in bounded time (docs/failures.md), through the public API
 * and the log sink, with the tests' copy of the collectives layer (ZC_TEST_FAULT):
 *
 *   stall-ALGO[-slow]   rank 2 stops itself (SIGSTOP) in the middle of a run of all-reduces;
 *                       every other rank fails within ZIPCCL_TIMEOUT_S + 2 s of the stop,
 *                       naming rank 2. -slow: ZIPCCL_TIMEOUT_S=25, above UCX's 20 s keepalive
 *                       (whose traffic once pushed the deadline back forever).
 *   stall-behind-allgather  rank 2 stops itself (ZC_TEST_FAULT's stop) in call 5 after its
 *                       payload went to rank 3, before it goes to ranks 0 and 1; rank 3 (done
 *                       with call 5, ZIPCCL_TIMEOUT_S=2 where the others have 5) times out
 *                       first, in call 6's header exchange, blaming rank 0. Every survivor
 *                       fails within 2 + 2 s of the start of call 5 (ranks 0 and 1 in call 5,
 *                       rank 3 in call 6), and the error every later call repeats names
 *                       rank 2 as the rank waited for.
 *   bad-KIND-ALGO       rank 1 sends one short, over-long or corrupt payload in call 2; every
 *                       rank fails call 2 (or, when it had completed call 2 correctly before
 *                       the abort reached it, call 3) within 2 s, naming rank 1, and every
 *                       later call fails at once. KIND flip: one bit of a body flipped, with
 *                       ZIPCCL_CHECKSUM=1 (without it the flip can pass as another value).
 *   config-VAR          rank 2 sets a wire setting differently; every rank's zc_comm_init
 *                       fails at once, naming the variable
 *   kill-named[-compressed]  rank 2 is killed mid-collective; every survivor's error names
 *                       rank 2, and none names a survivor (and, before, zc_comm_agree_max
 *                       agrees without counting as a call; after a failure it fails at once)
 *   kill-named-rank3[-compressed]  the same with rank 3 killed (on two hosts of two: not its
 *                       host's leader, where rank 2 is one)
 *
 *   hier-CASE           CASE with ZIPCCL_TOPOLOGY=shards, ranks 0-1 and 2-3 as two hosts
 *                       (rank_check.h): rank 2's local peer finds it through shared memory
 *   hier-onehost-CASE   the same with the 4 ranks on one host
 *   leader-CASE         CASE with ZIPCCL_TOPOLOGY=leader on the same two hosts: rank 0 and
 *                       rank 2 are the leaders, which alone all-reduce between hosts
 *
 * ALGO: ring (raw, ZIPCCL_CODEC=none), cring (fp16 on the compressed ring), allgather and
 * scatter (qsgd). Usage: test_failures CASE; exit 0 when the case passed.
 */
#include "harness.h"
#include "rank_check.h"

#include "common/compiler.h"
#include "common/timer.h"

#include <zipccl/zipccl.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NRANKS 4
#define VICTIM 2 /* stalled, killed or configured differently */
#define FAULTY 1 /* sends the bad payload */
#define BAD_CALL 2

/* Mapped before the fork: what the ranks of one run tell each other. */
typedef struct shared {
    int root_port_taken;
    pid_t pids[NRANKS];
    uint64_t stop_ns; /* when the victim stopped itself (zc_time_ns: CLOCK_MONOTONIC) */
    int checked;      /* survivors that checked their error (resume_victim) */
} shared_t;

static shared_t *shared;
static zc_comm_t *comm;

static double since_s(uint64_t start)
{
    return (double)(zc_time_ns() - start) / 1e9;
}

static int logged_has(const char *text)
{
    return strstr(logged, text) != NULL;
}

static int start_rank(int rank)
{
    my_rank = rank;
    logged[0] = '\0';
    shared->pids[rank] = getpid();
    zc_log_set_sink(capture_sink, NULL);
    zc_harness_step("zc_comm_init");
    hier_set_host(rank, NRANKS);
    zc_status_t status = zc_comm_init(&comm);
    if (status == ZC_ERR_IO && rank == 0 && logged_has("cannot listen on port"))
        shared->root_port_taken = 1;
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));
    return 0;
}

/* zc_harness_run, again (up to 3 times) when the root's port was taken before rank 0 bound it. */
static int run_ranks(const zc_harness_opts_t *o, zc_rank_main_fn fn, void *arg)
{
    int rc = -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(shared, 0, sizeof(*shared));
        rc = zc_harness_run(o, fn, arg);
        if (rc == 0 || !shared->root_port_taken)
            break;
        fprintf(stderr, "another process took the root's port before rank 0 bound it: again\n");
    }
    return rc;
}

/*
 * Runs @p fn on every rank with @p env, every rank expected to fail as the case wants
 * (FAILED_AS_EXPECTED); says how it went ("@p what: ok in 9.7 s"). 0 when it passed.
 */
static int run_failing(char *const *env, double deadline_s, zc_rank_main_fn fn, void *arg,
                       const char *what)
{
    zc_harness_opts_t o = {.nranks = NRANKS,
                           .deadline_s = deadline_s,
                           .expect_fail_mask = (1ul << NRANKS) - 1,
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    uint64_t start = zc_time_ns();
    int rc = run_ranks(&o, fn, arg);
    fprintf(stderr, "%s: %s in %.1f s\n", what, rc ? "FAILED" : "ok", since_s(start));
    return rc != 0;
}

/* Input of rank @p rank: small integers, so that every sum is exact in f32. */
static void fill(float *buf, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(rank + 1 + (int)(i % 7));
}

/* A rank's input and output of @p count values, then its communicator; 0 or 1 (logged). */
static int start_with_buffers(int rank, size_t count, float **send_p, float **recv_p)
{
    *send_p = malloc(count * sizeof(float));
    *recv_p = malloc(count * sizeof(float));
    CHECK(*send_p && *recv_p, "out of memory");
    fill(*send_p, count, rank);
    return start_rank(rank);
}

/* The end of a rank whose communicator failed as the case expects. */
static int failed_as_expected(float *send, float *recv)
{
    zc_comm_destroy(comm);
    free(send);
    free(recv);
    return FAILED_AS_EXPECTED;
}

/* The sum of every rank's fill() within @p tolerance (absolute; 0 on the raw path: exact). */
static int check_sum(const float *recv, size_t count, int size, double tolerance)
{
    for (size_t i = 0; i < count; i++) {
        double want = size * (size + 1) / 2.0 + size * (double)(i % 7);
        double err = recv[i] - want;
        CHECK(err <= tolerance && -err <= tolerance, "element %zu of the result is %g, expected %g",
              i, recv[i], want);
    }
    return 0;
}

typedef struct algo_env {
    const char *name;
    const char *codec, *algo;
    /*
     * The largest error of a correct result, absolute. Inputs are integers up to M = 10, sums
     * up to 40. fp16 holds them exactly. QSGD (4 bits: s = 7 levels, max scale) errs by less
     * than M/s per rank's value, so an allgather by N M / s = 5.7; scatter re-encodes the
     * owner's sum (scale at most 40 + 5.7), adding 45.7 / 7 = 6.5: 12.2 in all.
     */
    double tolerance;
} algo_env_t;

static const algo_env_t algos[] = {
    {"ring", "ZIPCCL_CODEC=none", "ZIPCCL_ALGO=auto", 0},
    {"cring", "ZIPCCL_CODEC=fp16", "ZIPCCL_ALGO=ring", 0},
    {"allgather", "ZIPCCL_CODEC=qsgd", "ZIPCCL_ALGO=allgather", 5.8},
    {"scatter", "ZIPCCL_CODEC=qsgd", "ZIPCCL_ALGO=scatter", 12.3},
};

static const algo_env_t *find_algo(const char *name)
{
    for (size_t i = 0; i < ZC_ARRAY_SIZE(algos); i++)
        if (strcmp(algos[i].name, name) == 0)
            return &algos[i];
    return NULL;
}

/* A call on the broken communicator fails, at once; 0 or 1 (logged). */
static int later_call_fails(const float *send, float *recv, size_t count)
{
    uint64_t t = zc_time_ns();
    CHECK(zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM) != ZC_OK,
          "a call after the failure succeeded");
    CHECK(since_s(t) < 0.5, "a call after the failure took %.2f s", since_s(t));
    return 0;
}

/*
 * A survivor has checked its error: the stopped victim resumes (SIGCONT) once
 * every survivor has (or 10 s passed), since a victim that resumes earlier
 * answers the aborts that blame it (it is alive) while a survivor may still be
 * gathering them to name the stalled rank.
 */
static void resume_victim(void)
{
    uint64_t t = zc_time_ns();
    __atomic_add_fetch(&shared->checked, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&shared->checked, __ATOMIC_SEQ_CST) < NRANKS - 1 && since_s(t) < 10)
        usleep(10 * 1000);
    kill(shared->pids[VICTIM], SIGCONT);
}

/* ---- a stalled peer ---------------------------------------------------------------------------
 */

typedef struct stall_case {
    const algo_env_t *algo;
    int timeout_s;
} stall_case_t;

static void *stop_later(void *arg)
{
    (void)arg;
    usleep(700 * 1000); /* well into the run of all-reduces */
    __atomic_store_n(&shared->stop_ns, zc_time_ns(), __ATOMIC_SEQ_CST);
    kill(getpid(), SIGSTOP); /* the whole process, as a debugger or the OOM killer's swap would */
    return NULL;
}

static int stall_rank(int rank, int size, void *arg)
{
    const stall_case_t *sc = arg;
    const size_t count = 1u << 20; /* 4 MiB per call: several chunks in flight */
    float *send, *recv;
    if (start_with_buffers(rank, count, &send, &recv))
        return 1;
    pthread_t stopper;
    if (rank == VICTIM)
        CHECK(pthread_create(&stopper, NULL, stop_later, NULL) == 0, "pthread_create");

    zc_status_t status = ZC_OK;
    int k;
    uint64_t begin = zc_time_ns();
    for (k = 0; status == ZC_OK && since_s(begin) < 3.0 * sc->timeout_s + 30; k++) {
        zc_harness_step("allreduce %d", k);
        status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
    }
    uint64_t failed_ns = zc_time_ns();
    if (rank == VICTIM) {
        /* resumed by a survivor: its call was aborted, or its peers are gone */
        CHECK(status != ZC_OK, "the stalled rank's calls still succeed after it resumed");
        pthread_join(stopper, NULL);
        zc_comm_destroy(comm);
        return FAILED_AS_EXPECTED;
    }
    uint64_t stop_ns = __atomic_load_n(&shared->stop_ns, __ATOMIC_SEQ_CST);
    CHECK(status == ZC_ERR_TIMEOUT || status == ZC_ERR_PEER, "call %d after the stall: %s", k - 1,
          zc_status_string(status));
    CHECK(stop_ns != 0 && stop_ns < failed_ns, "call %d failed before rank %d stopped", k - 1,
          VICTIM);
    double after = (double)(failed_ns - stop_ns) / 1e9;
    fprintf(stderr, "rank %d: failed %.2f s after rank %d stopped (ZIPCCL_TIMEOUT_S=%d)\n", rank,
            after, VICTIM, sc->timeout_s);
    CHECK(after < sc->timeout_s + 2.0, "failed %.1f s after the stall, ZIPCCL_TIMEOUT_S is %d",
          after, sc->timeout_s);
    char name[32];
    snprintf(name, sizeof(name), "rank %d", VICTIM);
    CHECK(logged_has("timed out") && logged_has(name),
          "the error does not say that rank %d timed out: %s", VICTIM, logged);
    /* later calls fail at once */
    if (later_call_fails(send, recv, count))
        return 1;
    resume_victim();
    return failed_as_expected(send, recv);
}

static int case_stall(const char *algo, int timeout_s)
{
    stall_case_t sc = {.algo = find_algo(algo), .timeout_s = timeout_s};
    if (!sc.algo)
        return -1;
    char timeout[64];
    snprintf(timeout, sizeof(timeout), "ZIPCCL_TIMEOUT_S=%d", timeout_s);
    char *const env[] = {
        (char *)sc.algo->codec,      (char *)sc.algo->algo, timeout, "ZIPCCL_MIN_BYTES=0",
        "ZIPCCL_CHUNK_BYTES=256KiB", "ZIPCCL_QSGD_BITS=4",  NULL};
    char what[96];
    snprintf(what, sizeof(what), "stall %s, ZIPCCL_TIMEOUT_S=%d", algo, timeout_s);
    return run_failing(env, 3.0 * timeout_s + 60, stall_rank, &sc, what);
}

/* ---- a stalled rank behind a rank one call ahead ----------------------------------------------
 */

#define BEHIND_CALL 5     /* the call rank VICTIM stops in */
#define AHEAD 3           /* got VICTIM's payload of that call before the stop */
#define AHEAD_TIMEOUT_S 2 /* AHEAD's ZIPCCL_TIMEOUT_S: it times out first */
#define BEHIND_TIMEOUT_S 5

static int behind_rank(int rank, int size, void *arg)
{
    const algo_env_t *ae = arg;
    /* one chunk, a payload of some 600 bytes: eager, so the sends posted before the stop leave */
    const size_t count = 1024;
    char timeout[16];
    snprintf(timeout, sizeof(timeout), "%d", rank == AHEAD ? AHEAD_TIMEOUT_S : BEHIND_TIMEOUT_S);
    setenv("ZIPCCL_TIMEOUT_S", timeout, 1);
    float *send, *recv;
    if (start_with_buffers(rank, count, &send, &recv))
        return 1;

    zc_status_t status = ZC_OK;
    int k;
    uint64_t call_ns = 0;
    for (k = 0; status == ZC_OK && k <= BEHIND_CALL + 1; k++) {
        zc_harness_step("allreduce %d", k);
        if (k == BEHIND_CALL)
            call_ns = zc_time_ns();
        status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
        if (status == ZC_OK && check_sum(recv, count, size, ae->tolerance))
            return 1;
    }
    uint64_t failed_ns = zc_time_ns();
    if (rank == VICTIM) {
        /* resumed by a survivor: its call was aborted */
        CHECK(status != ZC_OK, "the stalled rank's calls still succeed after it resumed");
        zc_comm_destroy(comm);
        return FAILED_AS_EXPECTED;
    }
    /* rank VICTIM stopped in call BEHIND_CALL, after every rank had started it (headers) */
    int want = rank == AHEAD ? BEHIND_CALL + 1 : BEHIND_CALL;
    CHECK(status == ZC_ERR_TIMEOUT, "call %d after the stall: %s", k - 1, zc_status_string(status));
    CHECK(k - 1 == want, "call %d failed, not call %d", k - 1, want);
    double after = (double)(failed_ns - call_ns) / 1e9;
    fprintf(stderr, "rank %d: failed call %d %.2f s after call %d started\n", rank, k - 1, after,
            BEHIND_CALL);
    /* rank AHEAD's timeout, not their own (BEHIND_TIMEOUT_S), ends the others' call */
    CHECK(after < AHEAD_TIMEOUT_S + 2.0,
          "failed %.1f s after call %d started, rank %d's ZIPCCL_TIMEOUT_S is %d", after,
          BEHIND_CALL, AHEAD, AHEAD_TIMEOUT_S);
    /* the communicator's error, once the aborts settled: a later call fails at once with it */
    logged[0] = '\0';
    if (later_call_fails(send, recv, count))
        return 1;
    char name[48];
    snprintf(name, sizeof(name), "for rank %d in allreduce #%d", VICTIM, BEHIND_CALL);
    CHECK(logged_has("failed earlier") && logged_has("timed out") && logged_has(name),
          "the error does not name rank %d as the rank waited for in call %d: %s", VICTIM,
          BEHIND_CALL, logged);
    resume_victim();
    return failed_as_expected(send, recv);
}

static int case_stall_behind(const char *algo)
{
    const algo_env_t *ae = find_algo(algo);
    if (!ae || strcmp(algo, "allgather") != 0)
        return -1; /* the others do not send every rank's data to every rank */
    char fault[64];
    snprintf(fault, sizeof(fault), "ZC_TEST_FAULT=%d:%d:stop:%d", VICTIM, BEHIND_CALL, 0);
    char *const env[] = {(char *)ae->codec,    (char *)ae->algo,     fault,
                         "ZIPCCL_MIN_BYTES=0", "ZIPCCL_QSGD_BITS=4", NULL};
    return run_failing(env, 60, behind_rank, (void *)ae, "stall behind, allgather");
}

/* ---- a bad payload ----------------------------------------------------------------------------
 */

#define BAD_CALLS 5

static int bad_rank(int rank, int size, void *arg)
{
    const algo_env_t *ae = arg;
    const size_t count = 1u << 16;
    float *send, *recv;
    if (start_with_buffers(rank, count, &send, &recv))
        return 1;
    zc_status_t status[BAD_CALLS];
    double secs[BAD_CALLS];
    int first_failed = -1;
    for (int k = 0; k < BAD_CALLS; k++) {
        zc_harness_step("allreduce %d", k);
        uint64_t t = zc_time_ns();
        status[k] = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
        secs[k] = since_s(t);
        if (status[k] == ZC_OK) {
            CHECK(first_failed < 0, "call %d succeeded after call %d failed", k, first_failed);
            /* a call that succeeded has the right result, the bad call included */
            if (check_sum(recv, count, size, ae->tolerance))
                return 1;
        } else if (first_failed < 0) {
            first_failed = k;
        }
    }
    CHECK(first_failed == BAD_CALL || first_failed == BAD_CALL + 1,
          "the first call to fail is %d; rank %d's bad payload was in call %d", first_failed,
          FAULTY, BAD_CALL);
    CHECK(secs[first_failed] < 2.0, "failing call %d took %.2f s", first_failed,
          secs[first_failed]);
    for (int k = first_failed + 1; k < BAD_CALLS; k++)
        CHECK(secs[k] < 0.5, "call %d, after the failure, took %.2f s", k, secs[k]);
    /* the frontends' agreement fails at once too: it is how they learn, safely, after a death */
    int32_t any = -1;
    uint64_t t = zc_time_ns();
    CHECK(zc_comm_agree_max(comm, 1, &any) != ZC_OK && any == -1,
          "zc_comm_agree_max on the broken communicator succeeded");
    CHECK(since_s(t) < 0.5, "zc_comm_agree_max on the broken communicator took %.2f s", since_s(t));
    char name[32];
    snprintf(name, sizeof(name), "rank %d", FAULTY);
    CHECK(logged_has(name), "the error does not name rank %d: %s", FAULTY, logged);
    fprintf(stderr, "rank %d: call %d failed in %.3f s (%s)\n", rank, first_failed,
            secs[first_failed], zc_status_string(status[first_failed]));
    return failed_as_expected(send, recv);
}

static int case_bad(const char *kind, const char *algo)
{
    const algo_env_t *ae = find_algo(algo);
    if (!ae)
        return -1;
    char fault[64];
    snprintf(fault, sizeof(fault), "ZC_TEST_FAULT=%d:%d:%s", FAULTY, BAD_CALL, kind);
    /* the default deadline's order: a failure noticed only by a timeout would take 60 s */
    char *const env[] = {(char *)ae->codec,
                         (char *)ae->algo,
                         fault,
                         "ZIPCCL_TIMEOUT_S=60",
                         "ZIPCCL_MIN_BYTES=0",
                         "ZIPCCL_CHUNK_BYTES=64KiB",
                         "ZIPCCL_QSGD_BITS=4",
                         "ZIPCCL_QSGD_SCALE=max",
                         strcmp(kind, "flip") == 0 ? "ZIPCCL_CHECKSUM=1" : NULL,
                         NULL};
    char what[96];
    snprintf(what, sizeof(what), "%s payload, %s", kind, algo);
    return run_failing(env, 60, bad_rank, (void *)ae, what);
}

/* ---- a configuration that differs ---------------------------------------------------------------
 */

typedef struct config_case {
    const char *variable, *common, *victims;
} config_case_t;

static int config_rank(int rank, int size, void *arg)
{
    const config_case_t *cc = arg;
    my_rank = rank;
    logged[0] = '\0';
    zc_log_set_sink(capture_sink, NULL);
    setenv(cc->variable, rank == VICTIM ? cc->victims : cc->common, 1);
    zc_harness_step("zc_comm_init");
    uint64_t t = zc_time_ns();
    zc_status_t status = zc_comm_init(&comm);
    if (status == ZC_ERR_IO && rank == 0 && logged_has("cannot listen on port"))
        shared->root_port_taken = 1;
    CHECK(status == ZC_ERR_INVALID_CONFIG, "zc_comm_init with %s=%s on rank %d: %s", cc->variable,
          cc->victims, VICTIM, zc_status_string(status));
    CHECK(since_s(t) < 10, "zc_comm_init took %.1f s to fail", since_s(t));
    char want[160];
    snprintf(want, sizeof(want), "%s differs between ranks: rank 0 has %s, rank %d has %s",
             cc->variable, cc->common, VICTIM, cc->victims);
    CHECK(logged_has(want), "the error does not say '%s': %s", want, logged);
    return FAILED_AS_EXPECTED;
}

static int case_config(const char *variable, const char *common, const char *victims)
{
    config_case_t cc = {variable, common, victims};
    zc_harness_opts_t o = {.nranks = NRANKS,
                           .deadline_s = 60,
                           .expect_fail_mask = (1ul << NRANKS) - 1,
                           .expect_fail_status = FAILED_AS_EXPECTED};
    int rc = run_ranks(&o, config_rank, &cc);
    fprintf(stderr, "%s differing: %s\n", variable, rc ? "FAILED" : "ok");
    return rc != 0;
}

/* ---- a killed rank is named
 * ---------------------------------------------------------------------- */

static int victim = VICTIM; /* the rank kill_rank's run kills: set before the fork */

static int kill_rank(int rank, int size, void *arg)
{
    const size_t count = 4u << 20;
    float *send, *recv;
    if (start_with_buffers(rank, count, &send, &recv))
        return 1;
    /* zc_comm_agree_max on a healthy communicator: the maximum, not counted as a call */
    int32_t max = -1;
    zc_stats_t st;
    CHECK(zc_comm_agree_max(comm, rank * 10, &max) == ZC_OK && max == (size - 1) * 10,
          "zc_comm_agree_max of rank * 10 gave %d", (int)max);
    CHECK(zc_comm_stats(comm, &st) == ZC_OK && st.calls == 0,
          "zc_comm_agree_max counted as %llu all-reduce calls", (unsigned long long)st.calls);
    zc_status_t status = ZC_OK;
    double last_s = 0;
    uint64_t begin = zc_time_ns();
    for (int k = 0; status == ZC_OK && since_s(begin) < 50; k++) {
        zc_harness_step("allreduce %d", k);
        uint64_t t = zc_time_ns();
        status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
        last_s = since_s(t);
    }
    CHECK(status == ZC_ERR_PEER, "the call rank %d died in: %s", victim, zc_status_string(status));
    /* the peer error (UCX) ends it, not the deadline (60 s) */
    CHECK(last_s < 10, "the failing call took %.1f s", last_s);
    char dead[32], alive[32];
    snprintf(dead, sizeof(dead), "rank %d", victim);
    CHECK(logged_has(dead), "the error does not name rank %d: %s", victim, logged);
    for (int r = 0; r < size; r++) {
        if (r == victim)
            continue;
        snprintf(alive, sizeof(alive), "lost rank %d", r);
        CHECK(!logged_has(alive), "the error blames rank %d, alive: %s", r, logged);
        snprintf(alive, sizeof(alive), "peer %d failed", r);
        CHECK(!logged_has(alive), "the error blames rank %d, alive: %s", r, logged);
    }
    return failed_as_expected(send, recv);
}

static int case_kill(const char *algo)
{
    const algo_env_t *ae = find_algo(algo);
    if (!ae)
        return -1;
    char *const env[] = {(char *)ae->codec, (char *)ae->algo, "ZIPCCL_TIMEOUT_S=60",
                         "ZIPCCL_MIN_BYTES=0", NULL};
    zc_harness_opts_t o = {.nranks = NRANKS,
                           .deadline_s = 90,
                           .kill_rank = victim,
                           .kill_at_step = "allreduce 2",
                           .kill_after_s = 0.05,
                           .expect_fail_mask = ((1ul << NRANKS) - 1) & ~(1ul << victim),
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    int rc = run_ranks(&o, kill_rank, NULL);
    fprintf(stderr, "rank %d killed, %s: %s\n", victim, algo, rc ? "FAILED" : "ok");
    return rc != 0;
}

static int run_case(const char *name)
{
    char algo[32], kind[32];

    if (sscanf(name, "stall-behind-%31[a-z]", algo) == 1)
        return case_stall_behind(algo);
    if (sscanf(name, "stall-%31[a-z]", algo) == 1) {
        int slow = strstr(name, "-slow") != NULL;
        return case_stall(algo, slow ? 25 : 5);
    }
    if (sscanf(name, "bad-%31[a-z]-%31[a-z]", kind, algo) == 2)
        return case_bad(kind, algo);
    if (strcmp(name, "config-codec") == 0)
        return case_config("ZIPCCL_CODEC", "qsgd", "none");
    if (strcmp(name, "config-min-bytes") == 0)
        return case_config("ZIPCCL_MIN_BYTES", "64KiB", "1MiB");
    if (strncmp(name, "kill-named-rank3", 16) == 0)
        victim = 3;
    if (strcmp(name, "kill-named") == 0 || strcmp(name, "kill-named-rank3") == 0)
        return case_kill("ring");
    if (strcmp(name, "kill-named-compressed") == 0 ||
        strcmp(name, "kill-named-rank3-compressed") == 0)
        return case_kill("scatter");
    return -1;
}

int main(int argc, char **argv)
{
    shared = shared_map(sizeof(*shared));
    return shared ? case_main(argc, argv, run_case) : 1;
}
